"""Shared fixtures: a migrated database per test, the study definition, a manual clock.

App-level fixtures (``app``, ``client``, ``auth``) are added below by the platform tests.
Set ``TEST_DATABASE_URL`` to a PostgreSQL URL to run the suite against PostgreSQL;
``make test`` does that for the tests marked ``postgres``.
"""
from __future__ import annotations

import os
from datetime import datetime

import pytest

from config import Settings, load_study
from database.db_manager import Database
from services.clock import ManualClock


@pytest.fixture
def study():
    return load_study()


@pytest.fixture
def clock():
    return ManualClock(datetime(2026, 3, 2, 9, 0, 0))


@pytest.fixture
def database_url(tmp_path):
    return os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'test.db'}"


@pytest.fixture
def database(database_url):
    db = Database(database_url)
    if not database_url.startswith("sqlite"):
        _reset_schema(db)
    db.upgrade()
    yield db
    db.dispose()


@pytest.fixture
def settings(database_url, tmp_path):
    return Settings.from_env(
        database_url=database_url,
        secret_key="test-secret",
        testing=True,
        scheduler_enabled=False,
        consolidate_inline=True,
        assignment_seed=1234,
        llm_providers=["offline"],
        embedding_provider="offline",
    )


@pytest.fixture
def db_session(database):
    with database.session() as session:
        yield session


def _reset_schema(db: Database) -> None:
    from sqlalchemy import text

    with db.engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
