"""The scoring core shared by L4's recall, the calibration and the benchmark: top-k and the forgetting
curve applied to a set of candidates. Pure: numpy and the formulas, no session.

L4 recalls in three steps (``services.memory.hybrid``): it loads a participant's memory state once
(``MemoryState``, a plain value), scores it here (``score_recall``, which never touches the database) and
writes the result once, with the reply (``RecallWrite``). Between the two, the rehearsal route
(``services.recall.rehearsal``) and then ``direct_recall``, directed retrieval (``services.recall.directed``), decide
again on the scored candidates, as plain values too."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from services.recall.directed import DirectedRetrieval, memory_request
from services.recall.formulas import (
    clamp_score,
    elapsed_time,
    emotional_salience,
    final_probability,
    initial_g,
    recall_probability,
    study_days,
    updated_g,
)
from services.recall.parameters import RecallParams
from services.text.languages import detect


def top_k_indices(cosines: np.ndarray, k: int, exclude: np.ndarray | None = None) -> np.ndarray:
    """Indices of the ``k`` highest cosines, best first; ties go to the lower index (the older memory).

    ``exclude`` is a boolean mask of rows that may not be candidates."""
    scores = np.asarray(cosines, dtype=np.float64).copy()
    if exclude is not None:
        scores[np.asarray(exclude, dtype=bool)] = -np.inf
    allowed = int(np.isfinite(scores).sum())
    k = min(k, allowed)
    if k <= 0:
        return np.zeros(0, dtype=np.int64)
    if k < scores.size:
        # The k-th best score may be shared by rows outside the partition; keep all ties, then order.
        kth = np.partition(scores, scores.size - k)[scores.size - k]
        pool = np.flatnonzero(scores >= kth)
    else:
        pool = np.flatnonzero(np.isfinite(scores))
    order = np.lexsort((pool, -scores[pool]))
    return pool[order][:k]


@dataclass
class RecallScores:
    """Per-candidate results of one recall, aligned with the candidate order."""

    r: np.ndarray
    p: np.ndarray
    p_final: np.ndarray
    recalled: np.ndarray
    g_after: np.ndarray


def score_candidates(cosine: ArrayLike, t: ArrayLike, g: ArrayLike, salience: ArrayLike,
                     params: RecallParams, language: str | None = None,
                     scores: Mapping[str, ArrayLike] | None = None, *,
                     spacing_days: ArrayLike) -> RecallScores:
    """r, p, p_final, the recall decision and the updated g for each candidate. ``scores``: the
    retriever's per-candidate scores, which a ``logistic`` relevance model reads.

    ``t`` is the curve's elapsed time (the configured unit times ``time_scale``); ``spacing_days`` the
    study days since each memory's last recall (or consolidation), the spacing gain's own argument
    (``SPACING_UNIT``): S(t) is the seed's, in days, whatever scale the decay was fitted on (issue 27).
    Passing the scaled ``t`` there instead turned consolidation off (a recall at T2 raised g by 0.02, not
    0.76), so the argument is required."""
    cos = np.atleast_1d(np.asarray(cosine, dtype=np.float64))
    t_ = np.broadcast_to(np.asarray(t, dtype=np.float64), cos.shape)
    spacing = np.broadcast_to(np.asarray(spacing_days, dtype=np.float64), cos.shape)
    g_ = np.broadcast_to(np.asarray(g, dtype=np.float64), cos.shape)
    e = np.broadcast_to(np.asarray(salience, dtype=np.float64), cos.shape)
    r = np.atleast_1d(np.asarray(params.relevance.to_r(cos, language, scores), dtype=np.float64))
    p = np.atleast_1d(np.asarray(recall_probability(r, t_, g_)))
    p_final = np.atleast_1d(np.asarray(final_probability(p, e, params.salience_bonus)))
    recalled = p_final >= params.threshold
    g_after = np.where(recalled, np.asarray(updated_g(g_, spacing, e, params.g_update_salience)), g_)
    return RecallScores(r=r, p=p, p_final=p_final, recalled=recalled, g_after=np.asarray(g_after, dtype=np.float64))


# ---------------------------------------------------------------------------
# L4's recall for one message: a loaded memory state in, scored candidates out
# ---------------------------------------------------------------------------

_EPOCH = datetime(1970, 1, 1)


@dataclass(frozen=True)
class CandidateMemory:
    """One of the top-k memories for a query as loaded: its ranking scores and its stored row's values."""

    message_id: int
    task_id: str
    text: str
    reply: str | None  # the assistant's reply: the memory is the exchange
    created_at: datetime
    last_recall_at: datetime | None
    consolidation_g: float | None  # None: never set, g0 from the salience
    emotional_salience: float | None  # None: from the three scores below with the study's weights
    emotional_intensity: float | None
    self_disclosure: float | None
    value_relevance: float | None
    cosine: float
    fused: float
    lexical_z: float
    dense_z: float
    # the memories this one recalled when it was the message (the rehearsal route's links; loaded with the route on)
    recalled_memories: frozenset[int] = frozenset()


@dataclass(frozen=True)
class MemoryState:
    """What one recall needs of a participant, loaded once: the top-k candidate memories in rank order and,
    when time is counted in turns, when the participant sent each message since the oldest candidate's
    reference time (``sent_at``; None for the other units)."""

    candidates: tuple[CandidateMemory, ...]
    sent_at: tuple[datetime, ...] | None = None


@dataclass
class RecallCandidate:
    """One of the top-k memories considered for a query, recalled or not."""

    message_id: int
    task_id: str
    text: str
    cosine: float
    r: float
    t: float
    g_before: float
    g_after: float
    p: float
    p_final: float
    salience: float
    recalled: bool
    rank: int
    at: datetime | None = None  # when the recall was computed
    spacing_days: float | None = None  # the spacing gain's t: study days since the last recall (or consolidation)
    reply: str | None = None  # the assistant's reply: the memory is the exchange
    fused: float | None = None  # the hybrid retriever's scores (services.recall.retrieval)
    lexical_z: float | None = None
    dense_z: float | None = None
    # what recalled it: "curve", "directed" (services.recall.directed) or "rehearsal" (services.recall.rehearsal);
    # None when it was not recalled
    recalled_by: str | None = None
    # the rehearsal route: the candidate that had recalled this memory, its r and the curve's p_final with that r
    via_message_id: int | None = None
    via_r: float | None = None
    via_p_final: float | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["at"] = self.at.isoformat() if self.at else None
        return data


def stored_salience(salience: float | None, intensity: float | None, disclosure: float | None,
                    value: float | None, weights: Mapping[str, float] | None = None) -> float:
    """A stored message's salience: the stored value, else the weighted three scores (a missing one counts as 0)."""
    if salience is not None:
        return clamp_score(salience)
    return emotional_salience(intensity, disclosure, value, weights=weights)


def turns_since(sent_at: Sequence[datetime], references: Sequence[datetime]) -> np.ndarray:
    """For each reference time, how many of the messages ``sent_at`` came after it."""
    stamps = np.sort(np.array([(s - _EPOCH).total_seconds() for s in sent_at], dtype=np.float64))
    refs = np.array([(r - _EPOCH).total_seconds() for r in references], dtype=np.float64)
    return (stamps.size - np.searchsorted(stamps, refs, side="right")).astype(np.float64)


def score_recall(state: MemoryState, params: RecallParams, *, now: datetime, day_seconds: float,
                 language: str | None, salience_weights: Mapping[str, float] | None = None) -> list[RecallCandidate]:
    """The forgetting curve over a loaded memory state: r, t, p, p_final, the decision and the new g of each
    candidate, in rank order. Pure: what it returns is what the caller writes."""
    memories = state.candidates
    if not memories:
        return []
    cosines = np.array([m.cosine for m in memories], dtype=np.float64)
    fusion = {name: np.array([getattr(m, name) for m in memories], dtype=np.float64)
              for name in ("fused", "lexical_z", "dense_z")}
    references = [m.last_recall_at or m.created_at for m in memories]
    salience = np.array([stored_salience(m.emotional_salience, m.emotional_intensity, m.self_disclosure,
                                         m.value_relevance, salience_weights) for m in memories])
    g_before = np.array([
        m.consolidation_g if m.consolidation_g is not None else initial_g(e, params.g0_base, params.g0_salience)
        for m, e in zip(memories, salience, strict=True)
    ], dtype=np.float64)
    elapsed = np.array([(now - ref).total_seconds() for ref in references])
    spacing = np.atleast_1d(study_days(elapsed, day_seconds))
    if params.time_unit == "turns" and state.sent_at is None:
        raise ValueError("time unit 'turns' needs the participant's message times (MemoryState.sent_at)")
    t = np.atleast_1d(elapsed_time(
        elapsed, unit=params.time_unit, time_scale=params.time_scale, day_seconds=day_seconds,
        turns=turns_since(state.sent_at, references) if params.time_unit == "turns" else None,
    ))
    scores = score_candidates(cosines, t, g_before, salience, params, language, fusion, spacing_days=spacing)
    return [
        RecallCandidate(
            message_id=memory.message_id, task_id=memory.task_id, text=memory.text,
            cosine=float(cosines[i]), r=float(scores.r[i]), t=float(t[i]), spacing_days=float(spacing[i]),
            g_before=float(g_before[i]), g_after=float(scores.g_after[i]), p=float(scores.p[i]),
            p_final=float(scores.p_final[i]), salience=float(salience[i]), recalled=bool(scores.recalled[i]),
            recalled_by="curve" if scores.recalled[i] else None, rank=i + 1, at=now, reply=memory.reply,
            fused=float(fusion["fused"][i]), lexical_z=float(fusion["lexical_z"][i]),
            dense_z=float(fusion["dense_z"][i]),
        )
        for i, memory in enumerate(memories)
    ]


def direct_recall(candidates: list[RecallCandidate], rule: DirectedRetrieval, *, text: str, language: str | None,
                  g_update_salience: float) -> tuple[list[RecallCandidate], dict[str, Any] | None]:
    """The candidates after directed retrieval, and what was decided and why (None: the rule is off).

    The decision records the request's words, the first two candidates' r, and ``recalled``: whether the
    first candidate was brought back by the request (``reason`` says why or why not)."""
    if not rule.enabled:
        return candidates, None
    request = memory_request(text, language)
    decision: dict[str, Any] = {"request": request, "recalled": False}
    if request is None:
        return candidates, {**decision, "reason": "no_request"}
    if not candidates:
        return candidates, {**decision, "reason": "no_candidate"}
    top = candidates[0]
    second_r = candidates[1].r if len(candidates) > 1 else None
    margin = top.r - second_r if second_r is not None else None
    decision.update(message_id=top.message_id, top_r=top.r, second_r=second_r, margin=margin)
    if top.recalled:
        return candidates, {**decision, "reason": "already_recalled"}
    # an earlier request to remember says nothing about the person (CandidateRule.recall_questions); its frame
    # makes it resemble the new request, which is no reason to bring it back
    if memory_request(top.text, detect(top.text)):
        return candidates, {**decision, "reason": "top_is_request"}
    if top.r < rule.min_r:
        return candidates, {**decision, "reason": "below_min_r"}
    if margin is not None and margin < rule.min_margin:
        return candidates, {**decision, "reason": "below_min_margin"}
    g_after = float(updated_g(top.g_before, top.spacing_days if top.spacing_days is not None else 0.0,
                              top.salience, g_update_salience))
    return ([replace(top, recalled=True, g_after=g_after, recalled_by="directed"), *candidates[1:]],
            {**decision, "recalled": True, "reason": "clear_best_match"})
