"""The study report (``flask --app app report --out DIR``, the admin console's "Generate report"): from a data
export to ``report.json`` (the figures as data) and ``report.html`` (the same figures, self-contained, in zh or
en).

The report is built from the export, never from the database: ``report_runtime`` builds an export in memory and
reads it back exactly as ``load_export`` reads an export zip or folder from disk, so a lab (or the
pre-registration bundle's script) can reproduce every figure from the files it archived. The statistics are
``services.reporting.analysis``; the page is ``report_html``; the charts ``report_charts``.

``report.json``: ``consort`` (counts by condition and task), ``attrition`` (``test``, ``p``, ...), ``outcomes``
(one row per scale and contrast against the reference condition: ``scale``, ``contrast`` such as ``"L4-L1"``,
``task`` "all", ``estimate``, ``ci_low``, ``ci_high``, ``p``, ``n``, ``effect_size``, ``model``), ``latency``
(per condition, or ``recorded: false``), ``exposure`` (per condition and task, or ``recorded: false``), and
``outcomes_by_task``, ``models`` (each scale's model or why none was fitted), ``descriptives``,
``manipulation`` (pre-flight, recall events, ``mc_1``), ``study`` and ``export``.
"""
from __future__ import annotations

import csv
import io
import json
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import datetime
from pathlib import Path
from typing import Any

from database.models import AuditLog
from services.platform.clock import utc_iso
from services.reporting import analysis, report_html
from services.reporting.export_service import CSV_FILES, ExportOptions, build_export, deployment_facts
from services.study.evidence import Verdict

REPORT_LANGUAGES = ("zh", "en")
SCHEMA_VERSION = 1


class ExportUnreadable(ValueError):
    """The path or bytes are not a data export this report can read; the message says what is missing."""


@dataclass
class ExportTables:
    """An export as read back: every CSV as ``{column: text}`` rows, the study definition and the manifest."""
    tables: dict[str, list[dict[str, str]]]
    study: dict[str, Any]
    manifest: dict[str, Any]

    def rows(self, name: str) -> list[dict[str, str]]:
        return self.tables.get(name, [])


def _csv_rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text.lstrip("\ufeff"), newline="")))


def load_export(source: bytes | str | Path) -> ExportTables:
    """An export zip (bytes or a path) or a folder it was unpacked into."""
    if isinstance(source, bytes | bytearray):
        return _from_zip(zipfile.ZipFile(io.BytesIO(source)))
    path = Path(source)
    if path.is_dir():
        return _from_files(lambda name: (path / name).read_text(encoding="utf-8") if (path / name).is_file()
                           else None)
    if not path.is_file():
        raise ExportUnreadable(f"{path}: no such file or folder")
    try:
        return _from_zip(zipfile.ZipFile(path))
    except zipfile.BadZipFile as exc:
        raise ExportUnreadable(f"{path}: not a zip file") from exc


def _from_zip(archive: zipfile.ZipFile) -> ExportTables:
    names = set(archive.namelist())
    return _from_files(lambda name: archive.read(name).decode("utf-8") if name in names else None)


def _from_files(read) -> ExportTables:
    study_text, manifest_text = read("study_config.json"), read("manifest.json")
    missing = [n for n in ("study_config.json", "participants.csv", "questionnaires_long.csv") if read(n) is None]
    if missing:
        raise ExportUnreadable(f"not a data export: {', '.join(missing)} missing")
    tables = {name: _csv_rows(text) for name in CSV_FILES if (text := read(name)) is not None}
    return ExportTables(tables=tables, study=json.loads(study_text),
                        manifest=json.loads(manifest_text) if manifest_text else {})


VERDICT_FIELDS = {f.name for f in fields(Verdict)}


def _verdicts(value: Any) -> Iterator[dict[str, Any]]:
    """Every judged target (``services.study.evidence.Verdict.as_dict``) anywhere inside a stored check."""
    if isinstance(value, dict):
        if VERDICT_FIELDS <= set(value):
            yield {k: value[k] for k in VERDICT_FIELDS}
            return
        for inner in value.values():
            yield from _verdicts(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from _verdicts(inner)


def _preflight(manifest: dict[str, Any]) -> dict[str, Any]:
    """The latest stored pre-flight report as the export's manifest carries it: its state for the exported study
    definition and each check's verdict, with the failures it names."""
    entry = manifest.get("preflight") or {}
    report = entry.get("report")
    if not report:
        return {"state": entry.get("state", "not_recorded"), "report": None}
    checks = {}
    for name, check in (report.get("checks") or {}).items():
        details = [str(x) for key in ("failures", "failed_checks") for x in check.get(key) or []]
        if check.get("message") or check.get("reason"):
            details.append(str(check.get("message") or check.get("reason")))
        checks[name] = {"verdict": check.get("verdict"), "passed": check.get("passed"), "details": details,
                        "targets": list(_verdicts(check))}
    return {"state": entry.get("state"), "study_hash": entry.get("study_hash"), "report_id": report.get("id"),
            "created_at": report.get("created_at"), "passed": report.get("passed"),
            "embedder_model": report.get("embedder_model"), "chat_model": report.get("chat_model"),
            "checks": checks}


def build_report(export: ExportTables, *, generated_at: datetime) -> dict[str, Any]:
    """Every figure of the report, from the export's tables (the analysis module's functions)."""
    study = export.study
    participants, answers = export.rows("participants.csv"), export.rows("questionnaires_long.csv")
    sessions = export.rows("task_sessions.csv")
    results = analysis.outcomes(answers, participants, study)
    models = results["models"]
    exposure = analysis.exposure(sessions, study)
    return {
        "schema_version": SCHEMA_VERSION,
        "generated_at": utc_iso(generated_at),
        "study": {"name": study.get("name"), "hash": (export.manifest.get("preflight") or {}).get("study_hash"),
                  "conditions": analysis.conditions(study), "tasks": analysis.task_ids(study),
                  "reference_condition": results["reference"], "exclude_flags": analysis.exclude_flags(study),
                  "scales": {name: {"items": items, "title": (study["instruments"][name].get("title") or {})}
                             for name, items in analysis.scales(study).items()}},
        "export": {"generated_at": export.manifest.get("generated_at"), "files": export.manifest.get("files", {})},
        "consort": analysis.consort(participants, sessions, study),
        "attrition": analysis.attrition(participants, study),
        "manipulation": {
            "preflight": _preflight(export.manifest),
            "recall_events": analysis.recall_events(export.rows("recall_events.csv"), sessions, study),
            "mc": analysis.manipulation_check(answers, participants, study),
        },
        "latency": analysis.latency(export.rows("messages.csv"), study),
        "exposure": exposure,
        "outcomes": results["table"],
        "outcomes_by_task": [{"scale": m["scale"], **row} for m in models if m["status"] == "fitted"
                             for row in m["by_task"]],
        "models": [{k: v for k, v in m.items() if k not in ("contrasts", "by_task")} for m in models],
        "descriptives": results["descriptives"],
        "excluded_participants": results["excluded"],
    }


def write_report(report: dict[str, Any], out_dir: str | Path, *, language: str) -> dict[str, Path]:
    """DIR/report.json and DIR/report.html (``language`` zh or en)."""
    if language not in REPORT_LANGUAGES:
        raise ValueError(f"report language must be one of {', '.join(REPORT_LANGUAGES)}, not {language!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "report.json", "html": out / "report.html"}
    paths["json"].write_text(json.dumps({**report, "language": language}, ensure_ascii=False, indent=2),
                             encoding="utf-8")
    paths["html"].write_text(report_html.render(report, language), encoding="utf-8")
    return paths


def report_zip(report: dict[str, Any], *, language: str) -> bytes:
    """report.html and report.json in a zip (the admin console's download)."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("report.html", report_html.render(report, language))
        archive.writestr("report.json", json.dumps({**report, "language": language}, ensure_ascii=False, indent=2))
    return buffer.getvalue()


def report_runtime(runtime, *, actor_id: int | None = None, channel: str = "cli") -> dict[str, Any]:
    """The report of the app's study: an export built in memory (no usernames or free text: the report needs
    neither), read back as from disk; the audit log records who made it."""
    with runtime.db.session() as session:
        now = runtime.clock.now()
        export = build_export(session, runtime.study, options=ExportOptions(exclude_pii=True, escape_formulas=False),
                              generated_at=now, deployment=deployment_facts(runtime.settings))
        report = build_report(load_export(export.data), generated_at=now)
        session.add(AuditLog(at=now, actor_user_id=actor_id, action="report_generated", details={
            "channel": channel, "participants": export.files.get("participants.csv"),
            "outcomes": len(report["outcomes"])}))
    return report
