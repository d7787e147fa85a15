"""Bot participants: the scripts plant what they claim to, and a small offline run shows the expected
manipulation pattern (L1 nothing, L2 only its recent-turn window, L3/L4 the profile, L4 recall)."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "simulate_participants.py"
spec = importlib.util.spec_from_file_location("simulate_participants", SCRIPT)
sim = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = sim  # dataclasses look their module up there
spec.loader.exec_module(sim)


@pytest.mark.parametrize("language", ["zh", "en"])
def test_scripts_plant_each_fact_once_and_probes_never_name_one(language):
    script = sim.SCRIPTS[language]
    planted = {}
    for task_id, turns in script.items():
        for index, turn in enumerate(turns):
            found = sim.facts_in(turn.text)
            if turn.kind.startswith("fact:"):
                assert task_id == "T1" and found == {turn.kind.split(":")[1]}, turn.text
                planted[turn.kind.split(":")[1]] = index
            else:
                assert found == set(), f"{turn.kind} names a fact: {turn.text}"
    assert set(planted) == set(sim.FACT_IDS)
    t1 = len(script["T1"])
    assert t1 > 7, "T1 must be longer than L2's 7-turn window"
    for fact in sim.FACTS:
        in_window = planted[fact.id] >= t1 - 7
        assert in_window is fact.late, fact.id
    assert all(any(t.kind.startswith("probe:") for t in script[task]) for task in sim.PROBE_TASKS)


def test_context_facts_by_section():
    context = {
        "profile": {"text": "基本信息：姓名：林晓雨 [T1]\n限制：对海鲜过敏 [T1]"},
        "recent_turns": [{"user": "周末我最喜欢去爬山", "assistant": "I see. You have a cat?"}],
        "recalled": [{"message_id": 3, "text": "I'm applying for PhD programmes"}],
        "summary": {"text": "from Edinburgh"},
    }
    found = sim.context_facts(context)
    assert found == {"profile": {"name", "allergy"}, "recent_turns": {"hobby", "cat"}, "recalled": {"phd"},
                     "other": {"hometown"}}
    assert sim.context_facts(None) == {s: set() for s in sim.SOURCES}
    # word boundaries: "application" is not a cat, "Alexander" is not Alex
    assert sim.facts_in("my application, Alexander") == set()


def test_recalled_memories_are_judged_by_the_rule_the_reply_was_built_with():
    params = {"candidates": {"min_content_words": 1, "min_salience": 0.5}}
    assert not sim.carries_content({"text": "好的，谢谢！", "salience": 0.0}, params)
    assert not sim.carries_content({"text": "Okay, that's all for today. Thanks for chatting with me!"}, params)
    assert sim.carries_content({"text": "我对海鲜过敏", "salience": 0.1}, params)
    assert sim.carries_content({"text": "呜呜呜……", "salience": 0.8}, params)
    assert sim.carries_content({"text": "好的", "salience": 0.0}, {"candidates": {"min_content_words": 0}})


def test_a_small_offline_run_shows_the_expected_pattern():
    lines = []
    report = sim.run_simulation(per_group=1, language="zh", day_seconds=1.0, log=lines.append)
    assert report["config"]["bots"] == 4 and report["config"]["languages"] == ["zh"]
    assert not [p["errors"] for p in report["participants"] if p["errors"]]
    groups = sorted(p["memory_group"] for p in report["participants"])
    assert groups == ["L1", "L2", "L3", "L4"]
    for participant in report["participants"]:
        assert participant["tasks_done"] == ["T1", "T2", "T3", "T4"]
        assert set(participant["tasks"]) == {"T2", "T3", "T4"}
    rows = {(r["group"], r["task"]): r for r in report["table"]}
    assert set(rows) == {(g, t) for g in ("L1", "L2", "L3", "L4") for t in ("T2", "T3", "T4")}
    for row in report["table"]:
        assert {"n", "facts_mean", "from_profile_mean", "from_recent_turns_mean", "from_recalled_mean",
                "recalled_memories_mean", "by_fact"} <= set(row)
    # L1: nothing at all
    assert all(rows[("L1", t)]["facts_mean"] == 0 for t in ("T2", "T3", "T4"))
    # L2 at T2: only the late T1 fact, verbatim from the recent turns
    l2 = rows[("L2", "T2")]
    assert {f for f, n in l2["by_fact"].items() if n} == sim.LATE_FACTS
    assert l2["from_profile_mean"] == 0 and l2["from_recalled_mean"] == 0
    # L3 and L4: the early facts arrive through the consolidated profile
    for group in ("L3", "L4"):
        for task in ("T2", "T3", "T4"):
            seen = {f for f, n in rows[(group, task)]["by_fact"].items() if n}
            assert seen & sim.EARLY_FACTS, (group, task)
            assert rows[(group, task)]["from_profile_mean"] > 0
            assert rows[("L4", task)]["facts_mean"] >= rows[("L3", task)]["facts_mean"]
    assert "L4 never recalls a message without content (acknowledgements, generic questions)" in {
        c["check"] for c in report["checks"]}
    by_name = {c["check"]: c for c in report["checks"]}
    for name, check in by_name.items():
        if not name.startswith("L4 recalls"):  # recall depends on the embedder's calibration; reported, not forced
            assert check["passed"], (name, check["detail"])
    text = sim.format_report(report)
    assert "Manipulation check" in text and "PASS  L1 remembers none" in text
    assert any(line.startswith("registered 4 bots") for line in lines)
