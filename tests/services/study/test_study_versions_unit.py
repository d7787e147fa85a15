"""The pure parts of services.study.versions: diffs, whole-number floats, problem keys."""
from __future__ import annotations

from services.study.definition import problem_of
from services.study.versions import conform_numbers, definition_hash, diff, render


def test_diff_names_added_removed_and_changed_paths():
    before = {"a": 1, "tasks": [{"id": "T1", "title": {"en": "x"}}], "gone": True}
    after = {"a": 1.0, "tasks": [{"id": "T1", "title": {"en": "y"}}, {"id": "T2"}], "new": [1]}
    changes = {(c["path"], c["op"]) for c in diff(before, after)}
    assert changes == {("tasks[0].title.en", "changed"), ("tasks[1]", "added"), ("gone", "removed"),
                       ("new", "added")}
    assert diff({"flag": True}, {"flag": 1}) == [{"path": "flag", "op": "changed", "before": True, "after": 1}]


def test_whole_numbers_take_back_the_reference_floats_and_the_hash():
    reference = {"timing": {"idle_gap_seconds": 120.0, "min_chars": 24}, "weights": [0.5, 1.0]}
    browser = {"timing": {"idle_gap_seconds": 120, "min_chars": 24}, "weights": [0.5, 1], "flag": True}
    conformed = conform_numbers(browser, reference)
    assert conformed["timing"] == {"idle_gap_seconds": 120.0, "min_chars": 24}
    assert isinstance(conformed["timing"]["min_chars"], int) and isinstance(conformed["weights"][1], float)
    assert conformed["flag"] is True
    assert definition_hash({k: v for k, v in conformed.items() if k != "flag"}) == definition_hash(reference)


def test_problem_keys_are_read_from_the_messages():
    assert problem_of("unknown key tasks.T1.titel; allowed here: id").key == "tasks.T1.titel"
    assert problem_of("missing key timing.idle_gap_seconds").code == "missing_key"
    wrong = problem_of("timing.min_active_seconds must be float, not 'x'")
    assert (wrong.key, wrong.code) == ("timing.min_active_seconds", "wrong_type")
    assert problem_of("task ids must be unique").key == ""


def test_render_writes_json_and_yaml():
    import json

    import yaml

    definition = {"name": "研究", "n": 1.5}
    assert json.loads(render(definition, "json")) == definition
    assert yaml.safe_load(render(definition, "yaml")) == definition
    assert "研究" in render(definition, "yaml")
