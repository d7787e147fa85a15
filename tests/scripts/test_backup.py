"""scripts/backup.py: a backup taken while the app runs restores every table, row for row.

On SQLite through the online backup API; in the PostgreSQL run through pg_dump and pg_restore."""
from __future__ import annotations

import contextlib
import io
import uuid
from types import SimpleNamespace

import pytest
from sqlalchemy import create_engine, inspect, select, text
from sqlalchemy.engine import make_url

from database.models import Base
from scripts import backup as backup_script
from tests.conftest import walk_task

pytestmark = pytest.mark.postgres


def run(*args: str) -> SimpleNamespace:
    """``python scripts/backup.py ARGS``: its main in this process (a subprocess would import the app again, ~3 s
    of CPU), with its exit code and what it printed."""
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = backup_script.main(list(args))
    return SimpleNamespace(returncode=returncode, stdout=stdout.getvalue(), stderr=stderr.getvalue())


def snapshot(url: str) -> dict[str, list[tuple]]:
    """Every table's rows in primary-key order (alembic_version included)."""
    engine = create_engine(url)
    try:
        inspector = inspect(engine)
        tables = {}
        with engine.connect() as conn:
            for name in inspector.get_table_names():
                keys = inspector.get_pk_constraint(name)["constrained_columns"]
                order = ", ".join(keys) if keys else "1"
                tables[name] = [tuple(row) for row in conn.execute(text(f"SELECT * FROM {name} ORDER BY {order}"))]
        return tables
    finally:
        engine.dispose()


@pytest.fixture
def fresh_url(database_url, tmp_path):
    """An empty database to restore into: a new file, or a new PostgreSQL database on the same server."""
    if database_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'restored.db'}"
        return
    name = f"restore_{uuid.uuid4().hex[:8]}"
    admin = create_engine(database_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f"CREATE DATABASE {name}"))
    yield make_url(database_url).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
    admin.dispose()


def test_a_backup_restores_every_table(app, make_participant, clock, study, database_url, fresh_url, tmp_path):
    walk_task(make_participant("saved01"), clock, "T1", ["我叫小明，我喜欢跑步。", "我在北京工作。"], study=study)
    walk_task(make_participant("saved02"), clock, "T1", ["Hello there."], study=study)
    out = tmp_path / "backups" / "study.backup"
    created = run("create", "--out", str(out), "--database-url", database_url)
    assert created.returncode == 0, created.stderr
    assert out.exists() and "backed up" in created.stdout
    assert run("create", "--out", str(out), "--database-url", database_url).returncode == 1  # never overwritten

    restored = run("restore", str(out), "--database-url", fresh_url)
    assert restored.returncode == 0, restored.stderr
    before, after = snapshot(database_url), snapshot(fresh_url)
    assert set(Base.metadata.tables) | {"alembic_version"} <= set(after)
    assert after == before
    for table in ("users", "assignments", "task_sessions", "messages", "questionnaire_responses", "audit_log"):
        assert after[table], f"{table} should hold rows in this test"
    with create_engine(fresh_url).connect() as conn:
        assert conn.execute(select(text("count(*)")).select_from(text("users"))).scalar() == 2
    assert run("restore", str(out), "--database-url", fresh_url).returncode == 1  # only into an empty database
