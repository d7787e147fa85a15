"""Verdicts on pre-registered targets, judged with intervals instead of point estimates.

A target such as "at least 50 % of relevant memories recalled at T2" is judged on a count
(``successes`` of ``n``) with a one-sided 95 % Wilson score interval:

- **met**: the point estimate is on the right side of the target;
- **within error**: the point estimate is on the wrong side, but the one-sided interval still
  reaches the target (the data cannot tell the two apart);
- **missed**: the whole one-sided interval lies on the wrong side.

This replaced per-group point thresholds on groups of eight, which single items decided.
A difference between two proportions (the decay shape: T2 above T4) is judged with Newcombe's
hybrid score interval, built from the two Wilson intervals.

Pure functions: no database, no Flask.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any, Literal

from services.text.catalogs import CATALOGS

Direction = Literal["at_least", "at_most"]
VerdictName = Literal["met", "within_error", "missed", "no_data"]

# one-sided 95 %: the bound a target is compared with holds with 95 % confidence on its side
Z_ONE_SIDED_95 = 1.6448536269514722
VERDICTS: tuple[VerdictName, ...] = ("met", "within_error", "missed", "no_data")


def wilson_bounds(successes: int, n: int, z: float = Z_ONE_SIDED_95) -> tuple[float, float]:
    """Wilson score bounds for ``successes`` of ``n`` at normal quantile ``z``.

    With ``z`` the one-sided 95 % quantile, the lower value is a one-sided 95 % lower bound and
    the upper value a one-sided 95 % upper bound (together, a two-sided 90 % interval).
    """
    if n <= 0:
        raise ValueError("an interval needs at least one observation")
    if not 0 <= successes <= n:
        raise ValueError(f"successes must be between 0 and n, got {successes} of {n}")
    p = successes / n
    z2 = z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Verdict:
    """One target judged on one count; ``as_dict`` is what reports and JSON carry."""
    name: str
    successes: int
    n: int
    target: float
    direction: Direction
    estimate: float | None
    low: float | None
    high: float | None
    verdict: VerdictName

    @property
    def ok(self) -> bool:
        return self.verdict in ("met", "within_error")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def judge(name: str, successes: int, n: int, target: float, direction: Direction = "at_least") -> Verdict:
    """Judge ``successes`` of ``n`` against ``target`` (a proportion in [0, 1])."""
    if direction not in ("at_least", "at_most"):
        raise ValueError(f"direction must be 'at_least' or 'at_most', got {direction!r}")
    if not 0.0 <= target <= 1.0:
        raise ValueError(f"target must be a proportion, got {target}")
    if n == 0:
        return Verdict(name, 0, 0, target, direction, None, None, None, "no_data")
    low, high = wilson_bounds(successes, n)
    estimate = successes / n
    if direction == "at_least":
        verdict: VerdictName = "met" if estimate >= target else ("within_error" if high >= target else "missed")
    else:
        verdict = "met" if estimate <= target else ("within_error" if low <= target else "missed")
    return Verdict(name, successes, n, target, direction, estimate, low, high, verdict)


@dataclass(frozen=True)
class Difference:
    """``first`` minus ``second`` with Newcombe's one-sided 95 % lower bound."""
    name: str
    first: tuple[int, int]
    second: tuple[int, int]
    estimate: float | None
    low: float | None
    high: float | None
    above: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def difference(name: str, first: tuple[int, int], second: tuple[int, int],
               z: float = Z_ONE_SIDED_95) -> Difference:
    """Is proportion ``first`` above ``second`` by more than its error?

    Newcombe (1998), method 10: the difference's bounds from each proportion's Wilson bounds.
    ``above`` is true when the one-sided lower bound of the difference is above zero.
    """
    (s1, n1), (s2, n2) = first, second
    if n1 == 0 or n2 == 0:
        return Difference(name, first, second, None, None, None, False)
    p1, p2 = s1 / n1, s2 / n2
    l1, u1 = wilson_bounds(s1, n1, z)
    l2, u2 = wilson_bounds(s2, n2, z)
    d = p1 - p2
    low = d - math.sqrt((p1 - l1) ** 2 + (u2 - p2) ** 2)
    high = d + math.sqrt((u1 - p1) ** 2 + (p2 - l2) ** 2)
    return Difference(name, first, second, d, low, high, low > 0)


def passes(verdicts: list[Verdict], shape: list[Difference] | None = None) -> bool:
    """The rule of a check: no target missed (or without data), and each shape difference above zero."""
    return all(v.ok for v in verdicts) and all(d.above for d in (shape or []))


def describe(v: Verdict, language: str = "en") -> str:
    """One line: the figure, its interval, its n and its verdict, worded by ``language``'s catalog (verdict.line)."""
    verdict = CATALOGS.text(language, f"verdict.{v.verdict}")
    if v.estimate is None:
        return CATALOGS.text(language, "verdict.line_no_data", name=v.name, verdict=verdict)
    return CATALOGS.text(language, "verdict.line", name=v.name, figure=f"{v.estimate:.1%}", successes=v.successes,
                         n=v.n, low=f"{v.low:.1%}", high=f"{v.high:.1%}",
                         side="≥" if v.direction == "at_least" else "≤", target=f"{v.target:.0%}", verdict=verdict)


def describe_difference(d: Difference | dict[str, Any], language: str = "en") -> str:
    """One line for the decay shape: the difference, its counts, its one-sided lower bound, and whether it holds,
    worded by ``language``'s catalog (verdict.difference)."""
    d = d if isinstance(d, dict) else d.as_dict()
    if d["estimate"] is None:
        return CATALOGS.text(language, "verdict.line_no_data", name=d["name"],
                             verdict=CATALOGS.text(language, "verdict.no_data"))
    (s1, n1), (s2, n2) = d["first"], d["second"]
    holds = CATALOGS.text(language, "verdict.difference_above" if d["above"] else "verdict.difference_not_above")
    return CATALOGS.text(language, "verdict.difference", name=d["name"], figure=f"{d['estimate']:+.1%}", s1=s1,
                         n1=n1, s2=s2, n2=n2, low=f"{d['low']:+.1%}", holds=holds)
