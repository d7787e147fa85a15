"""The export as a researcher runs it: scripts/export_data.py and ``flask export``."""
from __future__ import annotations

import csv
import io
import subprocess
import sys
import zipfile
from pathlib import Path

from sqlalchemy import select

from database.models import AuditLog
from services.reporting.export_service import CSV_FILES
from tests.conftest import walk_task

ROOT = Path(__file__).resolve().parents[2]


def _messages(path: Path, *, bom: bool) -> list[dict[str, str]]:
    with zipfile.ZipFile(path) as archive:
        raw = archive.read("messages.csv")
    assert raw.startswith(b"\xef\xbb\xbf") is bom
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline="")))


def test_export_script_writes_the_zip(app, make_participant, clock, study, database_url, tmp_path):
    walk_task(make_participant("alice"), clock, "T1", ["我叫爱丽丝。"], study=study)
    out = tmp_path / "exports" / "study.zip"
    completed = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "export_data.py"), "--out", str(out), "--bom",
         "--database-url", database_url],
        capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert completed.returncode == 0, completed.stderr
    assert "messages.csv" in completed.stdout
    with zipfile.ZipFile(out) as archive:
        assert set(CSV_FILES) <= set(archive.namelist())
    rows = _messages(out, bom=True)
    assert [r["text"] for r in rows if r["role"] == "user"] == ["我叫爱丽丝。"]
    with app.extensions["memory_lab"].db.Session() as session:
        audit = session.scalars(select(AuditLog).where(AuditLog.action == "data_exported")).one()
        assert audit.details["channel"] == "script" and audit.details["bom"] is True


def test_flask_export_command(app, make_participant, clock, study, tmp_path):
    walk_task(make_participant("bob"), clock, "T1", ["我有一只狗。"], study=study)
    out = tmp_path / "cli.zip"
    result = app.test_cli_runner().invoke(args=["export", "--out", str(out), "--exclude-pii"])
    assert result.exit_code == 0, result.output
    assert "messages.csv 2" in result.output
    rows = _messages(out, bom=False)
    assert len(rows) == 2 and "text" not in rows[0]
    with zipfile.ZipFile(out) as archive:
        assert "bob" not in archive.read("participants.csv").decode("utf-8")


def test_flask_run_jobs_command(app, make_participant, clock, study):
    alice = make_participant("carol")
    assert alice.post("/api/tasks/T1/start").status_code == 201
    clock.advance(study.timing.max_wall_seconds + 1)
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert result.exit_code == 0, result.output
    assert "closed 1 abandoned chat(s); 1 consolidation run(s) (succeeded)" in result.output


def test_flask_run_jobs_stands_aside_while_a_scheduler_holds_the_lease(app, make_participant, clock, study):
    from services.platform.leases import SchedulerLeadership, release, try_acquire

    runtime = app.extensions["memory_lab"]
    alice = make_participant("dora")
    assert alice.post("/api/tasks/T1/start").status_code == 201
    clock.advance(study.timing.max_wall_seconds + 1)
    assert try_acquire(runtime.db, SchedulerLeadership.NAME, "a-server-process", 60)
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert result.exit_code == 0, result.output
    assert "nothing done: another process holds the scheduler lease" in result.output
    release(runtime.db, SchedulerLeadership.NAME, "a-server-process")
    result = app.test_cli_runner().invoke(args=["run-jobs"])
    assert "closed 1 abandoned chat(s); 1 consolidation run(s) (succeeded)" in result.output
    # the run gave the lease back: a server's scheduler can take it at once
    assert try_acquire(runtime.db, SchedulerLeadership.NAME, "a-server-process", 60)
