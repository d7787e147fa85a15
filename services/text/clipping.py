"""Cutting text to a length limit, marked with an ellipsis so a reader sees it was cut."""
from __future__ import annotations

PUNCTUATION = "，,。.！!？?；;：:、 \n\t"  # trimmed from the ends of an extracted item


def clip(text: str, limit: int, *, trim: str = "", rstrip: bool = False) -> str:
    """``text`` (first stripped of ``trim`` characters) if it fits in ``limit``, else its first ``limit - 1``
    characters (``rstrip``: without trailing whitespace) and "…"."""
    text = text.strip(trim) if trim else text
    if len(text) <= limit:
        return text
    head = text[:limit - 1]
    return (head.rstrip() if rstrip else head) + "…"
