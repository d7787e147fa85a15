"""The ``database`` fixture on PostgreSQL (tests/conftest.py, ``PostgresTemplate``): a test's database is emptied in
place when its schema is still the migrated template's, and copied from the template again when a test changed
the schema; either way the next test sees what a fresh copy holds."""
from __future__ import annotations

import pytest
import sqlalchemy as sa

import tests.conftest as conftest

pytestmark = pytest.mark.postgres


@pytest.fixture
def template(database, migrated_postgres_template):
    if migrated_postgres_template is None:
        pytest.skip("the template database is PostgreSQL's")
    return migrated_postgres_template


@pytest.fixture
def copies(monkeypatch):
    """The databases copied afresh from the template from here on."""
    made: list[str] = []
    drop_and_create = conftest._drop_and_create

    def counted(url, name, template=None):
        made.append(name)
        drop_and_create(url, name, template)

    monkeypatch.setattr(conftest, "_drop_and_create", counted)
    return made


def _state(url: str) -> dict:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return {
                "users": conn.execute(sa.text("SELECT count(*) FROM users")).scalar(),
                "counter": conn.execute(sa.text("SELECT id, next_slot FROM assignment_counter")).all(),
                "revision": conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar(),
                "next_audit_id": conn.execute(sa.text(
                    "INSERT INTO audit_log (action, details, at) VALUES ('probe', '{}', now()) RETURNING id"
                )).scalar(),
                "columns": {c["name"] for c in sa.inspect(conn).get_columns("users")},
            }
    finally:
        engine.dispose()


def _write_rows(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(sa.text("UPDATE assignment_counter SET next_slot = next_slot + 40"))
            for action in ("a", "b", "c"):
                conn.execute(sa.text("INSERT INTO audit_log (action, details, at) VALUES (:a, '{}', now())"),
                             {"a": action})
    finally:
        engine.dispose()


def test_rows_are_emptied_in_place_and_the_templates_rows_and_sequences_come_back(database, template, copies):
    fresh = _state(database.url)
    _write_rows(database.url)
    holder = sa.create_engine(database.url)
    left_open = holder.connect()  # an earlier test's connection, still open: ended as DROP ... WITH (FORCE) did
    left_open.execute(sa.text("SELECT 1 FROM users"))
    template.reset(database.url)
    assert _state(database.url) == fresh
    assert copies == []  # emptied in place, not copied
    with pytest.raises(sa.exc.OperationalError):
        left_open.execute(sa.text("SELECT 1"))
    holder.dispose()


@pytest.mark.parametrize("change", [
    "ALTER TABLE users ADD COLUMN extra integer",
    "ALTER TABLE users ALTER COLUMN username SET DEFAULT 'x'",
    "DROP INDEX ix_audit_log_action; CREATE INDEX ix_audit_log_action ON audit_log (action)",
    "UPDATE alembic_version SET version_num = '0001'",
    "CREATE SCHEMA memlab",
])
def test_a_changed_schema_is_copied_from_the_template_again(database, template, copies, change):
    fresh = _state(database.url)
    engine = sa.create_engine(database.url)
    with engine.begin() as conn:
        conn.exec_driver_sql(change)
    engine.dispose()
    template.reset(database.url)
    assert copies == [sa.engine.make_url(database.url).database]
    assert _state(database.url) == fresh


def test_a_schema_dropped_and_migrated_again_is_copied_afresh(database, template, copies):
    """The migration tests' way: DROP SCHEMA public and Alembic again gives the same tables under new oids."""
    fresh = _state(database.url)
    conftest._reset_schema(database)
    database.upgrade()
    database.dispose()
    template.reset(database.url)
    assert len(copies) == 1
    assert _state(database.url) == fresh
