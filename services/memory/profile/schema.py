"""The L3/L4 user profile (gist): schema, validation, incremental merge and rendering.

A profile has nine dimensions (SPEC §2): ``basic_info`` maps a key (name, age,
occupation ...) to a value; the other eight are lists. Every value and item
ends with the tag of the task it came from, e.g. ``"对海鲜过敏 [T1]"``, so the
assistant (and the researcher) can see when something was learnt.

The same schema checks the output of an LLM and of the offline rule-based
extractor, so both paths produce interchangeable profiles. Nothing here
touches the database.
"""
from __future__ import annotations

import copy
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import jsonschema

LIST_DIMENSIONS = (
    "preferences",
    "constraints",
    "goals",
    "personality",
    "social",
    "emotional_needs",
    "core_values",
    "significant_events",
)
DIMENSIONS = ("basic_info", *LIST_DIMENSIONS)

MAX_ITEM_CHARS = 200
MAX_ITEMS_PER_DIMENSION = 30

# A tag is "[T1]" or, for a fact confirmed again later, "[T1, T3]".
TAG_RE = re.compile(r"\s*\[(T[0-9A-Za-z_-]+(?:\s*,\s*T[0-9A-Za-z_-]+)*)\]\s*$")

_ITEM = {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS}
PROFILE_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "User profile (gist)",
    "type": "object",
    "properties": {
        "basic_info": {
            "type": "object",
            "propertyNames": {"type": "string", "minLength": 1, "maxLength": 40},
            "additionalProperties": _ITEM,
            "maxProperties": MAX_ITEMS_PER_DIMENSION,
        },
        **{
            name: {"type": "array", "items": _ITEM, "maxItems": MAX_ITEMS_PER_DIMENSION}
            for name in LIST_DIMENSIONS
        },
    },
    "required": list(DIMENSIONS),
    "additionalProperties": False,
}
_VALIDATOR = jsonschema.Draft202012Validator(PROFILE_SCHEMA)

DIMENSION_LABELS = {
    "basic_info": {"zh": "基本信息", "en": "Basic info"},
    "preferences": {"zh": "偏好", "en": "Preferences"},
    "constraints": {"zh": "限制", "en": "Constraints"},
    "goals": {"zh": "目标", "en": "Goals"},
    "personality": {"zh": "性格", "en": "Personality"},
    "social": {"zh": "社交与家庭", "en": "Social and family"},
    "emotional_needs": {"zh": "情感需求", "en": "Emotional needs"},
    "core_values": {"zh": "核心价值观", "en": "Core values"},
    "significant_events": {"zh": "重要事件与心事", "en": "Significant events and worries"},
}
BASIC_INFO_LABELS = {
    "name": {"zh": "姓名", "en": "name"},
    "nickname": {"zh": "大家叫TA", "en": "goes by"},
    "age": {"zh": "年龄", "en": "age"},
    "occupation": {"zh": "职业/身份", "en": "occupation"},
    "study": {"zh": "学习", "en": "studies"},
    "location": {"zh": "所在地", "en": "lives in"},
    "hometown": {"zh": "家乡", "en": "from"},
}
# When the gist must be cut to fit, what the assistant most needs comes first:
# who the person is, what could harm them, what they are working towards and worried about.
RENDER_PRIORITY = (
    "basic_info",
    "constraints",
    "goals",
    "significant_events",
    "emotional_needs",
    "social",
    "preferences",
    "core_values",
    "personality",
)


def empty_profile() -> dict[str, Any]:
    return {"basic_info": {}, **{name: [] for name in LIST_DIMENSIONS}}


def validation_errors(profile: Any) -> list[str]:
    """Schema violations plus items without a task tag; empty when the profile is valid."""
    errors = [
        f"{'/'.join(str(p) for p in error.absolute_path) or '(root)'}: {error.message}"
        for error in sorted(_VALIDATOR.iter_errors(profile), key=lambda e: list(e.absolute_path))
    ]
    if errors:
        return errors
    for dimension, item in iter_items(profile):
        if not TAG_RE.search(item):
            errors.append(f"{dimension}: item without a task tag: {item!r}")
    return errors


def iter_items(profile: dict[str, Any]) -> Iterable[tuple[str, str]]:
    for key, value in profile.get("basic_info", {}).items():
        yield f"basic_info.{key}", value
    for dimension in LIST_DIMENSIONS:
        for item in profile.get(dimension, []):
            yield dimension, item


def split_tag(item: str) -> tuple[str, list[str]]:
    """``"对海鲜过敏 [T1]"`` -> ``("对海鲜过敏", ["T1"])``."""
    match = TAG_RE.search(item)
    if not match:
        return item.strip(), []
    return item[: match.start()].strip(), [t.strip() for t in match.group(1).split(",")]


def tag(text: str, task_ids: Iterable[str]) -> str:
    ids = list(dict.fromkeys(task_ids))
    return f"{text.strip()} [{', '.join(ids)}]" if ids else text.strip()


def _norm(text: str) -> str:
    """Comparison key: case, spaces and trailing punctuation do not make a different fact."""
    return re.sub(r"[\s。.!！,，;；]+", "", text).lower()


def normalise_profile(raw: dict[str, Any], task_id: str) -> dict[str, Any]:
    """Clean a structurally valid profile: trim, drop empties and duplicates, tag untagged items.

    An item without a tag can only have come from the conversation being merged,
    so it gets the current task's tag."""
    profile = empty_profile()
    for key, value in (raw.get("basic_info") or {}).items():
        text, tags = split_tag(str(value))
        if text:
            profile["basic_info"][str(key).strip()] = tag(text, tags or [task_id])
    for dimension in LIST_DIMENSIONS:
        seen: set[str] = set()
        for item in raw.get(dimension) or []:
            text, tags = split_tag(str(item))
            if text and _norm(text) not in seen:
                seen.add(_norm(text))
                profile[dimension].append(tag(text, tags or [task_id]))
    return profile


@dataclass
class Removal:
    """A correction: drop items of these dimensions whose text contains every term."""

    dimensions: tuple[str, ...]
    terms: tuple[str, ...]
    basic_info_keys: tuple[str, ...] = ()

    def matches(self, dimension: str, item: str) -> bool:
        text = split_tag(item)[0].lower()
        return dimension in self.dimensions and all(term.lower() in text for term in self.terms)


@dataclass
class ProfileDelta:
    """What one task's conversation adds to or removes from a profile (the offline extractor's output)."""

    basic_info: dict[str, str] = field(default_factory=dict)
    additions: dict[str, list[str]] = field(default_factory=dict)
    removals: list[Removal] = field(default_factory=list)

    def add(self, dimension: str, text: str) -> None:
        items = self.additions.setdefault(dimension, [])
        if _norm(text) not in {_norm(i) for i in items}:
            items.append(text)


def apply_delta(old: dict[str, Any], delta: ProfileDelta, task_id: str) -> dict[str, Any]:
    """Incremental merge: removals first (corrections), then new facts tagged with ``task_id``.

    A fact already in the profile keeps its original tag and gains this task's
    (``[T1, T2]``), so repetition is visible without duplicating the item."""
    profile = copy.deepcopy(old) if old else empty_profile()
    for removal in delta.removals:
        for key in removal.basic_info_keys:
            if key not in delta.basic_info:  # a replaced value keeps its place
                profile["basic_info"].pop(key, None)
        for dimension in removal.dimensions:
            if dimension in LIST_DIMENSIONS:
                profile[dimension] = [i for i in profile[dimension] if not removal.matches(dimension, i)]
    for key, value in delta.basic_info.items():
        current = profile["basic_info"].get(key)
        if current and _norm(split_tag(current)[0]) == _norm(value):
            profile["basic_info"][key] = tag(value, [*split_tag(current)[1], task_id])
        else:
            profile["basic_info"][key] = tag(value, [task_id])
    for dimension, items in delta.additions.items():
        existing = profile[dimension]
        for text in items:
            index = next((n for n, i in enumerate(existing) if _norm(split_tag(i)[0]) == _norm(text)), None)
            if index is None:
                existing.append(tag(text, [task_id]))
            else:
                old_text, tags = split_tag(existing[index])
                existing[index] = tag(old_text, [*tags, task_id])
        # Keep the newest items when a dimension overflows.
        profile[dimension] = existing[-MAX_ITEMS_PER_DIMENSION:]
    return profile


def profile_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, list[str]]:
    """Items added and removed between two profiles (for dry runs and the run log)."""
    before = set(f"{d}: {i}" for d, i in iter_items(old or empty_profile()))
    after = set(f"{d}: {i}" for d, i in iter_items(new))
    return {"added": sorted(after - before), "removed": sorted(before - after)}


def render_profile(profile: dict[str, Any] | None, *, language: str = "zh", max_chars: int = 500) -> str:
    """The gist placed in the prompt: one line per dimension, at most ``max_chars`` characters.

    When everything does not fit, items are admitted in ``RENDER_PRIORITY`` order
    (newest first within a dimension) until the next one would break the cap; the
    lines are then printed in the canonical dimension order."""
    if not profile:
        return ""
    lang = "en" if language == "en" else "zh"
    candidates: list[tuple[str, str]] = []
    for dimension in RENDER_PRIORITY:
        if dimension == "basic_info":
            for key, value in profile.get("basic_info", {}).items():
                label = BASIC_INFO_LABELS.get(key, {}).get(lang, key)
                candidates.append(("basic_info", f"{label}{'：' if lang == 'zh' else ': '}{value}"))
        else:
            candidates.extend((dimension, item) for item in reversed(profile.get(dimension, [])))
    chosen: dict[str, list[str]] = {name: [] for name in DIMENSIONS}
    for dimension, text in candidates:
        chosen[dimension].append(text)
        if len(_render_lines(chosen, lang)) > max_chars:
            chosen[dimension].pop()
    return _render_lines(chosen, lang)


def _render_lines(chosen: dict[str, list[str]], lang: str) -> str:
    colon, sep = ("：", "；") if lang == "zh" else (": ", "; ")
    lines = []
    for dimension in DIMENSIONS:
        items = chosen[dimension]
        if dimension != "basic_info":
            items = list(reversed(items))  # back to the order they were learnt
        if items:
            lines.append(f"{DIMENSION_LABELS[dimension][lang]}{colon}{sep.join(items)}")
    return "\n".join(lines)
