"""The scoring core shared by L4's recall, the calibration and the benchmark: top-k and the forgetting
curve applied to a set of candidates. Pure: numpy and the formulas, no session."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from services.recall.formulas import final_probability, recall_probability, updated_g
from services.recall.parameters import RecallParams


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
