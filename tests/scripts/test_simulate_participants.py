"""Bot participants: the scripts plant what they claim to, and a small offline run shows the expected
manipulation pattern (L1 nothing, L2 only its recent-turn window, L3/L4 the profile, L4 recall)."""
from __future__ import annotations

import functools
import importlib.util
import threading
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from app import create_app
from services.memory import registry
from services.memory.base import BeyondBaseline, ManipulationCheck, MemoryCondition
from services.research import simulation as sim
from services.research.bots import client, personas


@pytest.mark.parametrize("language", ["zh", "en"])
def test_scripts_plant_each_fact_once_and_probes_never_name_one(language):
    script = personas.SCRIPTS[language]
    planted = {}
    for task_id, turns in script.items():
        for index, turn in enumerate(turns):
            found = personas.facts_in(turn.text)
            if turn.kind.startswith("fact:"):
                assert task_id == "T1" and found == {turn.kind.split(":")[1]}, turn.text
                assert personas.specifics_in(turn.text) <= found, turn.text
                planted[turn.kind.split(":")[1]] = index
            else:
                assert found == set(), f"{turn.kind} names a fact: {turn.text}"
                assert personas.specifics_in(turn.text) == set(), f"{turn.kind} names a specific: {turn.text}"
    assert set(planted) == set(personas.FACT_IDS)
    t1 = len(script["T1"])
    assert t1 > 7, "T1 must be longer than L2's 7-turn window"
    for fact in personas.FACTS:
        in_window = planted[fact.id] >= t1 - 7
        assert in_window is fact.late, fact.id
    assert all(any(t.kind.startswith("probe:") for t in script[task]) for task in personas.PROBE_TASKS)
    # every planted specific is planted, and each probe task asks about at least one of them
    t1_specifics = set().union(*(personas.specifics_in(t.text) for t in script["T1"]))
    assert t1_specifics == set(personas.SPECIFICS)
    for task in personas.PROBE_TASKS:
        asked = {t.kind.split(":")[1].removesuffix("_detail") for t in script[task] if t.kind.endswith("_detail")}
        assert asked and asked <= set(personas.SPECIFICS), task


def _participant(group, language, contexts_by_task, code="P"):
    """A participant record as ``analyse`` makes it, from {task: [(message, context), ...]}."""
    tasks, replies = {}, []
    for task, pairs in contexts_by_task.items():
        facts = set()
        for message, context in pairs:
            facts |= set().union(*personas.context_facts(context).values())
            replies.append({"task": task, "kind": "probe:x", "message": message,
                            "specifics": sorted(personas.context_specifics(context))})
        tasks[task] = {"facts": sorted(facts)}
    return {"memory_group": group, "language": language, "participant_code": code, "tasks": tasks,
            "replies": replies}


PROFILE = {"profile": {"text": "限制：对海鲜过敏 [T1]\n社交：养了一只猫，叫麻薯 [T1]"}}
RECALLED = {**PROFILE, "recalled": [{"message_id": 1, "task_id": "T1",
                                     "text": "用户: 我对海鲜过敏，吃一点虾就会全身起疹子。"}]}


def _run(l4_context, replies=4):
    messages = [f"probe {i}" for i in range(replies)]
    by_task = {task: [(m, PROFILE) for m in messages] for task in personas.PROBE_TASKS}
    l4_by_task = {task: [(m, l4_context(task, i)) for i, m in enumerate(messages)] for task in personas.PROBE_TASKS}
    return sim.check_beyond_baseline([_participant("L3", "zh", by_task), _participant("L4", "zh", l4_by_task)])


def test_manipulation_check_fails_when_l4_equals_l3():
    [check] = _run(lambda task, i: PROFILE)
    assert not check["passed"]
    # 0 of 4 replies per task cannot miss 30 % or 15 % on its own (the one-sided interval reaches it) ...
    assert all(row["share"] == 0 and row["verdict"] == "within_error" for row in check["rows"])
    # ... but pooled over the tasks, 0 of 12 misses the 20 % the tasks need together
    [pooled] = check["pooled"]
    assert (pooled["beyond"], pooled["replies"], pooled["min_share"], pooled["verdict"]) == (0, 12, 0.2, "missed")
    assert "T2 zh: 0/4 = 0% (need 30%; within error)" in check["detail"]
    assert "all zh: 0/12 = 0% (need 20%; missed)" in check["detail"]


def test_manipulation_check_judges_each_share_by_the_pre_registered_rule():
    # two of four replies at T2 (50 %), one of four at T3 and T4 (25 %): met everywhere, passes
    [check] = _run(lambda task, i: RECALLED if i < (2 if task == "T2" else 1) else PROFILE)
    assert check["passed"] and {r["verdict"] for r in check["rows"] + check["pooled"]} == {"met"}, check["detail"]
    # one of twenty at every task: T2 (5 % against 30 %) is missed, T3 and T4 (against 15 %) within error: fails
    [check] = _run(lambda task, i: RECALLED if i < 1 else PROFILE, replies=20)
    rows = {row["task"]: row for row in check["rows"]}
    assert not check["passed"] and rows["T2"]["verdict"] == "missed" and not rows["T2"]["passed"]
    assert rows["T3"]["verdict"] == "within_error" and rows["T3"]["passed"]
    # a share decided by one reply: 5 of 20 at T2 (25 %, one short of 30 %) is within error, and the check passes
    [check] = _run(lambda task, i: RECALLED if i < (5 if task == "T2" else 3) else PROFILE, replies=20)
    rows = {row["task"]: row for row in check["rows"]}
    assert rows["T2"]["verdict"] == "within_error" and check["passed"], check["detail"]
    assert (rows["T2"]["beyond"], rows["T2"]["replies"]) == (5, 20) and rows["T2"]["low"] < 0.25 < rows["T2"]["high"]
    # a specific L3 holds too does not count
    l3_too = {"profile": {"text": "对海鲜过敏，吃虾起疹子"}}
    rows = sim.beyond_baseline([_participant("L3", "zh", {"T2": [("q", l3_too)]}),
                                _participant("L4", "zh", {"T2": [("q", RECALLED)]})], "L4")
    assert rows[0]["beyond"] == 0


def test_manipulation_check_fails_without_l4_replies_in_a_language():
    l3 = _participant("L3", "en", {t: [("q", PROFILE)] for t in personas.PROBE_TASKS})
    l4 = _participant("L4", "en", {"T2": [("q", RECALLED)]})
    [check] = sim.check_beyond_baseline([l3, l4])
    assert not check["passed"] and "no L4 replies at T3 en, T4 en" in check["detail"]


def test_summary_conditions_must_hold_the_allergy_at_t2():
    good = _participant("S1", "zh", {"T2": [("q", {"summary": {"text": "用户对海鲜过敏"}})]})
    bad = _participant("R1", "en", {"T2": [("q", {"r1_memory": {"text": "has a cat"}})]}, code="R")
    checks = {c["check"]: c for c in sim.check_held_facts([good, bad])}
    assert checks["S1's T2 context holds the planted allergy"]["passed"]
    assert not checks["R1's T2 context holds the planted allergy"]["passed"]


def test_context_facts_by_section():
    context = {
        "profile": {"text": "基本信息：姓名：林晓雨 [T1]\n限制：对海鲜过敏 [T1]"},
        "recent_turns": [{"user": "周末我最喜欢去爬山", "assistant": "I see. You have a cat?"}],
        "recalled": [{"message_id": 3, "text": "I'm applying for PhD programmes"}],
        "summary": {"text": "from Edinburgh"},
    }
    found = personas.context_facts(context)
    assert found == {"profile": {"name", "allergy"}, "recent_turns": {"hobby", "cat"}, "recalled": {"phd"},
                     "other": {"hometown"}}
    assert personas.context_facts(None) == {s: set() for s in personas.SOURCES}
    # word boundaries: "application" is not a cat, "Alexander" is not Alex
    assert personas.facts_in("my application, Alexander") == set()


def test_recalled_memories_are_judged_by_the_rule_the_reply_was_built_with():
    params = {"candidates": {"min_content_words": 1, "min_salience": 0.5}}
    assert not sim.carries_content({"text": "好的，谢谢！", "salience": 0.0}, params)
    assert not sim.carries_content({"text": "Okay, that's all for today. Thanks for chatting with me!"}, params)
    assert sim.carries_content({"text": "我对海鲜过敏", "salience": 0.1}, params)
    assert sim.carries_content({"text": "呜呜呜……", "salience": 0.8}, params)
    assert sim.carries_content({"text": "好的", "salience": 0.0}, {"candidates": {"min_content_words": 0}})


def test_a_small_offline_run_shows_the_expected_pattern(calibration_embedder):
    # The offline embedder answering from tests/fixtures/embeddings.npz (tests/embedding_cache.py: the same vectors
    # as the CPU model, checked there), as the pre-flight test's bots do: the bots' texts are not embedded afresh.
    lines = []
    report = sim.run_simulation(per_group=1, language="both", day_seconds=1.0, conditions=["L1", "L2", "L3", "L4"],
                                log=lines.append, make_app=functools.partial(create_app, embedder=calibration_embedder))
    assert report["config"]["bots"] == 8 and report["config"]["languages"] == ["zh", "en"]
    assert report["config"]["day_seconds"] == 1.0
    assert not [p["errors"] for p in report["participants"] if p["errors"]]
    # --per-group 1 --language both: every group once in each language
    assert Counter((p["memory_group"], p["language"]) for p in report["participants"]) == {
        (g, lang): 1 for g in ("L1", "L2", "L3", "L4") for lang in ("zh", "en")}
    assert {lang: r["bots"] for lang, r in report["by_language"].items()} == {"zh": 4, "en": 4}
    assert all(set(r["beyond"][0]["shares"]) == set(personas.PROBE_TASKS) for r in report["by_language"].values())
    for participant in report["participants"]:
        assert participant["tasks_done"] == ["T1", "T2", "T3", "T4"]
        assert set(participant["tasks"]) == {"T2", "T3", "T4"}
    rows = {(r["group"], r["task"]): r for r in report["table"] if r["language"] == "zh"}
    assert set(rows) == {(g, t) for g in ("L1", "L2", "L3", "L4") for t in ("T2", "T3", "T4")}
    for row in report["table"]:
        assert {"n", "facts_mean", "from_profile_mean", "from_recent_turns_mean", "from_recalled_mean",
                "recalled_memories_mean", "by_fact"} <= set(row)
    # L1: nothing at all
    assert all(rows[("L1", t)]["facts_mean"] == 0 for t in ("T2", "T3", "T4"))
    # L2 at T2: only the late T1 fact, verbatim from the recent turns
    l2 = rows[("L2", "T2")]
    assert {f for f, n in l2["by_fact"].items() if n} == personas.LATE_FACTS
    assert l2["from_profile_mean"] == 0 and l2["from_recalled_mean"] == 0
    # L3 and L4: the early facts arrive through the consolidated profile
    for group in ("L3", "L4"):
        for task in ("T2", "T3", "T4"):
            seen = {f for f, n in rows[(group, task)]["by_fact"].items() if n}
            assert seen & personas.EARLY_FACTS, (group, task)
            assert rows[(group, task)]["from_profile_mean"] > 0
            assert rows[("L4", task)]["facts_mean"] >= rows[("L3", task)]["facts_mean"]
    assert "L4 never recalls a message without content (acknowledgements, generic questions)" in {
        c["check"] for c in report["checks"]}
    by_name = {c["check"]: c for c in report["checks"]}
    for name, check in by_name.items():
        # recall depends on the embedder's calibration and a one-bot run's timing: reported, not forced here
        # (the manipulation check itself is tested on fixtures above; docs/simulation.md records a full run)
        if not name.startswith(("L4 recalls", "L4's context")):
            assert check["passed"], (name, check["detail"])
    text = sim.format_report(report)
    assert "Manipulation check" in text and "PASS  L1 remembers none" in text
    assert "pilot day = 1.0 s" in text and "Per language:" in text
    assert "\n  zh: 4 bots; L4 beyond L3 T2 " in text and "\n  en: 4 bots; L4 beyond L3 T2 " in text
    assert any(line.startswith("registered 8 bots, 4 at a time") and "8 walk: L1 2, L2 2, L3 2, L4 2" in line
               for line in lines)
    assert sim.failed_checks(report) == [c["check"] for c in report["checks"] if not c["passed"]]


class _DeclaredOnly(MemoryCondition):
    """A condition that exists only in this test: the script must check it from its declaration alone."""

    id = "X7"
    name = "declared_only"
    manipulation_check = ManipulationCheck(
        "the cat at T3, and specifics the sensory condition lacks at T2",
        holds_facts_at=(("T3", ("cat",)),), beyond=BeyondBaseline("L1", min_share=(("T2", 0.5),)))


class _Forgetful(MemoryCondition):
    id = "X8"
    name = "forgetful"
    manipulation_check = ManipulationCheck("nothing", holds_no_fact=True)


@pytest.fixture
def declared_conditions():
    conditions = [registry.register(_DeclaredOnly()), registry.register(_Forgetful())]
    yield conditions
    for condition in conditions:
        registry.unregister(condition.id)


def test_a_condition_registered_from_a_test_module_is_checked_by_its_declaration(declared_conditions):
    x7 = _participant("X7", "en", {"T2": [("q", RECALLED)], "T3": [("q", PROFILE)], "T4": [("q", {})]}, code="A")
    l1 = _participant("L1", "en", {task: [("q", {})] for task in personas.PROBE_TASKS}, code="B")
    x8 = _participant("X8", "en", {"T2": [("q", PROFILE)]}, code="C")
    held = {c["check"]: c for c in sim.check_held_facts([x7, l1, x8])}
    assert list(held) == ["X7's T3 context holds the planted cat"] and held[next(iter(held))]["passed"]
    [beyond] = sim.check_beyond_baseline([x7, l1, x8])
    assert beyond["check"].startswith("X7's context holds a planted specific that L1's context")
    assert beyond["passed"] and "T2 en: 1/1 = 100% (need 50%; met)" in beyond["detail"]
    pattern = {c["check"]: c for c in sim.check_pattern([x7, l1, x8], table=[])}
    assert pattern["L1 remembers none of the planted facts"]["passed"]
    assert not pattern["X8 remembers none of the planted facts"]["passed"]
    assert "C T2: ['allergy', 'cat']" in pattern["X8 remembers none of the planted facts"]["detail"]
    # the same declaration fails when the condition holds nothing its baseline lacks (eight replies at T2: 0 of 8
    # is missed against 50 %; with one reply the interval could not tell)
    probes = {"T2": [(f"q{i}", {}) for i in range(8)], "T3": [("q", {})], "T4": [("q", {})]}
    x7_like_l1 = _participant("X7", "en", probes, code="A")
    l1 = _participant("L1", "en", probes, code="B")
    assert not any(c["passed"] for c in sim.check_held_facts([x7_like_l1, l1]) + sim.check_beyond_baseline(
        [x7_like_l1, l1]))


# ---------------------------------------------------------------------------------------------
# The flags do what they say (issue 17, item 5)
# ---------------------------------------------------------------------------------------------

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "simulate_participants.py"


def _script():
    spec = importlib.util.spec_from_file_location("simulate_participants_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_per_group_gives_every_group_n_bots_per_language_even_mid_block():
    with sim.temporary_server(create_app, 10.0, ["L1", "L2", "L3", "L4"]) as server:
        for i in range(3):  # people registered before: the current permuted block is part-filled
            client.HttpClient(server.base_url).expect("POST", "/api/auth/register", {
                "username": f"person{i}", "password": "Qv7-tarn-Lobelia-88", "consent": True, "language": "zh"})
        admin = client.Admin(server.base_url, server.admin_user, server.admin_password)
        enrolment = client.enrol(server.base_url, admin, 1, ["zh", "en"])
        assert Counter((b.memory_group, b.language) for b in enrolment.bots) == {
            (g, lang): 1 for g in ("L1", "L2", "L3", "L4") for lang in ("zh", "en")}
        rows = {r["id"]: r for r in admin.get("/api/admin/participants")["participants"]}
        walking = {b.user_id for b in enrolment.bots}
        for bot in enrolment.bots:  # the account speaks the bot's language: its replies and scripts follow it
            assert rows[bot.user_id]["status"] == "active"
            assert bot.client.expect("GET", "/api/auth/me")["user"]["language"] == bot.language
        extras = [r for r in rows.values() if r["username"].startswith("bot_") and r["id"] not in walking]
        assert len(extras) == enrolment.registered - 8 == sum(enrolment.withdrawn.values())
        assert all(r["status"] == "withdrawn" for r in extras)
        assert enrolment.registered % 4 == 0  # a block's width at a time
        facts = client.server_facts(server.base_url)
        assert facts["pilot_day_seconds"] == 10.0


def test_a_live_server_whose_task_timer_is_too_short_is_refused_by_name(settings):
    from werkzeug.serving import make_server

    app = create_app(replace(settings, day_seconds=10.0))  # pilot mode: a 900 s task lasts 0.1 s
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        with pytest.raises(RuntimeError, match="PILOT_TIMER_SCALE"):
            client.server_facts(f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        thread.join(timeout=10)
        app.extensions["memory_lab"].db.dispose()


def test_the_script_exits_2_naming_why_it_could_not_run(capsys):
    code = _script().main(["--per-group", "1", "--base-url", "http://127.0.0.1:9", "--admin-password", "x"])
    assert code == 2
    assert "simulation failed" in capsys.readouterr().err


def test_the_script_exits_1_only_on_a_failed_check_and_names_it(monkeypatch, capsys):
    script = _script()
    failing = {"check": "L4's context holds a planted specific that L3's context lacks", "passed": False,
               "detail": "T2 zh: 0/9 = 0% (need 30%)"}
    passing = {"check": "L1 remembers none of the planted facts", "passed": True, "detail": "no fact"}

    def report(checks):
        return {"config": {"server": "x", "day_seconds": 10.0, "bots": 0, "per_group": 1, "languages": ["zh"],
                           "duration_seconds": 1, "enrolment": "registered 0 bots"},
                "participants": [], "table": [], "checks": checks, "by_language": {}, "ok": False}

    monkeypatch.setattr(script, "run_simulation", lambda **kwargs: report([passing, failing]))
    assert script.main(["--per-group", "1"]) == 1
    assert "manipulation check FAILED: L4's context holds a planted specific" in capsys.readouterr().err
    monkeypatch.setattr(script, "run_simulation", lambda **kwargs: report([passing]))
    assert script.main(["--per-group", "1"]) == 0
