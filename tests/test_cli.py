from sqlalchemy import select

from database.models import AuditLog, User
from tests.conftest import ApiClient


def test_create_admin_from_environment_password(app, monkeypatch):
    monkeypatch.setenv("ADMIN_PASSWORD", "a-strong-admin-pw")
    result = app.test_cli_runner().invoke(args=["create-admin", "root_admin"])
    assert result.exit_code == 0, result.output
    api = ApiClient(app.test_client())
    response = api.login("root_admin", "a-strong-admin-pw")
    assert response.status_code == 200 and response.get_json()["user"]["role"] == "admin"
    assert api.get("/api/admin/participants").status_code == 200
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(AuditLog.action).where(AuditLog.action == "admin_created"))


def test_create_admin_prompts_when_no_environment_password(app, monkeypatch):
    monkeypatch.delenv("ADMIN_PASSWORD", raising=False)
    result = app.test_cli_runner().invoke(args=["create-admin", "prompted"], input="typed-password\ntyped-password\n")
    assert result.exit_code == 0, result.output
    assert ApiClient(app.test_client()).login("prompted", "typed-password").status_code == 200


def test_create_admin_refuses_a_participant_name_and_weak_password(app, make_participant, monkeypatch):
    make_participant("someone")
    monkeypatch.setenv("ADMIN_PASSWORD", "a-strong-admin-pw")
    result = app.test_cli_runner().invoke(args=["create-admin", "someone"])
    assert result.exit_code != 0
    monkeypatch.setenv("ADMIN_PASSWORD", "short")
    assert app.test_cli_runner().invoke(args=["create-admin", "newadmin"]).exit_code != 0
    with app.extensions["memory_lab"].db.Session() as session:
        assert session.scalar(select(User.role).where(User.username == "someone")) == "participant"
        assert session.scalar(select(User).where(User.username == "newadmin")) is None


def test_first_start_prints_a_generated_admin_password_once(app, capsys):
    from app import bootstrap_admin_once

    bootstrap_admin_once(app)
    out = capsys.readouterr().out
    password = out.split("password: ")[1].split()[0]
    assert len(password) >= 12
    assert ApiClient(app.test_client()).login("admin", password).status_code == 200
    bootstrap_admin_once(app)
    assert "password" not in capsys.readouterr().out


def test_db_upgrade_command(app):
    from alembic.script import ScriptDirectory

    from database.db_manager import alembic_config

    head = ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()
    result = app.test_cli_runner().invoke(args=["db-upgrade"])
    assert result.exit_code == 0 and f"database at {head}" in result.output


def test_consolidate_command_runs_pending_sessions_once(app, make_participant, clock, study):
    from database.models import ConsolidationRun
    from tests.conftest import walk_task

    runtime = app.extensions["memory_lab"]
    runtime.background.inline = False  # leave the finished task pending, as if the server had stopped
    runtime.background.submit = lambda *args, **kwargs: None
    api = make_participant("cli_consolidate")
    walk_task(api, clock, "T1", ["我叫王芳，我对花生过敏。"], study=study)
    runner = app.test_cli_runner()
    dry = runner.invoke(args=["consolidate", "--all-pending", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    with runtime.db.Session() as session:
        assert session.scalar(select(ConsolidationRun).where(ConsolidationRun.status == "succeeded")) is None
    result = runner.invoke(args=["consolidate", "--user", "cli_consolidate"])
    assert result.exit_code == 0, result.output
    assert "succeeded" in result.output
    again = runner.invoke(args=["consolidate", "--all-pending"])
    assert again.exit_code == 0 and "nothing to consolidate" in again.output
    assert runner.invoke(args=["consolidate"]).exit_code != 0  # says which option is missing
