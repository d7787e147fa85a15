"""Bot participants: the manipulation check a lab runs before recruiting anyone.

Used by ``scripts/simulate_participants.py`` (the researcher's entry point) and by the pre-flight
(``services.research.preflight``, ``flask --app app preflight``). The bots and their personas are the
package ``services.research.bots``: HTTP-only, they reach a server through its JSON API exactly as a browser
would and import nothing from ``services``. This module starts a server of its own when asked, runs the bots,
and analyses what they met: only the analysis reads the conditions' declarations.

N scripted participants per enabled memory group walk register -> T1 ... T4
through the HTTP API, exactly as a browser would (session cookie, CSRF header,
polling for unlocks, heartbeats until the minimum task time). In T1 each bot
plants six facts: name, seafood allergy, cat, PhD-application worry and
hometown early in the chat, and a hobby in the last turns, with filler turns
between so that the early facts fall out of a 7-turn window; four come with a
specific detail the gist profile drops (SPECIFICS). In T2-T4 it asks probes
("what do you remember about me?", a question about dinner, about its pet, about
the hill it climbed ...) that never name the facts or the specifics themselves.

Afterwards an admin account reads every probe reply's stored memory context and
the script prints a manipulation-check report: per group and task, how many of
the planted facts the context held, and where (profile, verbatim recent turns,
forgetting-curve recall). Expected: L1 none; L2 only what was in the last turns
before the task; L3 the profile facts; L4 at least as many as L3, and - the check
that can fail - per task and language a share of L4's probe replies holding a
planted specific that L3's context for the same message lacks (minimum shares per
task in L4's declaration, each share judged met / within error / missed by the
pre-registered rule of services/study/evidence.py, per task and pooled per language:
docs/recall_calibration.md); S1 and R1 the allergy at T2. Each condition declares
these expectations (``manipulation_check`` in services/memory/); the script checks
the declarations of the groups that ran, so a new condition is checked by declaring
its own. Exit code 0 when every check passes, 1 when one fails, 2 on errors.

Without ``--base-url`` the script starts its own server: the real app on a fresh
temporary SQLite database, offline providers, pilot mode with one study day =
``--day-seconds`` real seconds (T4 unlocks 16 days = 160 s after T1 at the
default 10 s). Task durations are stretched so the bots' chats are not cut off
by the compressed timer (the report says by how much). With ``--base-url`` the
server must be in pilot mode and an admin account is needed to read contexts.
"""
from __future__ import annotations

import logging
import secrets
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from statistics import mean
from typing import TYPE_CHECKING, Any

from services.research.bots.client import Admin, Bot, Enrolment, languages_of, run_bots, server_facts
from services.research.bots.personas import (
    EARLY_FACTS,
    FACT_IDS,
    FACTS,
    LATE_FACTS,
    PROBE_TASKS,
    SOURCES,
    TASKS,
    context_facts,
    context_specifics,
    facts_in,
)
from services.study import evidence

if TYPE_CHECKING:
    from flask import Flask

    from services.memory.base import ManipulationCheck
    from services.study.definition import Study
    from services.study.settings import Settings

    AppFactory = Callable[[Settings], Flask]


# ---------------------------------------------------------------------------------------------
# A temporary server of our own
# ---------------------------------------------------------------------------------------------


@dataclass
class Server:
    base_url: str
    admin_user: str
    admin_password: str
    study: Study | None = None
    timing_note: str | None = None
    providers: dict[str, Any] | None = None  # what the temporary server replied and embedded with


def _providers(runtime: Any) -> dict[str, Any]:
    """The reply chain, the consolidation chain and the embedder a runtime uses, by name and model."""
    def chain(llm: Any) -> list[str]:
        return [f"{p.name}/{p.model}" for p in getattr(llm, "providers", [])]

    return {"reply": chain(runtime.llm), "consolidation": chain(runtime.consolidation_llm),
            "embedder": getattr(runtime.embedder, "model", None)}


def _stretched_timing(study: Study, day_seconds: float) -> tuple[Study, str | None]:
    """Pilot mode scales task durations with the day, so a 2-second day leaves a 15-minute task
    0.02 s of chat. Give the bots at least 10 real minutes per task; unlocks stay compressed."""
    scale = day_seconds / 86400
    timing = study.definition["timing"]
    wanted = {"task_active_seconds": 600 / scale, "max_wall_seconds": 900 / scale}
    stretched = {k: v for k, v in wanted.items() if timing[k] < v}
    if not stretched:
        return study, None
    longer = study.with_overrides({"timing": {k: round(v) for k, v in stretched.items()}})
    note = ", ".join(f"{k} {timing[k]} -> {longer.definition['timing'][k]} study s" for k in stretched)
    return longer, note


def _temporary_settings(base: Settings | None, database_url: str, day_seconds: float, study: Study) -> Settings:
    """The temporary server's settings: ``base``'s providers (the pre-flight passes the environment's), else
    the offline ones; always its own database, pilot days, no scheduler and no rate limits."""
    from services.study.settings import Settings

    fixed = dict(database_url=database_url, secret_key=secrets.token_hex(16), day_seconds=day_seconds,
                 pilot_timer_scale=None, scheduler_enabled=False, consolidate_inline=False, rate_limits_enabled=False,
                 rate_limit_storage="memory", run_migrations_on_start=True, require_preflight=False,
                 study=study)
    if base is None:
        return Settings(llm_providers=["offline"], embedding_provider="offline", **fixed)
    return replace(base, **fixed)


@contextmanager
def temporary_server(make_app: AppFactory, day_seconds: float, conditions: list[str] | None = None,
                     settings: Settings | None = None) -> Iterator[Server]:
    """The real app (``make_app``, i.e. app.create_app) on a fresh SQLite file, served on 127.0.0.1:<free port>;
    offline providers unless ``settings`` names others (the study's own database is never touched).

    ``conditions``: the memory conditions new participants are assigned to (default: every condition
    the study defines, so S1 and R1 are checked too)."""
    from werkzeug.serving import make_server

    from services.participants.account_service import create_admin
    from services.study.definition import load_study

    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="memory-lab-sim-") as tmp:
        study, note = _stretched_timing(settings.study if settings else load_study(), day_seconds)
        study = study.with_overrides({"enabled_conditions": list(conditions or study.conditions)})
        app = make_app(_temporary_settings(settings, f"sqlite:///{Path(tmp) / 'simulation.db'}", day_seconds, study))
        runtime = app.extensions["memory_lab"]
        password = secrets.token_urlsafe(12)
        with runtime.db.Session() as session:
            create_admin(session, "sim_admin", password, runtime.clock)
        server = make_server("127.0.0.1", 0, app, threaded=True)
        thread = threading.Thread(target=server.serve_forever, name="simulation-server", daemon=True)
        thread.start()
        try:
            yield Server(base_url=f"http://127.0.0.1:{server.server_port}", admin_user="sim_admin",
                         admin_password=password, study=study, timing_note=note,
                         providers=_providers(runtime))
        finally:
            server.shutdown()
            thread.join(timeout=10)
            runtime.background.shutdown(wait=True)
            runtime.db.dispose()


def carries_content(memory: dict[str, Any], recall_params: dict[str, Any] | None) -> bool:
    """Whether a recalled memory passes the recall-candidate rule the reply was built with
    (services.recall.candidates.CandidateRule): a content word, or a high salience."""
    from services.recall.candidates import candidate_rule_from_config

    rule = candidate_rule_from_config((recall_params or {}).get("candidates") or None)
    return rule.admits_text(memory.get("text") or "", memory.get("salience"))


def _window_facts(messages: list[dict[str, Any]], task_id: str, turns: int) -> set[str]:
    """Facts in the last ``turns`` turns (user message + reply) of the tasks before ``task_id``."""
    earlier = [m for m in messages if TASKS.index(m["task_id"]) < TASKS.index(task_id)]
    replies = {m["reply_to_id"]: m for m in earlier if m["role"] == "assistant"}
    pairs = [(m, replies.get(m["id"])) for m in earlier if m["role"] == "user"]
    found: set[str] = set()
    for user, reply in pairs[-turns:] if turns else []:
        found |= facts_in(user["content"]) | facts_in(reply["content"] if reply else "")
    return found


def analyse(bots: list[Bot], admin: Admin, *, recent_turns: dict[str, int]) -> list[dict[str, Any]]:
    """Per bot and probe task: which planted facts the probe replies' memory contexts held, by section, and
    which lay in the bot's condition's recent-turn window (``recent_turns`` by group; default 7 turns)."""
    results = []
    for bot in bots:
        record = admin.get(f"/api/admin/participants/{bot.user_id}")
        messages = {m["id"]: m for m in record["messages"]}
        kinds = {t.message_id: t.kind.split(":")[0] for t in bot.turns}
        per_task: dict[str, dict[str, Any]] = {}
        replies = [{"task": t.task_id, "kind": t.kind, "message": t.text,
                    "specifics": sorted(context_specifics(messages[t.reply_id].get("memory_context")))}
                   for t in bot.turns if t.task_id in PROBE_TASKS and t.kind.startswith("probe:")]
        for task_id in PROBE_TASKS:
            probes = [t for t in bot.turns if t.task_id == task_id and t.kind.startswith("probe:")]
            if not probes:
                continue
            sources = {s: set() for s in SOURCES}
            recalled_ids: set[int] = set()
            without_content: set[int] = set()
            for probe in probes:
                context = messages[probe.reply_id].get("memory_context") or {}
                for source, found in context_facts(context).items():
                    sources[source] |= found
                recalled_ids |= {m["message_id"] for m in context.get("recalled") or []}
                without_content |= {m["message_id"] for m in context.get("recalled") or []
                                    if not carries_content(m, context.get("recall_params"))}
            per_task[task_id] = {
                "probes": len(probes),
                "facts": sorted(set().union(*sources.values()), key=FACT_IDS.index),
                "sources": {s: sorted(v, key=FACT_IDS.index) for s, v in sources.items()},
                "recalled_memories": len(recalled_ids),
                # what the recalled memories were in the bot's script: a planted fact, an earlier probe, a filler
                "recalled_kinds": dict(sorted(Counter(kinds.get(i, "other") for i in recalled_ids).items())),
                "recalled_texts": sorted(messages[i]["content"] for i in recalled_ids if i in messages),
                "recalled_without_content": len(without_content),
                "window_facts": sorted(_window_facts(list(messages.values()), task_id,
                                                     recent_turns.get(bot.memory_group, 7)), key=FACT_IDS.index),
            }
        results.append({
            "username": bot.username, "participant_code": bot.participant_code, "memory_group": bot.memory_group,
            "language": bot.language, "tasks_done": bot.tasks_done, "errors": bot.errors, "notes": bot.notes,
            "tasks": per_task, "replies": replies,
        })
    return results


def summarise(participants: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per group x task x language: mean facts found, by section, and which facts."""
    cells: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for p in participants:
        for task_id, task in p["tasks"].items():
            cells[(p["memory_group"], task_id, p["language"])].append(task)
    rows = []
    for (group, task_id, language), tasks in sorted(cells.items()):
        counts = [len(t["facts"]) for t in tasks]
        rows.append({
            "group": group, "task": task_id, "language": language, "n": len(tasks),
            "facts_mean": round(mean(counts), 2), "facts_min": min(counts), "facts_max": max(counts),
            **{f"from_{s}_mean": round(mean(len(t["sources"][s]) for t in tasks), 2) for s in SOURCES},
            "recalled_memories_mean": round(mean(t["recalled_memories"] for t in tasks), 2),
            "recalled_kinds": dict(sum((Counter(t.get("recalled_kinds", {})) for t in tasks), Counter())),
            "by_fact": {f: sum(1 for t in tasks if f in t["facts"]) for f in FACT_IDS},
        })
    return rows


Participants = list[dict[str, Any]]
Check = dict[str, Any]


def _declared_groups(participants: Participants) -> list[tuple[str, ManipulationCheck, Participants]]:
    """The groups present, in registry order, each with what its condition declares for the check.
    A group no condition here registers is an error (the server runs other code than this checkout)."""
    from services.memory import registry

    by_group: dict[str, Participants] = defaultdict(list)
    for p in participants:
        by_group[p["memory_group"]].append(p)
    order = {condition_id: index for index, condition_id in enumerate(registry.ids())}
    return [(group, registry.get(group).manipulation_check, by_group[group])
            for group in sorted(by_group, key=lambda g: (order.get(g, len(order)), g))]


def _check(name: str, passed: bool, detail: str) -> Check:
    return {"check": name, "passed": passed, "detail": detail}


def _check_holds_no_fact(group: str, members: Participants) -> list[Check]:
    leaks = [f"{p['participant_code']} {t}: {task['facts']}" for p in members
             for t, task in p["tasks"].items() if task["facts"]]
    return [_check(f"{group} remembers none of the planted facts", not leaks,
                   "; ".join(leaks) or "no fact in any context")]


def _check_recent_window(group: str, members: Participants) -> list[Check]:
    wrong_t2 = [f"{p['participant_code']}: {p['tasks']['T2']['facts']}" for p in members
                if "T2" in p["tasks"] and set(p["tasks"]["T2"]["facts"]) != LATE_FACTS]
    outside = [f"{p['participant_code']} {t}: {sorted(set(task['facts']) - set(task['window_facts']))}"
               for p in members for t, task in p["tasks"].items()
               if not set(task["facts"]) <= set(task["window_facts"])]
    return [_check(f"{group} at T2 holds exactly the facts of T1's last turns (hobby), none of the early ones",
                   not wrong_t2, "; ".join(wrong_t2) or f"every {group} participant: {sorted(LATE_FACTS)}"),
            _check(f"{group} never holds a fact from outside its recent-turn window", not outside,
                   "; ".join(outside) or "all facts lie within the window")]


def _check_profile(group: str, members: Participants) -> list[Check]:
    missing = [f"{p['participant_code']} {t}" for p in members for t, task in p["tasks"].items()
               if not set(task["sources"]["profile"]) & EARLY_FACTS]
    found = sorted({f for p in members for task in p["tasks"].values() for f in task["sources"]["profile"]},
                   key=FACT_IDS.index)
    return [_check(f"{group} holds early T1 facts through its profile at T2-T4", not missing,
                   ("missing in " + "; ".join(missing)) if missing else f"profile facts seen: {found}")]


def _check_as_many_as_baseline(group: str, baseline: str, table: list[dict[str, Any]]) -> list[Check]:
    means = {(r["group"], r["task"], r["language"]): r["facts_mean"] for r in table}
    behind = [f"{task} {lang}: {group} {means[(group, task, lang)]} < {baseline} {means[(baseline, task, lang)]}"
              for (g, task, lang) in means if g == group and (baseline, task, lang) in means
              and means[(group, task, lang)] < means[(baseline, task, lang)]]
    return [_check(f"{group} holds at least as many facts as {baseline} (mean per task)", not behind,
                   "; ".join(behind) or "yes")]


def _check_recall(group: str, members: Participants) -> list[Check]:
    recalled = {t: sum(task["recalled_memories"] for p in members for tt, task in p["tasks"].items() if tt == t)
                for t in PROBE_TASKS}
    languages = sorted({p["language"] for p in members})
    specifics = {lang: {t: sorted({f for p in members if p["language"] == lang
                                   for f in p["tasks"].get(t, {}).get("sources", {}).get("recalled", [])},
                                  key=FACT_IDS.index) for t in PROBE_TASKS} for lang in languages}
    empty = sum(task.get("recalled_without_content", 0) for p in members for task in p["tasks"].values())
    kinds = sum((Counter(task.get("recalled_kinds", {})) for p in members for task in p["tasks"].values()),
                Counter())
    return [
        _check(f"{group} recalls specific earlier messages by the forgetting curve", sum(recalled.values()) > 0,
               ", ".join(f"{t}: {n} recalled" for t, n in recalled.items())),
        _check(f"{group} recalls planted facts as specific messages in every language (at some of T2-T4)",
               all(any(facts.values()) for facts in specifics.values()),
               "; ".join(f"{lang}: " + (", ".join(f"{t} {facts}" for t, facts in by_task.items() if facts) or "none")
                         for lang, by_task in specifics.items())),
        _check(f"{group} never recalls a message without content (acknowledgements, generic questions)", empty == 0,
               f"{empty} recalled; recalled memories were, in the bots' script: "
               + (", ".join(f"{kind} {n}" for kind, n in sorted(kinds.items())) or "nothing")),
    ]


def check_pattern(participants: Participants, table: list[dict[str, Any]]) -> list[Check]:
    """The expected pattern, as each present group's condition declares it (``manipulation_check``), with
    what was seen when it does not hold. One kind of expectation after the other, groups in registry order."""
    declared = _declared_groups(participants)
    present = {group for group, _, _ in declared}
    kinds: list[Callable[[str, ManipulationCheck, Participants], list[Check]]] = [
        lambda g, c, m: _check_holds_no_fact(g, m) if c.holds_no_fact else [],
        lambda g, c, m: _check_recent_window(g, m) if c.recent_window_only else [],
        lambda g, c, m: _check_profile(g, m) if c.profile_holds_early_facts else [],
        lambda g, c, m: _check_as_many_as_baseline(g, c.beyond.baseline, table)
        if c.beyond and c.beyond.baseline in present else [],
        lambda g, c, m: _check_recall(g, m) if c.recalls_messages else [],
    ]
    return [check for kind in kinds for group, condition, members in declared
            for check in kind(group, condition, members)]


def beyond_baseline(participants: Participants, group: str) -> list[dict[str, Any]]:
    """Per task and language: the share of ``group``'s probe replies whose context holds a planted
    specific that its declared baseline's context for the same message (same script turn, any participant
    of that language) lacks. A reply without a baseline counterpart is left out and counted apart."""
    from services.memory import registry

    beyond = registry.get(group).manipulation_check.beyond
    if beyond is None:
        raise ValueError(f"memory condition {group!r} declares no baseline to go beyond")
    held: dict[tuple[str, str, str], set[str]] = defaultdict(set)
    for p in participants:
        if p["memory_group"] == beyond.baseline:
            for reply in p.get("replies", []):
                held[(p["language"], reply["task"], reply["message"])] |= set(reply["specifics"])
    cells: dict[tuple[str, str], dict[str, Any]] = {}
    for p in participants:
        if p["memory_group"] != group:
            continue
        for reply in p.get("replies", []):
            cell = cells.setdefault((reply["task"], p["language"]), {
                "task": reply["task"], "language": p["language"], "replies": 0, "beyond": 0, "unpaired": 0,
                "specifics": Counter()})
            key = (p["language"], reply["task"], reply["message"])
            if key not in held:
                cell["unpaired"] += 1
                continue
            extra = set(reply["specifics"]) - held[key]
            cell["replies"] += 1
            cell["beyond"] += bool(extra)
            cell["specifics"].update(extra)
    rows = []
    for (task, language), cell in sorted(cells.items()):
        share = cell["beyond"] / cell["replies"] if cell["replies"] else 0.0
        minimum = beyond.share_needed(task)
        rows.append({**cell, "specifics": dict(cell["specifics"]), "share": round(share, 3), "min_share": minimum,
                     **_judged(f"{group} beyond {beyond.baseline} {task} {language}", cell["beyond"],
                               cell["replies"], minimum)})
    return rows


def _judged(name: str, successes: int, n: int, minimum: float) -> dict[str, Any]:
    """A share judged against its declared minimum by the pre-registered rule (services.study.evidence): met,
    within error (the one-sided 95 % interval still reaches the minimum) or missed; it passes unless missed."""
    verdict = evidence.judge(name, successes, n, minimum, "at_least")
    return {"verdict": verdict.verdict, "low": verdict.low, "high": verdict.high, "passed": verdict.ok}


def pooled_beyond(rows: list[dict[str, Any]], group: str, baseline: str) -> list[dict[str, Any]]:
    """Per language, the probe tasks pooled: every reply of the language against the minimum its tasks declare
    together (the replies-weighted mean of the tasks' minimum shares), judged by the same rule. With one bot per
    condition and language a task holds about eight replies, too few for a cell to miss on its own (0 of 8 is
    within error of 15 %); pooled, a condition that hands over nothing its baseline lacks (0 of 24) is missed."""
    pooled = []
    for language in sorted({r["language"] for r in rows}):
        mine = [r for r in rows if r["language"] == language]
        replies, beyond = sum(r["replies"] for r in mine), sum(r["beyond"] for r in mine)
        minimum = sum(r["replies"] * r["min_share"] for r in mine) / replies if replies else 0.0
        pooled.append({"task": "all", "language": language, "replies": replies, "beyond": beyond,
                       "share": round(beyond / replies, 3) if replies else 0.0, "min_share": round(minimum, 4),
                       **_judged(f"{group} beyond {baseline} all probe tasks {language}", beyond, replies, minimum)})
    return pooled


def _check_beyond(participants: Participants, group: str, baseline: str) -> Check:
    rows = beyond_baseline(participants, group)
    languages = sorted({p["language"] for p in participants if p["memory_group"] == group})
    missing = [f"{task} {lang}" for task in PROBE_TASKS for lang in languages
               if not any(r["task"] == task and r["language"] == lang for r in rows)]
    pooled = pooled_beyond(rows, group, baseline)
    detail = "; ".join(f"{r['task']} {r['language']}: {r['beyond']}/{r['replies']} = {r['share']:.0%} "
                       f"(need {r['min_share']:.0%}; {r['verdict'].replace('_', ' ')})" for r in rows + pooled)
    if missing:
        detail += f"; no {group} replies at " + ", ".join(missing)
    return {"check": f"{group}'s context holds a planted specific that {baseline}'s context for the same message "
                     "lacks (share of probe replies, per task and language)",
            "passed": bool(rows) and not missing and all(r["passed"] for r in rows + pooled), "detail": detail,
            "rows": rows, "pooled": pooled, "group": group, "baseline": baseline}


def check_beyond_baseline(participants: Participants) -> list[Check]:
    """The manipulation check that can fail: per task and language, a condition that declares a baseline
    must hand over specifics the baseline does not (its declared minimum shares). A condition with the
    baseline's context plus nothing new scores 0 and fails. Checked when both groups ran."""
    declared = _declared_groups(participants)
    present = {group for group, _, _ in declared}
    return [_check_beyond(participants, group, condition.beyond.baseline) for group, condition, _ in declared
            if condition.beyond and condition.beyond.baseline in present]


def check_held_facts(participants: Participants) -> list[Check]:
    """Conditions that declare planted facts at a task: every participant's probe contexts there hold them."""
    checks = []
    for group, condition, members in _declared_groups(participants):
        for task_id, facts in condition.holds_facts_at:
            missing = [f"{p['participant_code']} ({p['language']})" for p in members
                       if not set(facts) <= set(p["tasks"].get(task_id, {}).get("facts", []))]
            checks.append(_check(f"{group}'s {task_id} context holds the planted {' and '.join(facts)}",
                                 not missing, ("missing for " + ", ".join(missing)) if missing
                                 else f"all {len(members)} {group} participants"))
    return checks


def format_report(report: dict[str, Any]) -> str:
    config = report["config"]
    lines = [
        "Manipulation check: planted facts found in the memory context of probe replies",
        f"  server: {config['server']}; pilot day = {config['day_seconds']} s; bots: {config['bots']} "
        f"({config['per_group']} per group and language; languages: {', '.join(config['languages'])}); "
        f"run took {config['duration_seconds']:.0f} s",
        f"  {config['enrolment']}",
    ]
    if config.get("providers"):
        providers = config["providers"]
        lines.append(f"  replies: {', '.join(providers['reply'])}; consolidation: "
                     f"{', '.join(providers['consolidation'])}; embedder: {providers['embedder']}")
    if config.get("timing_override"):
        lines.append(f"  task timer stretched for the bots: {config['timing_override']}")
    lines += [
        "  facts planted in T1: " + ", ".join(f"{f.id} = {f.label}" for f in FACTS),
        "  early facts: turns 1-5 of 12; hobby: turn 11 (inside a 7-turn window). Probes never name a fact.",
        "",
        f"{'group':5} {'task':4} {'lang':4} {'n':>2}  {'facts':>5} {'range':>5}  {'profile':>7} {'recent':>6} "
        f"{'recalled':>8} {'recalled msgs':>13}  facts seen (participants)",
    ]
    for row in report["table"]:
        seen = ", ".join(f"{f} {n}/{row['n']}" for f, n in row["by_fact"].items() if n) or "-"
        lines.append(
            f"{row['group']:5} {row['task']:4} {row['language']:4} {row['n']:>2}  {row['facts_mean']:>5.2f} "
            f"{row['facts_min']:>2}-{row['facts_max']:<2}  {row['from_profile_mean']:>7.2f} "
            f"{row['from_recent_turns_mean']:>6.2f} {row['from_recalled_mean']:>8.2f} "
            f"{row['recalled_memories_mean']:>13.2f}  {seen}")
    lines += ["", "  facts = distinct planted facts in any probe reply's context (mean per participant); "
                  "profile / recent / recalled = in that section; recalled msgs = memories recalled by the "
                  "forgetting curve in the probe replies"]
    recall_rows = [r for r in report["table"] if r.get("recalled_kinds")]
    if recall_rows:
        lines += ["", "  memories recalled in probe replies, by what they were in the bots' script (all participants):"]
        lines += [f"    {r['group']} {r['task']} {r['language']}: "
                  + ", ".join(f"{kind} {n}" for kind, n in sorted(r["recalled_kinds"].items())) for r in recall_rows]
    for check in (c for c in report["checks"] if c.get("rows")):
        group, baseline, beyond = check["group"], check["baseline"], check["rows"]
        lines += ["", f"  {group} beyond {baseline}: probe replies whose context holds a planted specific that "
                      f"{baseline}'s context for the same message lacks"]
        lines += [f"    {r['task']} {r['language']}: {r['beyond']:>2}/{r['replies']:<2} = {r['share']:4.0%}  "
                  f"(need {r['min_share']:.0%}; {r['verdict'].replace('_', ' ')})  "
                  + (", ".join(f"{k} {n}" for k, n in sorted(r.get("specifics", {}).items())) or "-")
                  for r in beyond + check.get("pooled", [])]
    lines += ["", "Per language:"]
    for language, result in report["by_language"].items():
        beyond = "; ".join(f"{c['group']} beyond {c['baseline']} "
                           + " / ".join(f"{t} {share:.0%}" for t, share in c["shares"].items())
                           for c in result["beyond"]) or "no beyond-baseline check ran"
        lines.append(f"  {language}: {result['bots']} bots; {beyond}: {'PASS' if result['passed'] else 'FAIL'}")
    lines += ["", "Checks:"]
    for check in report["checks"]:
        lines.append(f"  {'PASS' if check['passed'] else 'FAIL'}  {check['check']}: {check['detail']}")
    problems = [(p["participant_code"], p["memory_group"], e) for p in report["participants"] for e in p["errors"]]
    problems += [(p["participant_code"], p["memory_group"], n) for p in report["participants"] for n in p["notes"]]
    if problems:
        lines += ["", "Problems:"] + [f"  {code} ({group}): {text}" for code, group, text in problems]
    waits = config.get("consolidation_wait_seconds")
    if waits:
        lines += ["", f"Waited for consolidation before a task: mean {waits['mean']:.1f} s, max {waits['max']:.1f} s"]
    return "\n".join(lines)


def check_walked(participants: Participants) -> list[Check]:
    """Every bot registered, walked T1-T4 and answered its questionnaires (a bot that could not is named)."""
    stuck = [f"{p['participant_code']} ({p['memory_group']}, {p['language']}): done {p['tasks_done'] or 'nothing'}"
             + (f"; {p['errors'][0]}" if p["errors"] else "")
             for p in participants if p["errors"] or list(p["tasks_done"]) != list(TASKS)]
    return [_check("every bot walked T1-T4", not stuck, "; ".join(stuck) or f"all {len(participants)} bots")]


def by_language(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Per language: each beyond-baseline check's rows in that language, and whether they all passed."""
    result: dict[str, dict[str, Any]] = {}
    for language in report["config"]["languages"]:
        checks = []
        for check in (c for c in report["checks"] if c.get("rows") is not None):
            rows = [r for r in check["rows"] if r["language"] == language]
            pooled = [r for r in check.get("pooled", []) if r["language"] == language]
            present = {r["task"] for r in rows}
            checks.append({"group": check["group"], "baseline": check["baseline"],
                           "shares": {r["task"]: r["share"] for r in rows},
                           "verdicts": {r["task"]: r["verdict"] for r in rows + pooled},
                           "passed": present >= set(PROBE_TASKS) and all(r["passed"] for r in rows + pooled)})
        bots = sum(1 for p in report["participants"] if p["language"] == language)
        result[language] = {"bots": bots, "beyond": checks, "passed": bool(bots) and all(c["passed"] for c in checks)}
    return result


def failed_checks(report: dict[str, Any]) -> list[str]:
    return [c["check"] for c in report["checks"] if not c["passed"]]


def _report(run: dict[str, Any], server: Server, enrolment: Enrolment, admin: Admin) -> dict[str, Any]:
    study_conditions = server.study.conditions if server.study else {}
    participants = analyse(enrolment.bots, admin,
                           recent_turns={g: c.recent_turns for g, c in study_conditions.items()})
    table = summarise(participants)
    checks = check_walked(participants) + check_pattern(participants, table) \
        + check_beyond_baseline(participants) + check_held_facts(participants)
    waits = admin.waits
    report = {
        "config": {**run, "bots": len(enrolment.bots), "registered": enrolment.registered,
                   "withdrawn": enrolment.withdrawn, "enrolment": enrolment.describe(),
                   "timing_override": server.timing_note, "providers": server.providers,
                   "duration_seconds": time.monotonic() - run["started"],
                   "consolidation_wait_seconds": {"mean": mean(waits), "max": max(waits)} if waits else None},
        "participants": participants,
        "table": table,
        "checks": checks,
        "ok": all(c["passed"] for c in checks),
    }
    report["config"].pop("started")
    report["by_language"] = by_language(report)
    return report


def run_simulation(*, per_group: int, language: str = "both", day_seconds: float = 10.0,
                   base_url: str | None = None, admin_user: str | None = None, admin_password: str | None = None,
                   conditions: list[str] | None = None, log: Callable[[str], None] = print,
                   make_app: AppFactory | None = None, settings: Settings | None = None) -> dict[str, Any]:
    """Run the bots and return the report (``format_report`` prints it): ``per_group`` bots in every enabled
    group and language. Without ``base_url`` on a temporary server built by ``make_app`` (app.create_app),
    with ``settings``' providers (default offline); ``conditions`` applies to it only (default: all of the
    study's conditions)."""
    if per_group < 1:
        raise ValueError("--per-group must be at least 1")
    run = {"started": time.monotonic(), "per_group": per_group, "languages": languages_of(language)}

    def execute(server: Server) -> dict[str, Any]:
        facts = server_facts(server.base_url)
        run.update(server=server.base_url if base_url else "temporary (fresh SQLite)",
                   day_seconds=facts.get("pilot_day_seconds", day_seconds if not base_url else None))
        admin = Admin(server.base_url, server.admin_user, server.admin_password)
        enrolment = run_bots(server.base_url, admin, per_group, language, log)
        return _report(run, server, enrolment, admin)

    if base_url:
        if not (admin_user and admin_password):
            raise ValueError("--base-url needs --admin-user and --admin-password (or ADMIN_PASSWORD)")
        return execute(Server(base_url=base_url, admin_user=admin_user, admin_password=admin_password))
    if make_app is None:
        raise ValueError("a temporary server needs the app factory (app.create_app)")
    with temporary_server(make_app, day_seconds, conditions, settings) as server:
        log(f"temporary server on {server.base_url} (pilot day = {day_seconds} s)")
        return execute(server)
