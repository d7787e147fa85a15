"""Relevance scores for the forgetting curve (L4): a logistic model of the retriever's scores
(issue 9) and the upper tail of unrelated candidates' scores that anchors ``r`` on a false-recall
budget (issue 17).

The forgetting curve (SPEC §2) needs ``r`` in [0, 1]. Here ``r`` is
P(the memory is relevant to the new message | the retriever's scores), fitted
by logistic regression on labelled (message, candidate memory) pairs: the
calibration participants of ``scripts/calibrate_recall.py``, where a pair is
relevant when the two share a topic. One model per query language, because the
embedder's cosine sits on a different level for Chinese and English.

    r = σ(intercept + Σ coef_i · feature_i)

Features are named (``FEATURES``): ``fused`` (the retriever's z-score fusion
for this participant's memories), ``cosine`` (raw cosine, which carries the
absolute level the per-query z-scores throw away), ``lexical_z`` and
``dense_z``. A model must give ``fused`` a positive coefficient and any other
feature a non-negative one, so ``r`` rises with every score: the fit enforces
it (a feature whose unconstrained weight comes out negative is dropped and the
model refitted) and ``LogisticRelevance`` refuses a model that breaks it.

Pure numpy: Newton-Raphson (iteratively reweighted least squares) with a small
L2 penalty, which for a handful of features converges in a few iterations.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

FEATURES = ("fused", "cosine", "lexical_z", "dense_z")
MONOTONE_IN = "fused"
# r must rise with the fused score (issue 9): its coefficient is held at least this large.
MIN_FUSED_COEF = 0.05


def sigmoid(x: ArrayLike) -> np.ndarray:
    """σ(x) = 1 / (1 + e^{-x}), computed without overflow for large |x|."""
    x = np.asarray(x, dtype=np.float64)
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    exp_x = np.exp(x[~positive])
    out[~positive] = exp_x / (1.0 + exp_x)
    return out


@dataclass(frozen=True)
class LogisticModel:
    """One language's model: r = σ(intercept + coef · features)."""

    features: tuple[str, ...]
    intercept: float
    coef: tuple[float, ...]

    def __post_init__(self) -> None:
        if MONOTONE_IN not in self.features:
            raise ValueError(f"a relevance model must use the {MONOTONE_IN!r} score")
        unknown = set(self.features) - set(FEATURES)
        if unknown:
            raise ValueError(f"unknown relevance features {sorted(unknown)}; known: {FEATURES}")
        if len(self.coef) != len(self.features):
            raise ValueError("a relevance model needs one coefficient per feature")
        for name, weight in zip(self.features, self.coef, strict=True):
            if weight < 0 or (name == MONOTONE_IN and weight <= 0):
                raise ValueError(f"relevance coefficient of {name!r} is {weight}: r must rise with every score "
                                 f"(and strictly with {MONOTONE_IN!r})")

    def linear(self, scores: Mapping[str, ArrayLike]) -> np.ndarray:
        """The linear score s = intercept + coef · features (the log-odds); ``scores`` maps every feature
        name to an array (or a float)."""
        z = np.full(np.broadcast(*[np.asarray(scores[f]) for f in self.features]).shape, self.intercept)
        for name, weight in zip(self.features, self.coef, strict=True):
            z = z + weight * np.asarray(scores[name], dtype=np.float64)
        return z

    def predict(self, scores: Mapping[str, ArrayLike]) -> np.ndarray:
        """r = σ(s) for each candidate."""
        return sigmoid(self.linear(scores))

    def to_dict(self) -> dict[str, Any]:
        return {"intercept": self.intercept, "coef": dict(zip(self.features, self.coef, strict=True))}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LogisticModel:
        coef = raw.get("coef")
        if not isinstance(coef, Mapping) or not coef:
            raise ValueError("a logistic relevance model needs 'coef': {feature: weight}")
        return cls(tuple(coef), float(raw["intercept"]), tuple(float(v) for v in coef.values()))


@dataclass(frozen=True)
class LogisticRelevance:
    """Per-language logistic models (``default`` for any other language)."""

    default: LogisticModel
    by_language: dict[str, LogisticModel] = field(default_factory=dict)

    def model(self, language: str | None) -> LogisticModel:
        return self.by_language.get(language or "", self.default)

    def predict(self, scores: Mapping[str, ArrayLike], language: str | None = None) -> np.ndarray:
        return self.model(language).predict(scores)

    def linear(self, scores: Mapping[str, ArrayLike], language: str | None = None) -> np.ndarray:
        return self.model(language).linear(scores)

    def to_dict(self) -> dict[str, Any]:
        return {"default": self.default.to_dict(),
                "by_language": {lang: m.to_dict() for lang, m in self.by_language.items()}}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> LogisticRelevance:
        if "default" not in raw:
            raise ValueError("a logistic relevance model needs a 'default' model")
        return cls(LogisticModel.from_dict(raw["default"]),
                   {lang: LogisticModel.from_dict(m) for lang, m in (raw.get("by_language") or {}).items()})


def fit_logistic(x: ArrayLike, y: ArrayLike, *, l2: float = 1e-2, iterations: int = 50,
                 tol: float = 1e-9, offset: ArrayLike | None = None) -> tuple[float, np.ndarray]:
    """Maximum-likelihood logistic regression (intercept unpenalised) by Newton-Raphson.

    Returns (intercept, coefficients). ``x``: (n, d) features, ``y``: n labels in {0, 1};
    ``offset``: a fixed per-row term added to the linear predictor (a coefficient held fixed)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    fixed = np.zeros(y.shape[0]) if offset is None else np.asarray(offset, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] != y.shape[0]:
        raise ValueError("x must be (n, d) and y n labels")
    if not (0 < y.sum() < y.size):
        raise ValueError("fitting needs both relevant and unrelated pairs")
    design = np.hstack([np.ones((x.shape[0], 1)), x])
    penalty = np.diag([0.0] + [l2] * x.shape[1])
    w = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = sigmoid(design @ w + fixed)
        gradient = design.T @ (p - y) + penalty @ w
        hessian = (design * (p * (1 - p))[:, None]).T @ design + penalty
        step = np.linalg.solve(hessian + 1e-12 * np.eye(w.size), gradient)
        w = w - step
        if float(np.abs(step).max()) < tol:
            break
    return float(w[0]), w[1:]


def fit_monotone(scores: Mapping[str, ArrayLike], labels: ArrayLike, features: Sequence[str], *,
                 l2: float = 1e-2, min_fused: float = MIN_FUSED_COEF) -> LogisticModel:
    """A logistic model on ``features`` whose coefficients are all non-negative and whose ``fused``
    coefficient is at least ``min_fused``: the maximum-likelihood fit under those constraints.

    Another feature whose weight comes out negative is dropped (the most negative first) and the model
    refitted: a score that lowers r when it rises would make the curve reward a worse match. When the
    fused score's own weight comes out below ``min_fused`` (the other features already carry what it
    says, e.g. the cosine inside it), it is held at ``min_fused`` - the constrained optimum of the
    concave likelihood then lies on that bound - and the others are fitted around it."""
    chosen = list(dict.fromkeys(features))
    if MONOTONE_IN not in chosen:
        raise ValueError(f"the relevance model must use {MONOTONE_IN!r}")
    columns = {f: np.asarray(scores[f], dtype=np.float64) for f in chosen}
    fused_fixed: float | None = None
    while True:
        free = [f for f in chosen if not (f == MONOTONE_IN and fused_fixed is not None)]
        offset = None if fused_fixed is None else fused_fixed * columns[MONOTONE_IN]
        x = np.column_stack([columns[f] for f in free]) if free else np.zeros((len(labels), 0))
        intercept, coef = fit_logistic(x, labels, l2=l2, offset=offset)
        weights = dict(zip(free, (float(c) for c in coef), strict=True))
        if fused_fixed is not None:
            weights[MONOTONE_IN] = fused_fixed
        if weights[MONOTONE_IN] < min_fused:
            fused_fixed = min_fused
            continue
        negative = sorted((w, f) for f, w in weights.items() if f != MONOTONE_IN and w < 0)
        if not negative:
            return LogisticModel(tuple(chosen), intercept, tuple(weights[f] for f in chosen))
        chosen.remove(negative[0][1])


def log_loss(model: LogisticModel, scores: Mapping[str, ArrayLike], labels: ArrayLike) -> float:
    """Mean negative log-likelihood of ``labels`` under ``model`` (lower is better calibrated)."""
    p = np.clip(model.predict(scores), 1e-12, 1 - 1e-12)
    y = np.asarray(labels, dtype=np.float64)
    return float(-np.mean(y * np.log(p) + (1 - y) * np.log(1 - p)))


# The tail starts at the (1 - TAIL_SHARE) quantile of the unrelated scores: with ~230 unrelated development
# pairs per language, ~46 exceedances fix the tail's scale and shape.
TAIL_SHARE = 0.2
# The fitted shape is held at or above this: below −0.5 the maximum-likelihood estimate is not regular, and a
# bound that tight would put the tail's end point just above the largest score seen.
MIN_SHAPE = -0.5
_THETA_GRID = 4000


@dataclass(frozen=True)
class UnrelatedTail:
    """The upper tail of the linear scores of *unrelated* candidates, a generalised Pareto tail above
    ``threshold``: a share ``share`` of the unrelated candidates score above ``threshold``, and above it

        P(s_unrelated > s) = share · (1 + shape·(s − threshold)/scale)^(−1/shape),  s ≥ threshold,

    (shape 0: share · exp(−(s − threshold)/scale), the exponential tail of the fifth round). A negative shape
    gives a lighter, bounded tail (nothing above threshold − scale/shape), a positive one a heavier tail.
    Smooth, and fitted by maximum likelihood (``fit_unrelated_tail``)."""

    threshold: float
    share: float
    scale: float
    shape: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.share < 1.0 or not self.scale > 0.0 or not np.isfinite(self.threshold):
            raise ValueError(f"an unrelated-score tail needs 0 < share < 1, scale > 0 and a finite threshold, "
                             f"got {self.share}, {self.scale}, {self.threshold}")
        if not MIN_SHAPE <= self.shape < 1.0:
            raise ValueError(f"an unrelated-score tail needs a shape in [{MIN_SHAPE:g}, 1), got {self.shape}")

    def quantile(self, budget: float) -> float:
        """The score above which a share ``budget`` (< ``share``) of unrelated candidates lies."""
        if not 0.0 < budget < self.share:
            raise ValueError(f"a false-recall budget must lie in (0, {self.share:g}) for this tail, got {budget}")
        log_ratio = float(np.log(self.share / budget))
        if self.shape == 0.0:
            return self.threshold + self.scale * log_ratio
        return self.threshold + self.scale * float(np.expm1(self.shape * log_ratio)) / self.shape

    def exceedance(self, score: ArrayLike) -> np.ndarray:
        """The fitted share of unrelated candidates scoring above ``score`` (≥ threshold); 0 beyond a bounded
        tail's end point."""
        z = (np.asarray(score, dtype=np.float64) - self.threshold) / self.scale
        if self.shape == 0.0:
            return self.share * np.exp(-z)
        base = np.maximum(1.0 + self.shape * z, 0.0)
        with np.errstate(divide="ignore"):
            return self.share * np.exp(-np.log(base) / self.shape)

    def local_scale(self, score: float) -> float:
        """The tail's scale at ``score`` (≥ threshold, below a bounded tail's end point): the excess over it is
        again generalised Pareto, with this scale and the same shape (the exponential's scale is constant)."""
        return self.scale + self.shape * (score - self.threshold)

    def to_dict(self) -> dict[str, float]:
        return {"threshold": self.threshold, "share": self.share, "scale": self.scale, "shape": self.shape}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> UnrelatedTail:
        return cls(float(raw["threshold"]), float(raw["share"]), float(raw["scale"]), float(raw.get("shape", 0.0)))


def fit_gpd(excesses: ArrayLike) -> tuple[float, float]:
    """(scale, shape) of a generalised Pareto distribution for positive ``excesses`` by maximum likelihood,
    the shape held in [MIN_SHAPE, 1).

    Grimshaw's profile: with θ = shape/scale, the likelihood's best shape for a given θ is
    mean(log(1 + θ·y)), which leaves a one-dimensional profile log-likelihood
    −n·log(shape/θ) − n·(1 + shape), searched on a grid of θ (θ → 0 is the exponential, whose
    log-likelihood −n·log(mean y) − n is a candidate too) and refined on a finer grid around its best."""
    y = np.asarray(excesses, dtype=np.float64)
    if y.size < 2 or not np.all(y > 0):
        raise ValueError("fitting a generalised Pareto tail needs at least 2 positive excesses")
    n, mean = y.size, float(np.mean(y))
    best = (-n * np.log(mean) - n, mean, 0.0)

    def search(thetas: np.ndarray) -> None:
        nonlocal best
        thetas = thetas[(thetas != 0.0) & (thetas * y.max() > -1.0)]
        shapes = np.concatenate([np.mean(np.log1p(np.outer(chunk, y)), axis=1)  # bounded memory for large n
                                 for chunk in np.array_split(thetas, max(1, thetas.size * y.size // 2**22))])
        ok = (shapes >= MIN_SHAPE) & (shapes < 1.0) & (shapes / thetas > 0)
        if not np.any(ok):
            return
        loglik = -n * np.log(shapes[ok] / thetas[ok]) - n * (1.0 + shapes[ok])
        i = int(np.argmax(loglik))
        if loglik[i] > best[0]:
            best = (float(loglik[i]), float(shapes[ok][i] / thetas[ok][i]), float(shapes[ok][i]))

    lowest = -1.0 / float(y.max())
    search(np.concatenate([np.linspace(lowest, 0.0, _THETA_GRID, endpoint=False)[1:],
                           np.geomspace(1e-6 / mean, 1e3 / mean, _THETA_GRID)]))
    if best[2] != 0.0:
        theta = best[2] / best[1]
        search(np.linspace(theta * 0.98, theta * 1.02, _THETA_GRID))
    return best[1], best[2]


def fit_unrelated_tail(scores: ArrayLike, share: float = TAIL_SHARE) -> UnrelatedTail:
    """The generalised Pareto tail of ``scores`` above their (1 − share) quantile, by maximum likelihood
    (``fit_gpd``)."""
    values = np.sort(np.asarray(scores, dtype=np.float64))
    if values.size < 10:
        raise ValueError("fitting an unrelated-score tail needs at least 10 unrelated scores")
    threshold = float(np.quantile(values, 1.0 - share))
    above = values[values > threshold]
    scale, shape = fit_gpd(above - threshold)
    return UnrelatedTail(threshold, above.size / values.size, scale, shape)


def anchored_index(score: ArrayLike, anchor: float, scale: float, anchor_r: float) -> np.ndarray:
    """r = anchor_r ^ exp(−(s − anchor) / scale): a Gumbel curve in the score s.

    It equals ``anchor_r`` exactly at ``anchor``, rises smoothly and strictly with s, tends to 0 far below
    and to 1 far above, and stays below 1 for every finite s (computed as exp(−λ·e^{−z}), λ = −ln anchor_r;
    in double precision r is capped just below 1, ≥ 35 scales above the anchor). With an exponential tail and
    its scale, e^{−z} is the fitted share of unrelated candidates above s over the budget, so r ≥ bar ⟺ that
    share is at most budget · ln(bar) / ln(anchor_r); with a generalised Pareto tail and its local scale at the
    anchor (``UnrelatedTail.local_scale``) this holds to first order around the anchor, and r stays defined
    and smooth beyond a bounded tail's end point: r is an index on the false-recall budget, not a
    probability."""
    if not 0.0 < anchor_r < 1.0:
        raise ValueError(f"the anchored relevance needs a bar in (0, 1) at the anchor, got {anchor_r}")
    z = (np.asarray(score, dtype=np.float64) - anchor) / scale
    with np.errstate(over="ignore"):
        r = np.exp(np.log(anchor_r) * np.exp(-z))
    return np.minimum(r, np.nextafter(1.0, 0.0))
