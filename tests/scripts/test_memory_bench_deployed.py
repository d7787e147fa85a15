"""The deployed-context benchmark: every condition's real context, built by the chat path's own code
on a throwaway database, and what of the evidence it hands the model."""
from __future__ import annotations

from datetime import datetime

import pytest

from services.research import memory_bench as mb
from services.research import memory_bench_deployed as md
from tests.memory_factories import EMBEDDER, T1_EN


def test_referenced_ids_items_tokens_and_verbatim_evidence():
    context = {"recent_turns": [{"user_message_id": 3, "assistant_message_id": 4}],
               "recall_candidates": [{"message_id": 6, "recalled": False}],
               "recalled": [{"message_id": 9, "text": "x"}], "fragments": [],
               "profile": {"text": "Name: Anna [T1]", "version_id": 7}, "summary": None, "r1_memory": {"text": ""}}
    assert md.referenced_message_ids(context) == {3, 4, 6, 9}
    assert md.context_items(context) == 3  # two list items and the profile; an empty R1 text is no item
    texts = {3: "short", 5: "I am allergic to shellfish, so I have to be careful.", 6: "Never handed over at all."}
    rendered = "[Profile]\nI am allergic to   shellfish, so I have to be careful."
    # 6 was only a candidate the model never saw: audit data earns no credit
    assert md.handed_over([3, 5, 6], texts, context, rendered) == {3, 5}
    assert md.count_tokens("我喜欢猫 and it's 3.5 km!") == 4 + 2 + 3 + 1 + 1


def _history() -> md.BenchHistory:
    day1 = [mb.Exchange(f"2023-05-01#{j}", q, a, datetime(2023, 5, 1, 12), 1) for j, (q, a) in enumerate(T1_EN)]
    filler = [("I watched the news this evening.", "Anything interesting?"), ("Not really, mostly weather.", "I see."),
              ("Tomorrow I have a dentist appointment.", "Good luck."), ("I need to buy groceries too.", "Sure."),
              ("My bike has a flat tyre.", "That is annoying."), ("I will fix it on Sunday.", "Good plan."),
              ("The train was late again.", "Sorry to hear."), ("Anyway, bye for now.", "Bye!")]
    day2 = [mb.Exchange(f"2023-05-02#{j}", q, a, datetime(2023, 5, 2, 12), 2) for j, (q, a) in enumerate(filler)]
    user = mb.MemoryBankUser(name="Anna", exchanges=day1 + day2, questions=["What food am I allergic to?"])
    probe = md.Probe("Anna#0", "What food am I allergic to?", ("2023-05-01#1",))
    return md.memorybank_history(user, [probe], "en")


def test_every_condition_is_measured_through_the_deployed_code():
    history = _history()
    assert history.probes[0].evidence == ("2023-05-01#1", "2023-05-01#1/reply")
    assert history.asked_at == datetime(2023, 5, 3, 12)
    with md.deployed_runtime(EMBEDDER) as runtime:
        bench = md.DeployedBench(runtime)
        assert bench.conditions == list(runtime.study.conditions)
        bench.run(history)
    out = {c: o.to_dict() for c, o in bench.outcomes.items()}
    assert all(o["probes"] == 1 for o in out.values())
    # L1 hands over nothing; L2's last seven turns are all from day 2, so the allergy is gone.
    assert out["L1"]["items_per_question"] == 0 and out["L1"]["evidence_share"] == 0
    assert out["L2"]["items_per_question"] == 7 and out["L2"]["evidence_share"] == 0
    # L3 adds the consolidated profile (one item) to its last three turns; the allergy is in the
    # profile only as a paraphrase, which is not credited.
    assert out["L3"]["items_per_question"] == 4
    # S1's fuzzy recall finds the allergy message by its words.
    assert out["S1"]["evidence_share"] >= 0.5
    for o in out.values():
        assert 0.0 <= o["evidence_share"] <= 1.0 and o["tokens_per_question"] > 0
    assert out["L4"]["tokens_per_question"] >= out["L3"]["tokens_per_question"]
    # Only L4 audits the candidates it considered (before its gate).
    assert out["L4"]["candidates_per_question"] > 0 and "candidate_evidence_share" not in out["L2"]


@pytest.mark.parametrize("speakers", [("Ann", "Bob", "Ann"), ("Bob", "Ann", "Bob")])
def test_locomo_first_speaker_is_the_participant(speakers):
    turns = [mb.Turn(f"D1:{i + 1}", 1, s, f"text {i}", datetime(2023, 1, 1)) for i, s in enumerate(speakers)]
    conv = mb.Conversation(0, "c", turns, [mb.QAItem(0, 0, "q?", 4, ("D1:2",))])
    history = md.locomo_history(conv)
    assert [t.role for t in history.turns] == ["user", "assistant", "user"]
    assert history.probes[0].evidence == ("D1:2",) and history.asked_at == datetime(2023, 1, 2, 12)
