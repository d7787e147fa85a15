"""Probe recall: what counts as a hit, a fact asked before and a leaking control, the verdicts per language,
and one offline run of the hand-made fixture through the HTTP chat path (scripts/probe_recall.py)."""
import importlib.util
import json
from pathlib import Path

import pytest

from services.research.bots.client import Bot, SentTurn
from services.research.probes import recall as pr
from services.research.probes.personas import load_probe_file

# probe personas walk T1-T4 through the chat path with the CPU embedder: untraced when the suite measures coverage
pytestmark = pytest.mark.untraced

FIXTURE = "tests/fixtures/probe_personas_small.json"


def walked(persona, recalled_at):
    """A bot that walked ``persona`` and the admin's record of it; ``recalled_at[(task, index)]`` lists the T1
    positions the reply's recalled section held (L3-like recent turns hold the last T1 message everywhere)."""
    bot = Bot(username="b", language=persona.language, client=None)
    messages, next_id = [], 1
    t1_ids = {}
    for task, turns in persona.script.items():
        for turn in turns:
            user_id, reply_id = next_id, next_id + 1
            next_id += 2
            if task == "T1":
                t1_ids[turn.index] = user_id
            bot.turns.append(SentTurn(task, turn.kind, turn.text, user_id, reply_id))
            context = {}
            if task != "T1":
                held = recalled_at.get((task, turn.index), [])
                context = {"recalled": [{"message_id": t1_ids[i]} for i in held],
                           "recall_candidates": [{"message_id": t1_ids[i], "r": 0.9} for i in held],
                           "recent_turns": [{"user_message_id": t1_ids[6], "assistant_message_id": None}]}
            messages += [{"id": user_id, "role": "user"}, {"id": reply_id, "role": "assistant",
                                                              "memory_context": context}]
    return bot, {"messages": messages}


def test_hits_asked_before_and_leaks_are_read_from_the_stored_context():
    persona = load_probe_file(FIXTURE)[0]  # zh_t01: allergy planted at T1[2], tortoises at T1[4]
    bot, record = walked(persona, {("T2", 1): [2], ("T2", 2): [4], ("T3", 1): [2], ("T3", 2): [0],
                                   ("T4", 2): [4, 2]})
    out = {(o.task, o.index): o for o in pr.outcomes_of(persona, bot, record, "L4")}
    assert out[("T2", 1)].hit and not out[("T2", 1)].asked_before and out[("T2", 1)].fact_r == 0.9
    assert not out[("T2", 3)].hit and out[("T2", 3)].fact_r is None  # tortoises asked, nothing recalled
    assert out[("T2", 2)].kind == "control" and out[("T2", 2)].leaked == ("tortoises",)
    assert out[("T3", 1)].asked_before and out[("T3", 1)].recalled_before and out[("T3", 1)].hit
    assert out[("T3", 2)].asked_before and not out[("T3", 2)].recalled_before and not out[("T3", 2)].hit
    assert not out[("T3", 4)].asked_before  # the job is first asked at T3
    assert out[("T4", 2)].hit and out[("T4", 2)].asked_before  # tortoises: asked at T2 and T3 before
    assert not out[("T4", 4)].asked_before and not out[("T4", 4)].hit
    # the last T1 message (a filler) sits in the recent turns: verbatim only for facts planted there
    assert not any(o.verbatim and not o.hit for o in out.values())
    # a context written before recalls said what recalled them: the hit is counted, its mechanism unknown
    assert out[("T2", 1)].hit_by == ("unknown",) and out[("T2", 2)].hit_by == ("unknown",)
    assert out[("T2", 3)].hit_by == ()


def test_each_hit_and_leak_says_what_brought_it_back():
    persona = load_probe_file(FIXTURE)[0]
    bot, record = walked(persona, {("T2", 1): [2], ("T2", 2): [4], ("T3", 1): [2], ("T4", 2): [4, 2]})
    how = {("T2", 1): "curve", ("T2", 2): "rehearsal", ("T3", 1): "rehearsal", ("T4", 2): "directed"}
    for message, turn in zip([m for m in record["messages"] if m["role"] == "assistant"], bot.turns, strict=True):
        place = (turn.task_id, next(t.index for t in persona.script[turn.task_id] if t.text == turn.text))
        for entry in message["memory_context"].get("recalled") or []:
            entry["recalled_by"] = how[place]
    outcomes = pr.outcomes_of(persona, bot, record, "L4")
    out = {(o.task, o.index): o for o in outcomes}
    assert out[("T2", 1)].hit_by == ("curve",) and out[("T2", 2)].hit_by == ("rehearsal",)
    assert out[("T4", 2)].hit_by == ("directed",)
    result = pr.measure({"condition": "L4", "outcomes": [o.to_dict() for o in outcomes]})
    t2 = next(r for r in result["mechanisms"] if r["task"] == "T2")
    assert t2["hits"]["curve"] == 1 and t2["leaks"]["rehearsal"] == 1 and t2["leaks"]["curve"] == 0
    assert "What brought them back" in pr.format_table(result)


def test_t3_and_t4_are_judged_on_the_facts_an_earlier_probe_brought_back():
    """A fact asked at T2 and not recalled there counts as asked before at T3 but is not in the T3 target's
    denominator (the target asks whether L4 keeps what it recalled); one that was recalled is."""
    persona = load_probe_file(FIXTURE)[0]
    every = {(t.task, t.index): list(persona.planted_by(t.facts[0])) for t in persona.probes()}
    missed_at_t2 = {key: held for key, held in every.items() if key[0] != "T2"}  # T2 recalls nothing
    result = pr.measure({"condition": "L4", "outcomes": [o.to_dict() for o in pr.outcomes_of(
        persona, *walked(persona, missed_at_t2), "L4")]})
    judged = {v["name"]: v for v in result["verdicts"]["zh"]}
    t3 = next(r for r in result["rows"] if r["task"] == "T3")
    assert t3["asked_before"]["n"] == 2 and t3["recalled_before"]["n"] == 0
    assert judged["zh T3 recalled before"]["n"] == 0 and judged["zh T3 recalled before"]["verdict"] == "no_data"
    assert judged["zh T4 recalled before"]["n"] == 2  # the T3 probes brought both back
    assert judged["zh T2 hit"]["successes"] == 0 and not result["passed"]


def test_targets_are_judged_per_language_on_pooled_personas():
    persona = load_probe_file(FIXTURE)[0]
    every = {(t.task, t.index): list(persona.planted_by(t.facts[0])) for t in persona.probes()}
    bot, record = walked(persona, every)
    result = pr.measure({"condition": "L4", "outcomes": [o.to_dict() for o in pr.outcomes_of(persona, bot, record,
                                                                                              "L4")]})
    assert result["passed"] and result["missed"] == []
    judged = {v["name"]: v for v in result["verdicts"]["zh"]}
    assert judged["zh T2 hit"]["successes"] == judged["zh T2 hit"]["n"] == 2
    assert judged["zh T3 recalled before"]["n"] == 2 and judged["zh T4 recalled before"]["n"] == 2
    assert judged["zh controls pulling in a planted fact (T2-T4)"]["n"] == 3
    t3 = next(r for r in result["rows"] if r["task"] == "T3")
    assert t3["first_asked"]["n"] == 1 and t3["implicit"]["n"] == 1 and t3["all"]["low"] < 1.0

    leaking = {key: value for key, value in every.items()}
    leaking.update({("T2", 2): [2], ("T3", 3): [2], ("T4", 3): [4]})  # every control pulls a fact in
    nothing = pr.measure({"condition": "L4", "outcomes": [o.to_dict() for o in pr.outcomes_of(
        persona, *walked(persona, leaking), "L4")]})
    controls = {v["name"]: v for v in nothing["verdicts"]["zh"]}["zh controls pulling in a planted fact (T2-T4)"]
    assert controls["verdict"] == "missed" and not nothing["passed"]
    assert nothing["missed"] == ["zh controls pulling in a planted fact (T2-T4)"]


def test_a_miss_says_whether_the_fact_was_no_candidate_too_weakly_related_or_past_its_decay_bar():
    def probe(hit=False, candidate=None, recalled_before=False, kind="implicit", task="T3"):
        return {"language": "en", "task": task, "kind": kind, "hit": hit, "recalled_before": recalled_before,
                "fact_candidate": candidate, "anchor_r": 0.82}

    assert pr.miss_reason(probe(hit=True, candidate={"r": 0.95})) is None
    assert pr.miss_reason(probe(kind="control")) is None
    assert pr.miss_reason(probe()) == "not a candidate"
    assert pr.miss_reason(probe(candidate={"r": 0.5})) == "r too low"  # below what a two-day-old memory needs
    assert pr.miss_reason(probe(candidate={"r": 0.9})) == "decay bar"  # enough at T2's age, not at its own
    rows = pr.miss_rows([probe(), probe(candidate={"r": 0.9}, recalled_before=True),
                         probe(candidate={"r": 0.9}, task="T4"), probe(hit=True, candidate={"r": 0.95})])
    assert rows == [
        {"language": "en", "task": "T3", "all": {"not a candidate": 1, "r too low": 0, "decay bar": 1},
         "recalled_before": {"not a candidate": 0, "r too low": 0, "decay bar": 1}},
        {"language": "en", "task": "T4", "all": {"not a candidate": 0, "r too low": 0, "decay bar": 1},
         "recalled_before": {"not a candidate": 0, "r too low": 0, "decay bar": 0}}]


def test_the_outcome_keeps_the_facts_best_candidate_and_the_anchor_bar():
    persona = load_probe_file(FIXTURE)[0]
    bot, record = walked(persona, {("T2", 1): [2]})
    for message in record["messages"]:
        if message.get("memory_context"):
            message["memory_context"]["recall_params"] = {"relevance": {"anchor_r": 0.82}}
    out = {(o.task, o.index): o for o in pr.outcomes_of(persona, bot, record, "L4")}
    assert out[("T2", 1)].fact_candidate["r"] == 0.9 and out[("T2", 1)].anchor_r == 0.82
    assert out[("T2", 3)].fact_candidate is None


def _script():
    spec = importlib.util.spec_from_file_location("probe_recall_script", Path("scripts/probe_recall.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_script_runs_the_fixture_through_the_chat_path_and_exits_by_the_verdicts(tmp_path, capsys):
    out = tmp_path / "probe.json"
    code = _script().main(["--files", FIXTURE, "--split", "dev,held-out", "--day-seconds", "1",
                           "--json-out", str(out)])
    printed = capsys.readouterr().out
    saved = json.loads(out.read_text(encoding="utf-8"))
    run, result = saved["run"], saved["result"]
    assert run["condition"] == "L4" and sorted(run["personas"]) == ["en_t01", "zh_t01"] and not run["problems"]
    assert code == (0 if result["passed"] else 1)
    assert "Targets (pooled per language" in printed and "zh T2 hit:" in printed
    outcomes = {(o["persona"], o["task"], o["index"]): o for o in run["outcomes"]}
    assert len(outcomes) == 2 * (5 + 6 + 6)
    # the explicit T2 question about the allergy brings its T1 message back, in the recalled episodes
    assert outcomes[("zh_t01", "T2", 1)]["hit"] and outcomes[("zh_t01", "T2", 1)]["fact_r"] > 0.8


def test_the_script_exits_2_on_a_bad_probe_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"personas": {"x": {}}}', encoding="utf-8")
    assert _script().main(["--files", str(bad)]) == 2
    assert "probe recall failed" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        _script().main(["--condition", "L9"])


def test_the_preflight_carries_the_probe_check_as_its_third_and_describes_it(settings):
    """(c) of the pre-flight: one call, one key ("probe"); its verdict lines are logged, the stored report's lines
    give each target, and a missing probe set fails the check by name instead of passing unseen."""
    from services.research import preflight
    from services.study.evidence import judge

    logged = []
    seen = {}
    missed = judge("zh T2 hit", 6, 24, 0.5).as_dict()

    def check(settings_, make_app, *, day_seconds, log):
        seen.update(day_seconds=day_seconds, study=settings_.study)
        return {"verdict": "failed", "passed": False, "lines": ["zh T2 hit: 25.0% — missed"], "targets": [missed]}

    result = preflight._probe_recall(settings, None, 2.0, logged.append, check)
    assert result["verdict"] == "failed" and seen == {"day_seconds": 2.0, "study": settings.study}
    assert logged == ["(c) probe recall check: failed", "      zh T2 hit: 25.0% — missed"]
    outcome = preflight.PreflightOutcome(False, {"passed": False, "study_hash": "ab" * 32, "created_at": "now",
                                                 "id": 1, "embedder_model": "e", "chat_model": "c",
                                                 "checks": {"calibration": {"verdict": "passed", "passed": True},
                                                            "manipulation": {"verdict": "passed", "passed": True},
                                                            "probe": result}})
    described = preflight.describe(outcome)
    assert "(c) probe recall check: failed" in described and "failed: probe recall check" in described
    assert "zh T2 hit: 25.0% (6/24;" in described and "— missed" in described
    missing = pr.probe_recall_check(settings, None, files=["/nonexistent/probes.json"], log=logged.append)
    assert missing["verdict"] == "failed" and not missing["passed"] and "no such file" in missing["reason"]
