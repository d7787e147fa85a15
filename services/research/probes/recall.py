"""Probe recall (issue 27, part 3): does L4 bring back what a participant comes back to?

Probe personas (``services.research.probes.personas``) plant facts at T1 and return to them at T2-T4,
explicitly or implicitly, some facts once and some at every task, with an off-topic control per task. Each
persona is one bot (``services.research.bots``) that walks register -> T1 ... T4 through the HTTP API of a
temporary server in pilot mode (``simulation.temporary_server``), every participant assigned to one condition
(L4; L3 or L1 for comparison) through the study's ``enabled_conditions``, as the simulation does.

Afterwards an admin account reads each reply's STORED memory context. A probe is a **hit** when the context's
``recalled`` section (L4's forgetting-curve recall: episodes with their source message ids) holds a T1 message
that planted one of the facts it asks about. ``verbatim`` widens this to any section that carries the T1
message by id (L3's recent turns as well), for the comparison conditions; a profile is a summary, not counted.
A control **leaks** when its recalled section holds any planted T1 message.

Per language x task (Wilson intervals, ``services.study.evidence``): the hit rate of probes about facts asked
for the first time and about facts asked at an earlier task, and the share of controls that leak. Judged on
the pooled personas of each language by the rule of part 1 (met / within error / missed):

- T2 hit >= 50 %;
- facts asked before: >= 40 % at T3 and >= 30 % at T4;
- controls (T2-T4 together) <= 5 %.

Each miss also says why (``miss_reason``, from the fact's best stored candidate): the fact's T1 message was not
among the top-k candidates; its r was below the bar of a neutral memory at T2's age ("r too low"); or r reached
that bar and the memory's own age and consolidation kept it out ("decay bar").

``probe_recall_check`` is the pre-flight's third check. ``scripts/probe_recall.py`` prints the table.
"""
from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from services.research import simulation
from services.research.bots.client import Admin, Bot, _register_until_filled, server_facts
from services.research.probes.personas import (
    DEFAULT_FILES,
    LATER_TASKS,
    ProbeFileError,
    ProbePersona,
    load_probe_files,
    select,
)
from services.study.evidence import Verdict, describe, judge, passes, wilson_bounds

if TYPE_CHECKING:
    from config import Settings



def recalling_condition() -> str:
    """The condition probe recall is about: the one that declares recalled earlier messages (L4)."""
    from services.memory import registry

    return next(c.id for c in registry.all_conditions() if c.manipulation_check.recalls_messages)


def comparison_conditions() -> tuple[str, ...]:
    """The recalling condition, its declared baseline (L3) and a condition that holds no fact (L1)."""
    from services.memory import registry

    main = registry.get(recalling_condition())
    baseline = main.manipulation_check.beyond.baseline if main.manipulation_check.beyond else None
    empty = next((c.id for c in registry.all_conditions() if c.manipulation_check.holds_no_fact), None)
    return tuple(dict.fromkeys(c for c in (main.id, baseline, empty) if c))
# (target name, task, which probes, target, direction). T3/T4 are judged, as issue 27 sets them, on the facts an
# earlier task's probe brought back ("recalled before": does L4 keep what it recalled, i.e. consolidation); the
# facts merely asked before, recalled or not, are reported beside them (the table's "asked before").
TARGETS: tuple[tuple[str, str, str, float, str], ...] = (
    ("T2 hit", "T2", "all", 0.50, "at_least"),
    ("T3 recalled before", "T3", "recalled_before", 0.40, "at_least"),
    ("T4 recalled before", "T4", "recalled_before", 0.30, "at_least"),
    ("controls pulling in a planted fact (T2-T4)", "*", "controls", 0.05, "at_most"),
)
EVALUATION_SPLITS = ("held-out", "blind")


@dataclass(frozen=True)
class TurnOutcome:
    """One later-task message of a persona and what its reply's stored context held."""

    persona: str
    language: str
    split: str
    condition: str
    task: str
    index: int
    kind: str
    text: str
    facts: tuple[str, ...]
    asked_before: bool  # a probe about a fact already probed at an earlier task
    recalled_before: bool  # ... that an earlier task's probe brought back
    hit: bool  # the recalled section holds a T1 message planting one of its facts
    verbatim: bool  # any section carries such a T1 message by id (recalled, recent turns)
    leaked: tuple[str, ...]  # planted facts whose T1 message the recalled section holds (for controls: a leak)
    fact_r: float | None  # the best r of the facts' T1 messages among the recall candidates (None: not a candidate)
    # that candidate as stored (r, t, g_before, salience, p_final, recalled, the recall cue it came through) and the
    # bar of a neutral memory at the preset's anchor age (T2's): what ``miss_reason`` reads
    fact_candidate: dict[str, Any] | None = None
    anchor_r: float | None = None
    # what brought the probed fact's T1 message back (a hit) or a planted one (a control's leak): "curve",
    # "directed" or "rehearsal" (the recalled entry's ``recalled_by``; "unknown" where a context predates it)
    hit_by: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


CANDIDATE_KEYS = ("r", "t", "g_before", "salience", "p_final", "recalled", "rank", "cue_message_id")
MISS_REASONS = ("not a candidate", "r too low", "decay bar")


def miss_reason(outcome: dict[str, Any]) -> str | None:
    """Why a probe missed (None for a hit or a control): its fact's T1 message was not among the top-k
    candidates; or it was, with r below the bar a neutral memory faces at the preset's anchor age (T2's: no
    consolidation or slower decay would have brought it back at T2 either), "r too low"; or r reached that
    bar and the memory's own age and g still kept it out, "decay bar"."""
    if outcome["kind"] not in ("explicit", "implicit") or outcome["hit"]:
        return None
    candidate = outcome.get("fact_candidate")
    if candidate is None:
        return MISS_REASONS[0]
    bar = outcome.get("anchor_r")
    return MISS_REASONS[1] if bar is None or candidate["r"] < bar else MISS_REASONS[2]


def _referenced_ids(context: dict[str, Any]) -> tuple[set[int], set[int]]:
    """(message ids in the recalled section, message ids anywhere in the context)."""
    recalled = {m["message_id"] for m in context.get("recalled") or [] if m.get("message_id") is not None}
    anywhere = set(recalled)
    for turn in context.get("recent_turns") or []:
        anywhere |= {turn.get("user_message_id"), turn.get("assistant_message_id")} - {None}
    for fragment in context.get("fragments") or []:
        if isinstance(fragment, dict) and fragment.get("message_id") is not None:
            anywhere.add(fragment["message_id"])
    return recalled, anywhere


def outcomes_of(persona: ProbePersona, bot: Bot, record: dict[str, Any], condition: str) -> list[TurnOutcome]:
    """What each later-task message of one persona met, from the admin's record of its participant."""
    messages = {m["id"]: m for m in record["messages"]}
    sent = defaultdict(list)
    for turn in bot.turns:
        sent[turn.task_id].append(turn)
    t1_ids = [t.message_id for t in sent["T1"]]
    planted: dict[int, tuple[str, ...]] = {}
    for turn, message_id in zip(persona.script["T1"], t1_ids, strict=False):
        if turn.facts:
            planted[message_id] = turn.facts
    fact_ids = {f: {mid for mid, facts in planted.items() if f in facts} for f in persona.facts}
    asked: set[str] = set()
    brought_back: set[str] = set()
    outcomes = []
    for task in LATER_TASKS:
        asked_here: set[str] = set()
        recalled_here: set[str] = set()
        for turn, message in zip(persona.script[task], sent[task], strict=False):
            context = messages[message.reply_id].get("memory_context") or {}
            recalled, anywhere = _referenced_ids(context)
            wanted = set().union(*(fact_ids[f] for f in turn.facts)) if turn.facts else set()
            best = max((c for c in context.get("recall_candidates") or [] if c.get("message_id") in wanted),
                       key=lambda c: c["r"], default=None)
            hit = bool(wanted & recalled)
            counted = wanted if turn.facts else set(planted)
            hit_by = tuple(sorted({m.get("recalled_by") or "unknown" for m in context.get("recalled") or []
                                   if m.get("message_id") in counted}))
            outcomes.append(TurnOutcome(
                persona=persona.id, language=persona.language, split=persona.split, condition=condition, task=task,
                index=turn.index, kind=turn.kind, text=turn.text, facts=turn.facts,
                asked_before=turn.is_probe and any(f in asked for f in turn.facts),
                recalled_before=turn.is_probe and any(f in brought_back for f in turn.facts),
                hit=hit, verbatim=bool(wanted & anywhere),
                leaked=tuple(sorted({f for mid in recalled & set(planted) for f in planted[mid]})),
                fact_r=None if best is None else best["r"],
                fact_candidate=None if best is None else {k: best.get(k) for k in CANDIDATE_KEYS},
                anchor_r=((context.get("recall_params") or {}).get("relevance") or {}).get("anchor_r"),
                hit_by=hit_by))
            if turn.is_probe:
                asked_here |= set(turn.facts)
                if hit:
                    recalled_here |= set(turn.facts)
        asked |= asked_here
        brought_back |= recalled_here
    return outcomes


# -- running the personas ------------------------------------------------------------------------------------


def run_personas(personas: Sequence[ProbePersona], *, condition: str | None = None, make_app: simulation.AppFactory,
                 settings: Settings | None = None, day_seconds: float = 5.0,
                 log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every persona as one bot of ``condition`` on a temporary pilot-mode server; returns the outcomes."""
    condition = condition or recalling_condition()
    if condition not in comparison_conditions():
        raise ValueError(f"condition {condition!r}: probe recall runs one of {', '.join(comparison_conditions())}")
    if not personas:
        raise ValueError("no probe personas to run")
    started = time.monotonic()
    with simulation.temporary_server(make_app, day_seconds, [condition], settings) as server:
        log(f"temporary server on {server.base_url} (pilot day = {day_seconds} s), every persona in {condition}")
        server_facts(server.base_url)
        admin = Admin(server.base_url, server.admin_user, server.admin_password)
        walking: list[tuple[ProbePersona, Bot]] = []
        for language in sorted({p.language for p in personas}):
            group = [p for p in personas if p.language == language]
            bots = _register_until_filled(server.base_url, admin, [condition], len(group), language)[condition]
            for persona, bot in zip(group, bots, strict=True):
                bot.script = {task: list(turns) for task, turns in persona.script.items()}
                walking.append((persona, bot))
        log(f"{len(walking)} personas registered; walking T1-T4")
        with ThreadPoolExecutor(max_workers=len(walking), thread_name_prefix="probe") as pool:
            list(pool.map(lambda pair: pair[1].walk(admin.memory_ready), walking))
        outcomes: list[TurnOutcome] = []
        problems, errors = [], []
        for persona, bot in walking:
            problems += [f"{persona.id}: {e}" for e in bot.errors + bot.notes]
            errors += [f"{persona.id}: {e}" for e in bot.errors]
            record = admin.get(f"/api/admin/participants/{bot.user_id}")
            outcomes += outcomes_of(persona, bot, record, condition)
        providers = server.providers
    return {"condition": condition, "day_seconds": day_seconds, "personas": [p.id for p, _ in walking],
            "providers": providers, "problems": problems, "errors": errors, "outcomes": [o.to_dict() for o in outcomes],
            "duration_seconds": round(time.monotonic() - started, 1)}


# -- measuring -------------------------------------------------------------------------------------------------


def _cell(successes: int, n: int) -> dict[str, Any]:
    low, high = wilson_bounds(successes, n) if n else (None, None)
    return {"successes": successes, "n": n, "rate": successes / n if n else None, "low": low, "high": high}


def _rows(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    by_cell: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in outcomes:
        by_cell[(o["language"], o["task"])].append(o)
    rows = []
    for (language, task), cell in sorted(by_cell.items()):
        probes = [o for o in cell if o["kind"] in ("explicit", "implicit")]
        controls = [o for o in cell if o["kind"] == "control"]

        def hits(items: list[dict[str, Any]], key: str = "hit") -> dict[str, Any]:
            return _cell(sum(bool(o[key]) for o in items), len(items))

        rows.append({
            "language": language, "task": task,
            "all": hits(probes),
            "first_asked": hits([o for o in probes if not o["asked_before"]]),
            "asked_before": hits([o for o in probes if o["asked_before"]]),
            "recalled_before": hits([o for o in probes if o["recalled_before"]]),
            "explicit": hits([o for o in probes if o["kind"] == "explicit"]),
            "implicit": hits([o for o in probes if o["kind"] == "implicit"]),
            "verbatim": hits(probes, "verbatim"),
            "controls": _cell(sum(bool(o["leaked"]) for o in controls), len(controls)),
        })
    return rows


RECALLED_BY = ("curve", "directed", "rehearsal", "unknown")


def mechanism_rows(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per language x task, what brought back the facts of the probes hit and the planted messages of the controls
    that leaked (a hit through two mechanisms counts for each)."""
    counts: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for o in outcomes:
        counted = o["hit"] if o["kind"] in ("explicit", "implicit") else bool(o["leaked"])
        if not counted:
            continue
        cell = counts.setdefault((o["language"], o["task"]), {"hits": dict.fromkeys(RECALLED_BY, 0),
                                                              "leaks": dict.fromkeys(RECALLED_BY, 0)})
        for by in o.get("hit_by") or ("unknown",):
            cell["hits" if o["kind"] != "control" else "leaks"][by] += 1
    return [{"language": lang, "task": task, **cell} for (lang, task), cell in sorted(counts.items())]


def miss_rows(outcomes: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per language x task, how many probe misses had each ``miss_reason``: all, and the facts recalled before."""
    counts: dict[tuple[str, str], dict[str, dict[str, int]]] = {}
    for o in outcomes:
        reason = miss_reason(o)
        if reason is None:
            continue
        cell = counts.setdefault((o["language"], o["task"]), {"all": dict.fromkeys(MISS_REASONS, 0),
                                                              "recalled_before": dict.fromkeys(MISS_REASONS, 0)})
        cell["all"][reason] += 1
        if o["recalled_before"]:
            cell["recalled_before"][reason] += 1
    return [{"language": lang, "task": task, **cell} for (lang, task), cell in sorted(counts.items())]


def verdicts(outcomes: Sequence[dict[str, Any]], language: str) -> list[Verdict]:
    """The four targets judged on the pooled outcomes of one language (part 1's rule)."""
    mine = [o for o in outcomes if o["language"] == language]
    result = []
    for name, task, which, target, direction in TARGETS:
        if which == "controls":
            items = [o for o in mine if o["kind"] == "control"]
            successes = sum(bool(o["leaked"]) for o in items)
        else:
            items = [o for o in mine if o["task"] == task and o["kind"] in ("explicit", "implicit")
                     and (which == "all" or o[which])]
            successes = sum(bool(o["hit"]) for o in items)
        result.append(judge(f"{language} {name}", successes, len(items), target, direction))  # type: ignore[arg-type]
    return result


def measure(run: dict[str, Any]) -> dict[str, Any]:
    """The table and the verdicts of one run (``run_personas``' result)."""
    outcomes = run["outcomes"]
    languages = sorted({o["language"] for o in outcomes})
    judged = {lang: verdicts(outcomes, lang) for lang in languages}
    errors = run.get("errors") or []  # a persona that could not walk T1-T4 leaves the figures incomplete
    return {"condition": run["condition"], "rows": _rows(outcomes), "misses": miss_rows(outcomes),
            "mechanisms": mechanism_rows(outcomes),
            "verdicts": {lang: [v.as_dict() for v in vs] for lang, vs in judged.items()},
            "passed": bool(judged) and not errors and all(passes(vs) for vs in judged.values()),
            "missed": [v.name for vs in judged.values() for v in vs if not v.ok]
            + [f"persona could not walk: {e}" for e in errors]}


def _fmt(cell: dict[str, Any]) -> str:
    if not cell["n"]:
        return "-"
    return f"{cell['successes']}/{cell['n']} {cell['rate']:.0%} [{cell['low']:.0%}-{cell['high']:.0%}]"


def format_table(result: dict[str, Any], run: dict[str, Any] | None = None) -> str:
    lines = [f"Probe recall in {result['condition']}: the probed fact's T1 message in the reply's recalled episodes"
             " (hit); Wilson 90 % two-sided = 95 % one-sided bounds"]
    if run:
        lines.append(f"  {len(run['personas'])} personas; pilot day {run['day_seconds']} s; "
                     f"run took {run['duration_seconds']:.0f} s")
    header = ["lang", "task", "all probes", "first asked", "asked before", "recalled before", "explicit", "implicit",
              "verbatim", "controls leaking"]
    lines.append("  " + " | ".join(header))
    for row in result["rows"]:
        lines.append("  " + " | ".join([row["language"], row["task"], _fmt(row["all"]), _fmt(row["first_asked"]),
                                        _fmt(row["asked_before"]), _fmt(row["recalled_before"]),
                                        _fmt(row["explicit"]), _fmt(row["implicit"]),
                                        _fmt(row["verbatim"]), _fmt(row["controls"])]))
    lines += ["", "Why probes missed (all misses; of them, facts recalled before): " + ", ".join(MISS_REASONS)]
    for row in result.get("misses") or []:
        lines.append(f"  {row['language']} {row['task']}: " + ", ".join(
            f"{row['all'][r]} ({row['recalled_before'][r]})" for r in MISS_REASONS))
    lines += ["", "What brought them back (hits; controls leaking): " + ", ".join(RECALLED_BY[:3])]
    for row in result.get("mechanisms") or []:
        lines.append(f"  {row['language']} {row['task']}: " + ", ".join(
            f"{row['hits'][b]} ({row['leaks'][b]})" for b in RECALLED_BY[:3])
            + (f"; unknown {row['hits']['unknown']} ({row['leaks']['unknown']})"
               if row["hits"]["unknown"] or row["leaks"]["unknown"] else ""))
    lines += ["", "Targets (pooled per language; met / within error / missed):"]
    for judged in result["verdicts"].values():
        lines += ["  " + describe(Verdict(**v), language="en") for v in judged]
    lines.append(f"probe recall: {'PASS' if result['passed'] else 'FAIL'}")
    if run and run.get("problems"):
        lines += ["", "Problems:"] + [f"  {p}" for p in run["problems"]]
    return "\n".join(lines)


# -- the pre-flight's third check ------------------------------------------------------------------------------


def probe_recall_check(settings: Settings, make_app: simulation.AppFactory, *, day_seconds: float = 5.0,
                       files: Iterable[str | Path] | None = None, splits: Sequence[str] = EVALUATION_SPLITS,
                       log: Callable[[str], None] = print) -> dict[str, Any]:
    """The pre-flight's probe recall check: the evaluation personas (held-out + blind) in L4 with the
    environment's providers. A dict the stored report carries: verdict, passed, one line per target."""
    files = list(files) if files is not None else list(DEFAULT_FILES.values())
    condition = recalling_condition()
    if condition not in settings.study.enabled_conditions:
        return {"verdict": "not_run", "passed": True, "reason": f"{condition} is not an enabled condition",
                "lines": []}
    try:
        personas = select(load_probe_files(files), splits=splits)
    except ProbeFileError as exc:
        return {"verdict": "failed", "passed": False, "reason": str(exc), "lines": [str(exc)]}
    if not personas:
        return {"verdict": "failed", "passed": False, "lines": [],
                "reason": f"no probe personas of splits {', '.join(splits)} in {', '.join(map(str, files))}"}
    run = run_personas(personas, condition=condition, make_app=make_app, settings=settings, day_seconds=day_seconds,
                       log=log)
    result = measure(run)
    lines = [describe(Verdict(**v), language="en") for vs in result["verdicts"].values() for v in vs]
    # ``targets``: every judged target, as the stored report's other checks keep them (figure, interval, n, verdict)
    return {"verdict": "passed" if result["passed"] else "failed", "passed": result["passed"], "lines": lines,
            "targets": [v for vs in result["verdicts"].values() for v in vs],
            "amber": any(v["verdict"] == "within_error" for vs in result["verdicts"].values() for v in vs),
            "verdicts": result["verdicts"], "rows": result["rows"], "personas": len(personas),
            "splits": list(splits), "problems": run["problems"], "duration_seconds": run["duration_seconds"]}
