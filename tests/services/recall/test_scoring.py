"""L4's scoring of a loaded memory state (services.recall.scoring.score_recall): plain values in, the recall
decisions out, no database. Expected values are computed by hand from the curve."""
from __future__ import annotations

import ast
import math
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from services.recall import scoring
from services.recall.formulas import RelevanceMapping
from services.recall.parameters import RecallParams
from services.recall.scoring import CandidateMemory, MemoryState, score_recall

NOW = datetime(2026, 3, 10, 12, 0, 0)
DAY = 86400.0
NORMALISER = 1.0 - math.exp(-1.0)


def params(**changes) -> RecallParams:
    values = dict(preset="hand", top_k=3, threshold=0.5, salience_bonus=0.1, g0_base=1.0, g0_salience=0.5,
                  g_update_salience=0.5, time_unit="days", time_scale=1.0, relevance=RelevanceMapping("raw"))
    return RecallParams(**{**values, **changes})


def memory(message_id: int, *, days_old: float, cosine: float = 1.0, g: float | None = None,
           salience: float | None = 0.0, last_recall_days: float | None = None, **scores) -> CandidateMemory:
    return CandidateMemory(
        message_id=message_id, task_id="T1", text=f"memory {message_id}", reply=f"reply {message_id}",
        created_at=NOW - timedelta(days=days_old), consolidation_g=g, emotional_salience=salience,
        last_recall_at=None if last_recall_days is None else NOW - timedelta(days=last_recall_days),
        emotional_intensity=scores.get("intensity"), self_disclosure=scores.get("disclosure"),
        value_relevance=scores.get("value"), cosine=cosine, fused=0.5, lexical_z=0.25, dense_z=0.75)


def p_of(r: float, t: float, g: float) -> float:
    return (1.0 - math.exp(-r * math.exp(-t / g))) / NORMALISER


def test_an_empty_state_scores_nothing():
    assert score_recall(MemoryState(()), params(), now=NOW, day_seconds=DAY, language="en") == []


def test_each_candidate_is_scored_by_hand_and_only_those_over_the_threshold_are_recalled():
    state = MemoryState((memory(1, days_old=2.0), memory(2, days_old=1.0, g=5.0, salience=0.4)))
    old, fresh = score_recall(state, params(), now=NOW, day_seconds=DAY, language="en")
    # a neutral memory two days old, g0 = 1: p = 0.2002, below 0.5, kept as it was
    assert old.t == pytest.approx(2.0) and old.g_before == pytest.approx(1.0)
    assert old.p == pytest.approx(0.2002418364) and old.p_final == pytest.approx(old.p)
    assert not old.recalled and old.g_after == old.g_before and old.rank == 1
    # g = 5, one day: p = p(1, 1, 5); the salience bonus adds 0.1 * 0.4; recalled, g grows by S(1)·(1 + 0.5·0.4)
    assert fresh.p == pytest.approx(p_of(1.0, 1.0, 5.0))
    assert fresh.p_final == pytest.approx(min(1.0, p_of(1.0, 1.0, 5.0) + 0.04))
    assert fresh.recalled and fresh.rank == 2
    assert fresh.g_after == pytest.approx(5.0 + math.tanh(0.5) * (1.0 + 0.5 * 0.4))
    assert (fresh.reply, fresh.fused, fresh.lexical_z, fresh.dense_z, fresh.at) == ("reply 2", 0.5, 0.25, 0.75, NOW)


def test_time_counts_from_the_last_recall_in_study_days():
    state = MemoryState((memory(1, days_old=30.0, g=1.0, last_recall_days=0.5),))
    pilot = score_recall(state, params(), now=NOW, day_seconds=DAY / 2, language="en")[0]  # pilot: half-length days
    assert pilot.t == pytest.approx(1.0) and pilot.spacing_days == pytest.approx(1.0)
    assert pilot.p == pytest.approx(p_of(1.0, 1.0, 1.0))


def test_a_missing_salience_comes_from_the_three_scores_with_the_study_weights():
    state = MemoryState((memory(1, days_old=1.0, salience=None, intensity=1.0, disclosure=0.5, value=None),))
    default = score_recall(state, params(), now=NOW, day_seconds=DAY, language="en")[0]
    assert default.salience == pytest.approx(0.4 * 1.0 + 0.4 * 0.5)  # a missing score counts as 0
    assert default.g_before == pytest.approx(1.0 + 0.5 * default.salience)
    weighted = score_recall(state, params(), now=NOW, day_seconds=DAY, language="en",
                            salience_weights={"intensity": 0.0, "disclosure": 1.0, "value": 0.0})[0]
    assert weighted.salience == pytest.approx(0.5)


def test_the_turns_unit_counts_the_messages_sent_after_each_memory():
    state = MemoryState((memory(1, days_old=3.0, g=2.0), memory(2, days_old=1.0, g=2.0)),
                        sent_at=(NOW - timedelta(days=2), NOW - timedelta(hours=12), NOW - timedelta(hours=1)))
    first, second = score_recall(state, params(time_unit="turns", time_scale=0.5), now=NOW, day_seconds=DAY,
                                 language="en")
    assert (first.t, second.t) == (pytest.approx(1.5), pytest.approx(1.0))  # 3 and 2 turns, times 0.5
    assert first.spacing_days == pytest.approx(3.0)  # the spacing gain keeps study days
    with pytest.raises(ValueError, match="sent_at"):
        score_recall(MemoryState(state.candidates), params(time_unit="turns"), now=NOW, day_seconds=DAY,
                     language="en")


def test_the_scoring_imports_neither_the_database_nor_a_session():
    tree = ast.parse(Path(scoring.__file__).read_text(encoding="utf-8"))
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    assert not {m for m in imported if m and (m.startswith(("database", "sqlalchemy", "flask")))}
