"""The rehearsal route (services.recall.rehearsal): a memory among the candidates that another candidate had
recalled comes back with that rehearsal's relevance on its own forgetting curve. Plain values, no database."""
from __future__ import annotations

import json
from datetime import datetime

import pytest

from services.recall.formulas import final_probability, recall_probability, required_relevance, updated_g
from services.recall.parameters import resolve_recall_params
from services.recall.rehearsal import RehearsalRoute, recall_through_rehearsals
from services.recall.scoring import RecallCandidate
from services.study.definition import StudyDefinitionError, load_study

ON = RehearsalRoute(enabled=True)
THRESHOLD, BONUS, G_UPDATE = 0.86, 0.05, 0.5


def candidate(message_id: int, r: float, *, t: float = 0.16, g: float = 1.8, recalled: bool = False,
              salience: float = 0.0, rank: int = 1) -> RecallCandidate:
    return RecallCandidate(message_id=message_id, task_id="T1", text=f"memory {message_id}", cosine=0.8, r=r, t=t,
                           g_before=g, g_after=g, p=0.1, p_final=0.1, salience=salience, recalled=recalled,
                           recalled_by="curve" if recalled else None, rank=rank, at=datetime(2026, 3, 1),
                           spacing_days=7.0)


def route(candidates, links, rule=ON):
    return recall_through_rehearsals(candidates, links, rule, threshold=THRESHOLD, salience_bonus=BONUS,
                                     g_update_salience=G_UPDATE)


def test_a_memory_reached_through_the_exchange_that_recalled_it_comes_back_on_its_own_curve():
    fact, rehearsal, other = candidate(1, 0.05, rank=3), candidate(2, 0.91, g=1.0, t=0.16, rank=1), candidate(3, 0.3)
    # the rehearsal itself is younger but never consolidated: its own curve keeps it out at r 0.91 ...
    assert float(required_relevance(rehearsal.t, rehearsal.g_before, 0.0, THRESHOLD, BONUS)) > 0.91
    # ... while the fact, consolidated by that recall (g 1.8), is reached with the rehearsal's r
    after, decisions = route([rehearsal, other, fact], {2: frozenset({1})})
    recalled = after[2]
    expected_p = float(final_probability(recall_probability(0.91, fact.t, fact.g_before), 0.0, BONUS))
    assert expected_p >= THRESHOLD
    assert recalled.recalled and recalled.recalled_by == "rehearsal"
    assert (recalled.via_message_id, recalled.via_r) == (2, 0.91)
    assert recalled.via_p_final == pytest.approx(expected_p)
    assert recalled.r == 0.05 and recalled.p_final == 0.1  # the direct scores stay as the curve computed them
    assert recalled.g_after == pytest.approx(float(updated_g(1.8, 7.0, 0.0, G_UPDATE)))
    assert after[:2] == [rehearsal, other]
    assert decisions == [{"message_id": 1, "via_message_id": 2, "r": 0.05, "via_r": 0.91,
                          "p_final": pytest.approx(expected_p), "recalled": True, "reason": "reached"}]


def test_both_routes_must_be_candidates_a_link_to_a_memory_outside_the_top_k_recalls_nothing():
    rehearsal = candidate(2, 0.99, rank=1)
    after, decisions = route([rehearsal, candidate(3, 0.2, rank=2)], {2: frozenset({1})})
    assert not any(c.recalled for c in after) and decisions == []


def test_the_curve_decides_with_the_memory_s_own_age_and_g():
    # a memory last recalled long ago (t large for its g) is not carried by an equally relevant rehearsal
    old = candidate(1, 0.1, t=0.9, g=1.8)
    assert float(required_relevance(old.t, old.g_before, 0.0, THRESHOLD, BONUS)) > 0.95
    after, decisions = route([candidate(2, 0.95), old], {2: frozenset({1})})
    assert not after[1].recalled
    assert decisions[0]["reason"] == "below_threshold" and decisions[0]["p_final"] < THRESHOLD
    # the salience bonus counts on this route as on the curve's
    salient = candidate(1, 0.1, t=0.3, g=1.8, salience=1.0)
    plain = candidate(1, 0.1, t=0.3, g=1.8, salience=0.0)
    assert route([candidate(2, 0.88), salient], {2: frozenset({1})})[0][1].recalled
    assert not route([candidate(2, 0.88), plain], {2: frozenset({1})})[0][1].recalled


def test_already_recalled_and_less_relevant_rehearsals_are_recorded_and_change_nothing():
    fact = candidate(1, 0.9, recalled=True)
    after, decisions = route([fact, candidate(2, 0.95, rank=2)], {2: frozenset({1})})
    assert after[0] == fact and decisions[0]["reason"] == "already_recalled"
    weak = candidate(1, 0.5)
    after, decisions = route([weak, candidate(2, 0.4, rank=2)], {2: frozenset({1})})
    assert not after[0].recalled and decisions[0]["reason"] == "not_more_relevant"


def test_the_most_relevant_of_several_rehearsals_is_the_route():
    after, decisions = route([candidate(2, 0.7), candidate(4, 0.93), candidate(1, 0.0)],
                             {2: frozenset({1}), 4: frozenset({1, 9})})
    assert after[2].recalled and after[2].via_message_id == 4 and decisions[0]["via_r"] == 0.93


def test_off_the_candidates_are_the_curve_s():
    before = [candidate(2, 0.95), candidate(1, 0.0)]
    after, decisions = route(before, {2: frozenset({1})}, RehearsalRoute(enabled=False))
    assert after == before and decisions is None


def test_the_setting_is_validated_by_name_and_the_default_study_turns_it_on():
    assert load_study().memory.recall.rehearsal_route.enabled is True
    base = json.loads(json.dumps(load_study().memory.recall_config))
    assert resolve_recall_params({**base, "rehearsal_route": None}).rehearsal_route.enabled is False
    for bad, words in (({"enabled": "yes"}, "enabled"), ({"enabled": True, "depth": 2}, "depth"), ([True], "object")):
        with pytest.raises(ValueError, match=words):
            resolve_recall_params({**base, "rehearsal_route": bad})
    for bad in ({"enabled": 1}, {"on": True}):
        with pytest.raises(StudyDefinitionError, match="rehearsal_route"):
            load_study(overrides={"memory": {"recall": {"rehearsal_route": bad}}})
    params = resolve_recall_params(base)
    assert params.to_dict()["rehearsal_route"] == {"enabled": True}
