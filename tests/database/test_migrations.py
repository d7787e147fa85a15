import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect

from database.db_manager import Database
from database.models import Base


@pytest.mark.postgres
def test_upgrade_from_empty_to_head_matches_the_models(database_url, tmp_path):
    db = Database(database_url)
    if not database_url.startswith("sqlite"):
        from tests.conftest import _reset_schema

        _reset_schema(db)
    assert db.current_revision() is None
    db.upgrade()
    assert db.current_revision() is not None
    tables = set(inspect(db.engine).get_table_names())
    assert set(Base.metadata.tables) <= tables
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"models and migrations disagree: {diff}"
    db.upgrade()  # idempotent
    db.dispose()


def test_migrate_script_upgrades_the_database_named_in_the_environment(tmp_path, monkeypatch, capsys):
    import importlib.util
    from pathlib import Path

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    spec = importlib.util.spec_from_file_location(
        "migrate_script", Path(__file__).resolve().parents[2] / "scripts" / "migrate.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main([]) == 0
    assert "at revision" in capsys.readouterr().out
    assert "users" in Database(url).table_names()
