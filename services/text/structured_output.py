"""Robust JSON out of model text, validated against a schema.

Models asked for JSON still wrap it: a ```json fence, a sentence before or after,
a reasoning model's ``<think>...</think>`` block, a byte-order mark. JSON mode makes
this rarer, not impossible, and the offline or a fallback provider may not support
it at all. ``parse_json_object`` finds the first complete JSON object in the text;
``validate`` checks it against a JSON Schema. Both raise ``StructuredOutputError``
with a short excerpt of what was wrong, never a partial result.
"""
from __future__ import annotations

import json
import re
from typing import Any

import jsonschema

_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(?:json|JSON|javascript|js)?[ \t]*\r?\n?(.*?)```", re.DOTALL)


class StructuredOutputError(ValueError):
    """The text holds no usable JSON object, or the object does not match the schema."""


def _excerpt(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _top_level_braces(text: str) -> list[int]:
    """Positions of ``{`` that open an outermost object. An object nested in a broken (e.g.
    truncated) one is never offered on its own: that would pass a fragment off as the answer."""
    starts: list[int] = []
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"' and depth:
            in_string = True
        elif char == "{":
            if depth == 0:
                starts.append(index)
            depth += 1
        elif char == "}" and depth:
            depth -= 1
    return starts


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text``: the whole text, else a fenced block, else the first
    ``{...}`` that parses (so leading prose and trailing remarks are ignored)."""
    if not isinstance(text, str):
        raise StructuredOutputError(f"expected model text, got {type(text).__name__}")
    cleaned = _THINK_BLOCK.sub("", text.lstrip("\ufeff")).strip()
    if not cleaned:
        raise StructuredOutputError("the model returned no text where a JSON object was expected")
    candidates = [cleaned] + [block.strip() for block in _FENCE.findall(cleaned)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for candidate in candidates:
        for start in _top_level_braces(candidate):
            try:
                value, _ = decoder.raw_decode(candidate, start)
            except ValueError:
                continue
            if isinstance(value, dict):
                return value
    raise StructuredOutputError(f"no JSON object found in the model output: {_excerpt(cleaned)!r}")


def validate(obj: Any, schema: dict[str, Any]) -> None:
    """Raise ``StructuredOutputError`` naming the first (most relevant) schema violation."""
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    error = jsonschema.exceptions.best_match(validator_class(schema).iter_errors(obj))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise StructuredOutputError(f"schema violation at {where}: {error.message}")


def parse_and_validate(text: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``parse_json_object`` then ``validate``: the object, or ``StructuredOutputError``."""
    obj = parse_json_object(text)
    validate(obj, schema)
    return obj
