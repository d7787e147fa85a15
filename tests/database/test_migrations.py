import os

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


def _database_at_0001(database_url: str) -> Database:
    db = Database(database_url)
    if not database_url.startswith("sqlite"):
        from tests.conftest import _reset_schema

        _reset_schema(db)
    db.upgrade("0001")
    return db


def _add_user(conn, user_id: int, username: str) -> None:
    from sqlalchemy import text

    conn.execute(text("INSERT INTO users (id, username, password_hash, role, language, created_at, status) "
                      "VALUES (:id, :name, 'x', 'participant', 'zh', '2026-03-01 09:00:00', 'active')"),
                 {"id": user_id, "name": username})


@pytest.mark.postgres
def test_0002_fills_the_case_folded_key_of_existing_accounts(tmp_path):
    from sqlalchemy import text

    db = _database_at_0001(os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'old.db'}")
    with db.engine.begin() as conn:
        _add_user(conn, 1, "Alice")
        _add_user(conn, 2, "ＢＯＢ")
    db.upgrade()
    with db.engine.connect() as conn:
        rows = conn.execute(text("SELECT username_key, session_version FROM users ORDER BY id")).all()
    assert [tuple(r) for r in rows] == [("alice", 0), ("bob", 0)]
    db.dispose()


@pytest.mark.postgres
def test_0002_stops_on_usernames_differing_only_in_case_and_changes_nothing(tmp_path):
    from sqlalchemy import text

    db = _database_at_0001(os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'dupes.db'}")
    with db.engine.begin() as conn:
        _add_user(conn, 1, "name")
        _add_user(conn, 2, "NAME")
    with pytest.raises(RuntimeError) as raised:
        db.upgrade()
    assert "'name' (id 1)" in str(raised.value) and "'NAME' (id 2)" in str(raised.value)
    assert db.current_revision() == "0001"
    assert "username_key" not in {c["name"] for c in inspect(db.engine).get_columns("users")}
    with db.engine.begin() as conn:  # the researcher renames one account; then the upgrade goes through
        conn.execute(text("UPDATE users SET username = 'name2' WHERE id = 2"))
    db.upgrade()
    assert db.current_revision() is not None and db.current_revision() != "0001"
    db.dispose()


@pytest.mark.postgres
def test_0016_adds_reply_timing_and_exposure_and_keeps_the_messages(tmp_path):
    """0016 (reply timing and memory_exposure) up and down on a database holding a reply: the rows stay, the
    new columns start empty and take values."""
    import importlib.util
    from pathlib import Path

    from alembic import command
    from sqlalchemy import text

    from database.db_manager import alembic_config

    path = Path(__file__).resolve().parents[2] / "database" / "migrations" / "versions"
    spec = importlib.util.spec_from_file_location("m0016", next(path.glob("0016_*.py")))
    migration = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(migration)
    url = os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'm0016.db'}"
    db = Database(url)
    if not url.startswith("sqlite"):
        from tests.conftest import _reset_schema

        _reset_schema(db)
    db.upgrade(migration.down_revision)
    with db.engine.begin() as conn:
        conn.execute(text("INSERT INTO users (id, username, username_key, password_hash, role, language, "
                          "created_at, status, session_version) VALUES (1, 'timing', 'timing', 'x', "
                          "'participant', 'zh', '2026-03-01 09:00:00', 'active', 0)"))
        conn.execute(text("INSERT INTO task_sessions (id, user_id, task_id, attempt, status, phase, started_at, "
                          "last_activity_at, active_seconds, idle_gap_count, idle_seconds, consolidation_status) "
                          "VALUES (1, 1, 'T2', 1, 'in_progress', 'chat', '2026-03-03 09:00:00', "
                          "'2026-03-03 09:00:00', 0, 0, 0, 'pending')"))
        conn.execute(text("INSERT INTO messages (id, user_id, task_session_id, task_id, role, content, created_at, "
                          "recall_count) VALUES (1, 1, 1, 'T2', 'user', 'hi', '2026-03-03 09:00:01', 0), "
                          "(2, 1, 1, 'T2', 'assistant', 'hello', '2026-03-03 09:00:02', 0)"))
    db.upgrade("0016")
    columns = {c["name"] for c in inspect(db.engine).get_columns("messages")}
    assert set(migration.TIMING) | {"memory_exposure"} <= columns
    with db.engine.begin() as conn:
        assert conn.execute(text("SELECT count(*) FROM messages WHERE pacing_delay_ms IS NULL "
                                 "AND memory_exposure IS NULL")).scalar() == 2
        conn.execute(text("UPDATE messages SET pacing_delay_ms = 250.5, visible_first_token_ms = 900 WHERE id = 2"))
        assert conn.execute(text("SELECT visible_first_token_ms - pacing_delay_ms FROM messages "
                                 "WHERE id = 2")).scalar() == 649.5
    command.downgrade(alembic_config(url), migration.down_revision)
    assert "pacing_delay_ms" not in {c["name"] for c in inspect(db.engine).get_columns("messages")}
    with db.engine.connect() as conn:
        assert conn.execute(text("SELECT count(*) FROM messages")).scalar() == 2
    db.upgrade()


@pytest.mark.postgres
def test_0024_moves_the_try_out_of_the_failure_message_and_back(tmp_path):
    """0024 on a failure log written before it: the English "[try N; ...]" prefix becomes try_number / action /
    retry_in_s beside the provider's own text; downgrade writes the prefix back as it was."""
    from alembic import command
    from sqlalchemy import text

    from database.db_manager import alembic_config

    url = os.environ.get("TEST_DATABASE_URL") or f"sqlite:///{tmp_path / 'm0024.db'}"
    db = Database(url)
    if not url.startswith("sqlite"):
        from tests.conftest import _reset_schema

        _reset_schema(db)
    db.upgrade("0023")
    old = {1: "[try 1; retried after 0.5 s] HTTP 503: busy", 2: "[try 2; fallback] APITimeoutError: timed out",
           3: "[try 3; give_up] HTTP 500: [internal] error", 4: "[try 1; gave up] refused",
           5: "skipped: 5 consecutive failures, circuit open for another 30 s", 6: "unusable JSON; missing facts"}
    with db.engine.begin() as conn:
        for row_id, message in old.items():
            conn.execute(text("INSERT INTO provider_failures (id, at, provider, purpose, error_class, message) "
                              "VALUES (:id, '2026-03-03 09:00:00', 'dashscope', 'reply', 'x', :message)"),
                         {"id": row_id, "message": message})
    db.upgrade("0024")
    with db.engine.connect() as conn:
        rows = {r[0]: tuple(r[1:]) for r in conn.execute(text(
            "SELECT id, try_number, action, retry_in_s, message FROM provider_failures"))}
    assert rows == {1: (1, "retry", 0.5, "HTTP 503: busy"), 2: (2, "fallback", None, "APITimeoutError: timed out"),
                    3: (3, "give_up", None, "HTTP 500: [internal] error"), 4: (1, "give_up", None, "refused"),
                    5: (None, None, None, old[5]), 6: (None, None, None, old[6])}
    with db.engine.begin() as conn:  # a row written after the upgrade: the skipped try of an open circuit
        conn.execute(text("INSERT INTO provider_failures (id, at, provider, purpose, error_class, message, "
                          "try_number, action) VALUES (7, '2026-03-03 09:00:00', 'dashscope', 'reply', "
                          "'circuit_open', 'skipped', 0, 'fallback')"))
    command.downgrade(alembic_config(url), "0023")
    assert "try_number" not in {c["name"] for c in inspect(db.engine).get_columns("provider_failures")}
    with db.engine.connect() as conn:
        messages = dict(conn.execute(text("SELECT id, message FROM provider_failures")).all())
    assert messages == {**old, 4: "[try 1; give_up] refused", 7: "skipped"}  # "gave up" was an action-less try
    db.upgrade()
    db.dispose()


# --- the chain itself -------------------------------------------------------------------------------------------
# Revisions 0001-0015 were written before this rule and their chain runs 0008 -> 0011 -> 0015 -> 0012 -> 0010 ->
# 0009; from 0016 on, a file's number is its place in the chain: each new revision follows the head and carries a
# higher number than every file before it, so the next number never branches the history.
LEGACY_LAST = 15


def _chain() -> list:
    """The revisions from base to head, asserting there is one head and no branch point on the way."""
    from alembic.script import ScriptDirectory

    from database.db_manager import alembic_config

    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    heads = script.get_heads()
    assert len(heads) == 1, f"the migration history has {len(heads)} heads: {heads}"
    chain = list(reversed(list(script.walk_revisions())))
    for rev in chain:
        assert len(rev.nextrev) <= 1, f"revision {rev.revision} branches into {sorted(rev.nextrev)}"
        assert rev.is_merge_point is False, f"revision {rev.revision} merges {rev.down_revision}"
    return chain


def test_the_migration_chain_is_linear_and_new_files_follow_the_head():
    from pathlib import Path

    chain = _chain()
    files = sorted(p.name for p in (Path(__file__).resolve().parents[2] / "database" / "migrations" / "versions")
                   .glob("[0-9]*.py"))
    assert len(files) == len(chain), "every migration file is on the chain"
    for rev in chain:
        assert rev.module.__file__.endswith(f"/{rev.revision}_" + Path(rev.module.__file__).name.split("_", 1)[1]), \
            f"revision id {rev.revision} is not its file's number"
    numbers = [int(rev.revision) for rev in chain]
    new = [n for n in numbers if n > LEGACY_LAST]
    assert new, "revisions after 0015 exist (the rule applies to them)"
    first_new = numbers.index(new[0])
    assert all(n <= LEGACY_LAST for n in numbers[:first_new]), "no legacy revision after a new one"
    assert new == sorted(new) and numbers[first_new:] == new, f"new revisions follow in file order: {numbers}"
    assert numbers[-1] == max(numbers), "the head carries the highest number"


def test_the_rule_catches_a_file_that_would_branch(tmp_path):
    """Two revisions naming the same parent give two heads: the check above would refuse them."""
    from alembic.script import ScriptDirectory

    from database.db_manager import MIGRATIONS_DIR, alembic_config

    versions = tmp_path / "versions"
    versions.mkdir()
    for path in (MIGRATIONS_DIR / "versions").glob("[0-9]*.py"):
        (versions / path.name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    for number in ("9998", "9999"):
        (versions / f"{number}_x.py").write_text(
            f"revision = '{number}'\ndown_revision = '{head}'\n\ndef upgrade():\n    pass\n\n"
            "def downgrade():\n    pass\n", encoding="utf-8")
    (tmp_path / "env.py").write_text((MIGRATIONS_DIR / "env.py").read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "script.py.mako").write_text("", encoding="utf-8")
    cfg = alembic_config("sqlite://")
    cfg.set_main_option("script_location", str(tmp_path))
    assert len(ScriptDirectory.from_config(cfg).get_heads()) == 2


@pytest.mark.postgres
def test_downgrade_to_base_and_back_up_leaves_the_schema_of_the_models(database_url):
    db = Database(database_url)
    if not database_url.startswith("sqlite"):
        from tests.conftest import _reset_schema

        _reset_schema(db)
    db.upgrade()
    from alembic import command

    from database.db_manager import alembic_config

    command.downgrade(alembic_config(database_url), "base")
    assert db.current_revision() is None
    assert set(db.table_names()) <= {"alembic_version"}, f"left behind: {db.table_names()}"
    db.upgrade()
    with db.engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), Base.metadata)
    assert diff == [], f"models and migrations disagree after a round trip: {diff}"
    db.dispose()
