"""The data export: one zip that R, SPSS, Excel or pandas can read as it is.

Files (columns documented in ``services.reporting.codebook``):
participants.csv, task_sessions.csv, messages.csv (long, one row per message),
questionnaires_long.csv (one row per item answer), questionnaires_wide.csv
(one row per participant, ``T1_<item>`` ...), profiles.csv (every version),
recall_events.csv, consolidation_runs.csv, reply_contexts.jsonl (each reply's
exact memory context and prompt), codebook.csv, codebook.md, study_config.json
(the study definition in use, never secrets) and manifest.json.

Participants are identified only by ``participant_code``; every row carries it
and ``memory_group``. ``exclude_pii`` drops usernames and every free-text column
(and reply_contexts.jsonl, which quotes the conversation). ``bom`` writes CSVs
as UTF-8 with a byte-order mark so Excel shows Chinese correctly.

CSV cells are made safe to open in a spreadsheet (OWASP, "CSV injection"): a text cell that
starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading apostrophe, so
``=HYPERLINK(...)`` is shown as text instead of run as a formula (numbers such as ``-2`` are left
alone). ``escape_formulas=False`` turns this off for analysis tools that never evaluate cells.
NUL characters are dropped from CSV cells and unpaired surrogates (only in rows stored before input
was checked) become U+FFFD. The JSON/JSONL files keep the raw text, escaped by JSON itself.

Non-integer numbers are written in CSV cells at a stated precision (``services.text.cells.number_text``): fixed-point,
at most ``NUMBER_DECIMALS`` decimal places, trailing zeros dropped (``0.10800000000000001`` is
``0.108``), never in exponent notation; the codebook says so.
"""
from __future__ import annotations

import csv
import io
import json
import re
import zipfile
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import (
    Assignment,
    AuditLog,
    ConsolidationRun,
    Message,
    PanelEntry,
    ProfileVersion,
    QuestionnaireResponse,
    RecallEvent,
    TaskSession,
    User,
)
from services.memory.context import with_coded_notes
from services.participants.quality import attention_items, attention_passed, typing_flags, typing_rates
from services.reporting import codebook, preflight_record
from services.study.definition import Study
from services.text.cells import json_text, safe_cell, time_text

CSV_FILES = ("participants.csv", "task_sessions.csv", "messages.csv", "questionnaires_long.csv",
             "questionnaires_wide.csv", "profiles.csv", "recall_events.csv", "consolidation_runs.csv",
             "panel_entries.csv")
REPLY_CONTEXTS = "reply_contexts.jsonl"
# Keys a STUDY_CONFIG file should never hold, dropped from study_config.json all the same.
SECRET_KEY_PATTERN = re.compile(r"api[_-]?key|secret|password|passwd|credential|access[_-]?token", re.IGNORECASE)


@dataclass
class ExportOptions:
    bom: bool = False
    exclude_pii: bool = False
    escape_formulas: bool = True
    include_test: bool = False  # test (pilot) participants too, marked test_participant; preview accounts never


@dataclass
class ExportResult:
    data: bytes
    files: dict[str, int] = field(default_factory=dict)  # file -> data rows (CSV/JSONL) or 1
    generated_at: datetime | None = None


def scrub_secrets(value: Any) -> Any:
    """A copy of a study definition without any key that looks like a credential."""
    if isinstance(value, dict):
        return {k: scrub_secrets(v) for k, v in value.items() if not SECRET_KEY_PATTERN.search(str(k))}
    if isinstance(value, list):
        return [scrub_secrets(v) for v in value]
    return value


class _Data:
    """Everything the export reads, loaded once."""

    def __init__(self, session: Session, *, include_test: bool = False) -> None:
        roles = ("participant", "test") if include_test else ("participant",)
        self.users = session.scalars(select(User).where(User.role.in_(roles)).order_by(User.id)).all()
        self.user_ids = {u.id for u in self.users}
        self.by_id = {u.id: u for u in self.users}
        self.assignments = {a.user_id: a for a in session.scalars(select(Assignment))}
        self.sessions = [s for s in session.scalars(select(TaskSession).order_by(TaskSession.user_id,
                                                                                 TaskSession.id))
                         if s.user_id in self.user_ids]
        self.messages = [m for m in session.scalars(select(Message).order_by(Message.user_id, Message.id))
                         if m.user_id in self.user_ids]
        self.answers = [a for a in session.scalars(select(QuestionnaireResponse)
                                                   .order_by(QuestionnaireResponse.user_id,
                                                             QuestionnaireResponse.id))
                        if a.user_id in self.user_ids]
        self.profiles = [p for p in session.scalars(select(ProfileVersion).order_by(
            ProfileVersion.user_id, ProfileVersion.kind, ProfileVersion.version)) if p.user_id in self.user_ids]
        self.recalls = [e for e in session.scalars(select(RecallEvent).order_by(RecallEvent.user_id,
                                                                                 RecallEvent.id))
                        if e.user_id in self.user_ids]
        self.panel_entries = session.scalars(select(PanelEntry).order_by(PanelEntry.id)).all()
        self.runs = [r for r in session.scalars(select(ConsolidationRun).order_by(ConsolidationRun.user_id,
                                                                                   ConsolidationRun.id))
                     if r.user_id in self.user_ids]

    def ids(self, user_id: int) -> dict[str, Any]:
        user = self.by_id[user_id]
        assignment = self.assignments.get(user_id)
        return {"participant_code": user.participant_code,
                "memory_group": assignment.memory_group if assignment else None}


def _quality(data: _Data, study: Study) -> dict[int, Counter]:
    """Per participant: pasted messages, focus losses, attention checks and failures."""
    result: dict[int, Counter] = defaultdict(Counter)
    for m in data.messages:
        if m.role == "user":
            result[m.user_id]["pasted_messages"] += 1 if m.pasted_chars else 0
            result[m.user_id]["focus_losses"] += m.focus_losses or 0
            result[m.user_id]["implausible_typing_messages"] += 1 if typing_flags(
                len(m.content), m.typing_ms, m.keystrokes, m.pasted_chars, study.typing_checks, m.input_kind) else 0
    checks = attention_items(study)
    for a in data.answers:
        if a.item_id in checks:
            result[a.user_id]["attention_checks"] += 1
            result[a.user_id]["attention_failures"] += 0 if attention_passed(checks[a.item_id], a.value) else 1
    return result


def _participants(data: _Data, study: Study) -> list[dict[str, Any]]:
    done: dict[int, dict[str, datetime]] = defaultdict(dict)
    for s in data.sessions:
        if s.status == "done":
            done[s.user_id][s.task_id] = s.completed_at
    counts = Counter((m.user_id, m.role) for m in data.messages)
    quality = _quality(data, study)
    rows = []
    for user in data.users:
        assignment = data.assignments.get(user.id)
        row = {
            **data.ids(user.id), "username": user.username, "language": user.language, "status": user.status,
            "registered_at": user.created_at, "consent_at": user.consent_at,
            "consent_version": user.consent_version, "study_version": user.study_version,
            "test_participant": user.role == "test", "withdrawn_at": user.withdrawn_at,
            "withdrawn_by": user.withdrawn_by, "withdrawn_reason": user.withdrawn_reason,
            "last_active_at": user.last_active_at,
            "assigned_at": assignment.created_at if assignment else None,
            "assignment_block": assignment.block_index if assignment else None,
            "assignment_slot": assignment.slot_index if assignment else None,
            "tasks_done": len(done[user.id]),
            "user_messages": counts[(user.id, "user")], "assistant_replies": counts[(user.id, "assistant")],
            "external_id": user.external_id, "erased_at": user.erased_at, "erasure_reason": user.erasure_reason,
            **{name: quality[user.id][name] for name in ("pasted_messages", "focus_losses", "attention_checks",
                                                         "attention_failures", "implausible_typing_messages")},
        }
        for task in study.tasks:
            row[f"{task.id}_completed_at"] = done[user.id].get(task.id)
        rows.append(row)
    return rows


def _task_sessions(data: _Data, timer_scale: float = 1.0) -> list[dict[str, Any]]:
    """One row per task attempt; active chat time in study seconds and in real seconds (pilot mode: study
    seconds x timer_scale, the deployment's real seconds per study second of a task timer)."""
    counts = Counter((m.task_session_id, m.role) for m in data.messages)
    exposures = exposure_by_session(data.messages)
    rows = []
    for s in data.sessions:
        rows.append({
            "task_session_id": s.id, **data.ids(s.user_id), "task_id": s.task_id, "attempt": s.attempt,
            "status": s.status, "phase": s.phase, "started_at": s.started_at, "chat_ended_at": s.chat_ended_at,
            "completed_at": s.completed_at, "last_activity_at": s.last_activity_at,
            "active_seconds": round(s.active_seconds, 3), "active_study_seconds": round(s.active_seconds, 3),
            "active_real_seconds": round(s.active_seconds * timer_scale, 3), "idle_gap_count": s.idle_gap_count,
            "idle_seconds": round(s.idle_seconds, 3),
            "chat_wall_seconds": round((s.chat_ended_at - s.started_at).total_seconds(), 3)
            if s.chat_ended_at else None,
            "end_reason": s.end_reason, "reset_reason": s.reset_reason,
            "consolidation_status": s.consolidation_status,
            "user_messages": counts[(s.id, "user")], "assistant_replies": counts[(s.id, "assistant")],
            "outcome": s.outcome, **exposures.get(s.id, NO_EXPOSURE),
            "study_version": s.study_version,
            "questionnaire_order": json_text(s.questionnaire_order) if s.questionnaire_order else None,
        })
    return rows


# --- memory exposure and reply timing (issue 27 parts 4-5; docs/reply_timing.md) -------------------------
NO_EXPOSURE = {"exposure_replies": 0, "exposure_messages_mean": None, "exposure_profile_share": None,
               "exposure_tokens_mean": None}


def exposure_by_session(messages: list[Message]) -> dict[int, dict[str, Any]]:
    """Per task session: its replies with a recorded ``memory_exposure`` and their means (task_sessions.csv)."""
    recorded: dict[int, list[dict[str, Any]]] = {}
    for m in messages:
        if m.role == "assistant" and m.memory_exposure is not None:
            recorded.setdefault(m.task_session_id, []).append(m.memory_exposure)
    result = {}
    for session_id, exposures in recorded.items():
        n = len(exposures)
        result[session_id] = {
            "exposure_replies": n,
            "exposure_messages_mean": sum(len(set(e.get("earlier_message_ids") or [])) for e in exposures) / n,
            "exposure_profile_share": sum(1 for e in exposures
                                          if e.get("profile_present") or e.get("summary_present")) / n,
            "exposure_tokens_mean": sum(int(e.get("tokens") or 0) for e in exposures) / n,
        }
    return result


def _reply_timing_columns(m: Message) -> dict[str, Any]:
    if m.role != "assistant":
        return {}
    exposure = m.memory_exposure
    return {"model_first_token_ms": m.model_first_token_ms, "model_total_ms": m.model_total_ms,
            "pacing_delay_ms": m.pacing_delay_ms, "visible_first_token_ms": m.visible_first_token_ms,
            "pacing_mode": ((m.params or {}).get("pacing") or {}).get("mode"),
            "exposure_messages": None if exposure is None else len(set(exposure.get("earlier_message_ids") or [])),
            "exposure_profile_or_summary": None if exposure is None else bool(
                exposure.get("profile_present") or exposure.get("summary_present")),
            "exposure_tokens": None if exposure is None else exposure.get("tokens")}
# --- end of memory exposure and reply timing --------------------------------------------------------------


def _panel_entries(data: _Data, study: Study) -> list[dict[str, Any]]:
    """Every arrival through the panel's link, with the panel's session parameters (e.g. SESSION_ID)."""
    rows = []
    for e in data.panel_entries:
        ids = data.ids(e.user_id) if e.user_id in data.user_ids else {"participant_code": None, "memory_group": None}
        rows.append({"panel_entry_id": e.id, **ids, "at": e.at, "outcome": e.outcome, "via": e.via,
                     **{f"param_{name}": (e.session_params or {}).get(name)
                        for name in study.panel.session_parameters}})
    return rows


def recalled_ids(context: dict[str, Any] | None) -> list[int]:
    return [int(m["message_id"]) for m in (context or {}).get("recalled") or [] if m.get("message_id") is not None]


def _messages(data: _Data, study: Study) -> list[dict[str, Any]]:
    rows = []
    for m in data.messages:
        context = m.memory_context or {}
        params = m.params or {}
        reply = m.role == "assistant"
        rows.append({
            "message_id": m.id, **data.ids(m.user_id), "task_id": m.task_id, "task_session_id": m.task_session_id,
            "created_at": m.created_at, "role": m.role, "text": m.content, "text_chars": len(m.content),
            "reply_to_id": m.reply_to_id, "provider": m.provider, "model": m.model,
            "temperature": params.get("temperature"), "max_tokens": params.get("max_tokens"),
            "prompt_tokens": m.prompt_tokens, "completion_tokens": m.completion_tokens, "latency_ms": m.latency_ms,
            "providers_tried": len(m.attempts) if m.attempts else (1 if reply else None),
            "context_profile_version": (context.get("profile") or {}).get("version") if reply else None,
            "context_recent_turns": len(context.get("recent_turns") or []) if reply else None,
            "context_recalled_count": len(context.get("recalled") or []) if reply else None,
            "recalled_memory_ids": ";".join(str(i) for i in recalled_ids(context)) if reply else None,
            "embedding_model": m.embedding_model, "importance_score": m.importance_score,
            "emotional_intensity": m.emotional_intensity, "self_disclosure": m.self_disclosure,
            "value_relevance": m.value_relevance, "emotional_salience": m.emotional_salience,
            "consolidation_g": m.consolidation_g, "recall_count": m.recall_count if m.role == "user" else None,
            "last_recall_at": m.last_recall_at, "consolidated_at": m.consolidated_at,
            "typing_ms": m.typing_ms, "keystrokes": m.keystrokes, "pasted_chars": m.pasted_chars,
            "focus_losses": m.focus_losses, "input_events": m.input_events,
            "composition_events": m.composition_events, "input_kind": m.input_kind, **_typing_columns(m, study),
            **_reply_timing_columns(m),
        })
    return rows


def _typing_columns(m: Message, study: Study) -> dict[str, Any]:
    if m.role != "user":
        return {}
    per_second, per_char = typing_rates(len(m.content), m.typing_ms, m.keystrokes, m.pasted_chars)
    flags = typing_flags(len(m.content), m.typing_ms, m.keystrokes, m.pasted_chars, study.typing_checks, m.input_kind)
    return {"typed_chars_per_second": per_second, "keystrokes_per_typed_char": per_char,
            "implausible_typing": None if flags is None else bool(flags),
            "implausible_typing_reasons": ";".join(flags or []) or None,
            "content_flags": ";".join(m.content_flags or []) or None}


def _questionnaires_long(data: _Data, study: Study, exclude_pii: bool) -> list[dict[str, Any]]:
    items = codebook.study_items(study)
    checks = attention_items(study)
    rows = []
    for a in data.answers:
        item_type = items[a.item_id][1].get("type", "likert") if a.item_id in items else "unknown"
        if exclude_pii and item_type == "text":
            continue
        is_text = item_type == "text"
        rows.append({
            **data.ids(a.user_id), "task_id": a.task_id, "task_session_id": a.task_session_id,
            "instrument": a.instrument, "item_id": a.item_id, "item_type": item_type,
            "value": None if is_text else a.value, "text_answer": a.value if is_text else None,
            "submitted_at": a.submitted_at,
            "attention_passed": attention_passed(checks[a.item_id], a.value) if a.item_id in checks else None,
        })
    return rows


def _questionnaires_wide(data: _Data) -> list[dict[str, Any]]:
    answers: dict[int, dict[str, Any]] = defaultdict(dict)
    for a in data.answers:
        answers[a.user_id][f"{a.task_id}_{a.item_id}"] = a.value
    return [{**data.ids(u.id), "language": u.language, "status": u.status, **answers[u.id]} for u in data.users]


def _profiles(data: _Data) -> list[dict[str, Any]]:
    return [{
        "profile_version_id": p.id, **data.ids(p.user_id), "kind": p.kind, "version": p.version,
        "task_id": p.task_id, "created_at": p.created_at, "source": p.source,
        "consolidation_run_id": p.consolidation_run_id, "rendered_chars": len(p.rendered or ""),
        "rendered": p.rendered, "content_json": p.content,
    } for p in data.profiles]


def _recall_events(data: _Data) -> list[dict[str, Any]]:
    task_of = {m.id: m.task_id for m in data.messages}
    return [{
        "recall_event_id": e.id, **data.ids(e.user_id), "task_id": e.task_id,
        "query_message_id": e.query_message_id, "memory_message_id": e.memory_message_id,
        "memory_task_id": task_of.get(e.memory_message_id), "rank": e.rank, "cosine": e.cosine, "r": e.r,
        "t": e.t, "g_before": e.g_before, "g_after": e.g_after, "p": e.p, "p_final": e.p_final,
        "salience": e.salience, "recalled": e.recalled, "recalled_by": e.recalled_by,
        "via_message_id": e.via_message_id, "created_at": e.created_at,
    } for e in data.recalls]


def _consolidation_runs(data: _Data) -> list[dict[str, Any]]:
    return [{
        "run_id": r.id, **data.ids(r.user_id), "task_session_id": r.task_session_id, "task_id": r.task_id,
        "trigger": r.trigger, "status": r.status, "started_at": r.started_at, "finished_at": r.finished_at,
        "duration_seconds": round((r.finished_at - r.started_at).total_seconds(), 3) if r.finished_at else None,
        "provider": r.provider, "error": r.error, "steps_json": r.steps,
    } for r in data.runs]


def _reply_contexts(data: _Data) -> list[dict[str, Any]]:
    return [{
        "message_id": m.id, **data.ids(m.user_id), "task_id": m.task_id,
        "memory_context": with_coded_notes(m.memory_context),
        "prompt": m.prompt, "params": m.params, "attempts": m.attempts,
    } for m in data.messages if m.role == "assistant"]


def _tables(data: _Data, study: Study, *, exclude_pii: bool, timer_scale: float = 1.0
            ) -> dict[str, tuple[list[str], list[dict[str, Any]]]]:
    raw = {
        "participants.csv": _participants(data, study),
        "task_sessions.csv": _task_sessions(data, timer_scale),
        "messages.csv": _messages(data, study),
        "questionnaires_long.csv": _questionnaires_long(data, study, exclude_pii),
        "questionnaires_wide.csv": _questionnaires_wide(data),
        "profiles.csv": _profiles(data),
        "recall_events.csv": _recall_events(data),
        "consolidation_runs.csv": _consolidation_runs(data),
        "panel_entries.csv": _panel_entries(data, study),
    }
    tables = {}
    for file in CSV_FILES:
        columns = [c.name for c in codebook.exported_columns(file, study, exclude_pii=exclude_pii)]
        tables[file] = (columns, raw[file])
    return tables


def _csv_bytes(columns: list[str], rows: list[dict[str, Any]], *, bom: bool, escape_formulas: bool = True) -> bytes:
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow(columns)
    for row in rows:
        writer.writerow([safe_cell(row.get(name), escape_formulas=escape_formulas) for name in columns])
    return buffer.getvalue().encode("utf-8-sig" if bom else "utf-8")


def build_export(session: Session, study: Study, *, options: ExportOptions, generated_at: datetime,
                 deployment: dict[str, Any] | None = None) -> ExportResult:
    """The whole export as zip bytes, with each file's row count."""
    data = _Data(session, include_test=options.include_test)
    deployment = deployment or {}
    tables = _tables(data, study, exclude_pii=options.exclude_pii, timer_scale=deployment.get("timer_scale", 1.0))
    result = ExportResult(data=b"", generated_at=generated_at)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file, (columns, rows) in tables.items():
            archive.writestr(file, _csv_bytes(columns, rows, bom=options.bom,
                                              escape_formulas=options.escape_formulas))
            result.files[file] = len(rows)
        include_contexts = not options.exclude_pii
        if include_contexts:
            contexts = _reply_contexts(data)
            archive.writestr(REPLY_CONTEXTS, "".join(json_text(c) + "\n" for c in contexts))
            result.files[REPLY_CONTEXTS] = len(contexts)
        files = {file: columns for file, (columns, _) in tables.items()}
        files["codebook.csv"] = [c.name for c in codebook.STATIC_COLUMNS["codebook.csv"]]
        rows = codebook.codebook_rows(files, study, exclude_pii=options.exclude_pii,
                                      include_reply_contexts=include_contexts)
        archive.writestr("codebook.csv", _csv_bytes(files["codebook.csv"], rows, bom=options.bom))
        result.files["codebook.csv"] = len(rows)
        stamp = time_text(generated_at)
        archive.writestr("codebook.md", codebook.codebook_markdown(
            rows, study, generated_at=stamp, exclude_pii=options.exclude_pii, bom=options.bom,
            escape_formulas=options.escape_formulas, deployment=deployment))
        result.files["codebook.md"] = 1
        archive.writestr("study_config.json", json.dumps(scrub_secrets(study.as_dict()), ensure_ascii=False, indent=2))
        result.files["study_config.json"] = 1
        manifest = {
            "generated_at": stamp, "timezone": "UTC",
            "options": {"bom": options.bom, "exclude_pii": options.exclude_pii,
                        "escape_formulas": options.escape_formulas, "include_test": options.include_test},
            "study_version": study.version,
            "files": dict(result.files), "deployment": deployment,
            "preflight": preflight_record.manifest_entry(session, study),
        }
        archive.writestr("manifest.json", json.dumps(manifest, ensure_ascii=False, indent=2))
        result.files["manifest.json"] = 1
    result.data = buffer.getvalue()
    return result


def deployment_facts(settings) -> dict[str, Any]:
    """What produced the data, without URLs or keys: provider names, pilot mode."""
    return {
        "reply_providers": list(settings.llm_providers),
        "consolidation_providers": list(settings.consolidation_providers or settings.llm_providers),
        "embedding_provider": settings.embedding_provider,
        "pilot_mode": settings.pilot_mode,
        "day_seconds": settings.day_seconds,
        # the clocks: PILOT_DAY_SECONDS (day_seconds above) and PILOT_TIMER_SCALE as set (null: not set), and
        # the real seconds per study second they give the task timers (task_sessions.csv active_real_seconds)
        "pilot_day_seconds": settings.day_seconds if settings.pilot_mode else None,
        "pilot_timer_scale": settings.pilot_timer_scale if settings.pilot_mode else None,
        "timer_scale": settings.timer_scale,
        "database": settings.database_url.split(":", 1)[0],
    }


def export_runtime(runtime, *, options: ExportOptions, actor_id: int | None = None,
                   channel: str = "api") -> ExportResult:
    """Build the export from the app's database and record who exported what (audit log)."""
    with runtime.db.session() as session:
        result = build_export(session, runtime.study, options=options, generated_at=runtime.clock.now(),
                              deployment=deployment_facts(runtime.settings))
        session.add(AuditLog(at=result.generated_at, actor_user_id=actor_id, action="data_exported", details={
            "channel": channel, "bom": options.bom, "exclude_pii": options.exclude_pii,
            "escape_formulas": options.escape_formulas, "include_test": options.include_test,
            "files": result.files}))
    return result


def write_export(runtime, path: str | Path, *, options: ExportOptions, channel: str = "cli") -> ExportResult:
    """Export to a zip file on disk (scripts and the ``flask export`` command)."""
    result = export_runtime(runtime, options=options, channel=channel)
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(result.data)
    return result
