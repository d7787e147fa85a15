"""JSON out of model text: fences, prose around it, reasoning blocks; schema validation."""
from __future__ import annotations

import pytest

from services.text.structured_output import StructuredOutputError, parse_and_validate, parse_json_object, validate

SALIENCE = {
    "type": "object",
    "required": ["intensity", "disclosure", "value"],
    "properties": {k: {"type": "number", "minimum": 0, "maximum": 1} for k in ("intensity", "disclosure", "value")},
}


@pytest.mark.parametrize(("text", "expected"), [
    ('{"a": 1}', {"a": 1}),
    ('```json\n{"a": {"b": [1, 2]}}\n```', {"a": {"b": [1, 2]}}),
    ('好的，结果如下：\n```\n{"goals": ["考研 [T1]"]}\n```\n希望有帮助！', {"goals": ["考研 [T1]"]}),
    ('Here you go: {"x": "a } inside a string"} -- let me know.', {"x": "a } inside a string"}),
    ('<think>maybe {"draft": true}</think>\n{"final": true}', {"final": True}),
    ('\ufeff{"bom": 1}', {"bom": 1}),
    ('Not this {broken} but this {"ok": 1}', {"ok": 1}),
])
def test_the_first_complete_object_is_found(text, expected):
    assert parse_json_object(text) == expected


@pytest.mark.parametrize("text", [
    "",
    "   ",
    "I cannot help with that.",
    "[1, 2, 3]",
    '{"profile": {"goals": ["x"]}, "removed": ',  # truncated: the inner object must not pass as the answer
])
def test_no_object_is_a_clear_error(text):
    with pytest.raises(StructuredOutputError):
        parse_json_object(text)


def test_non_text_is_refused():
    with pytest.raises(StructuredOutputError, match="expected model text"):
        parse_json_object(None)


def test_validate_names_the_offending_field():
    validate({"intensity": 0.5, "disclosure": 0.1, "value": 1}, SALIENCE)
    with pytest.raises(StructuredOutputError, match="disclosure"):
        validate({"intensity": 0.5, "disclosure": 1.7, "value": 0}, SALIENCE)
    with pytest.raises(StructuredOutputError, match="value"):
        validate({"intensity": 0.5, "disclosure": 0.2}, SALIENCE)


def test_parse_and_validate_together():
    assert parse_and_validate('分数：{"intensity": 0.9, "disclosure": 0.8, "value": 0.1}', SALIENCE)["intensity"] == 0.9
    with pytest.raises(StructuredOutputError):
        parse_and_validate('{"intensity": "high"}', SALIENCE)
