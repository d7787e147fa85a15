"""The project's token count: an approximation that needs no model's tokenizer, the same in both languages."""
from __future__ import annotations

import re

_CJK_CHARS = "\u3400-\u4dbf\u4e00-\u9fff"
_TOKEN = re.compile(rf"[{_CJK_CHARS}]|[A-Za-z0-9]+(?:['’][A-Za-z]+)?|[^\sA-Za-z0-9{_CJK_CHARS}]")


def count_tokens(text: str) -> int:
    """Approximate tokens: one per CJK character, word, number or other non-space symbol."""
    return len(_TOKEN.findall(text or ""))
