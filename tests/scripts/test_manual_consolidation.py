"""scripts/manual_consolidation.py against a real (test) database, with the offline providers."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from sqlalchemy import func, select

from database.models import ConsolidationRun, Message, ProfileVersion, User
from tests.memory_factories import T1_EN, T1_ZH, add_task, make_participant

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "manual_consolidation.py"


@pytest.fixture
def script(monkeypatch, database, database_url):
    monkeypatch.setenv("DATABASE_URL", database_url)
    monkeypatch.setenv("LLM_PROVIDERS", "offline")
    monkeypatch.delenv("CONSOLIDATION_PROVIDERS", raising=False)
    monkeypatch.setenv("EMBEDDING_PROVIDER", "offline")
    spec = importlib.util.spec_from_file_location("manual_consolidation", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def participants(database, clock):
    with database.session() as session:
        zh = make_participant(session, clock, username="li", group="L3")
        add_task(session, clock, zh, "T1", T1_ZH[:4])
        en = make_participant(session, clock, username="anna", group="L4", language="en")
        add_task(session, clock, en, "T1", T1_EN[:3])
        return zh.id, en.id


def counts(database):
    with database.session() as session:
        return (session.scalar(select(func.count(ProfileVersion.id))),
                session.scalar(select(func.count(ConsolidationRun.id))),
                session.scalar(select(func.count(Message.id)).where(Message.consolidated_at.is_not(None))))


def test_dry_run_prints_the_changes_and_writes_nothing(script, database, participants, capsys):
    assert script.main(["--user", "li", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "dry_run" in out and "profile version 1 (offline-rules)" in out
    assert "+ constraints: 对海鲜过敏 [T1]" in out and "+ basic_info.name: 李明 [T1]" in out
    assert "基本信息：姓名：李明 [T1]" in out and "salience" in out
    assert "dry run: nothing was written" in out
    assert counts(database) == (0, 0, 0)


def test_user_by_id_then_all_pending_then_nothing_left(script, database, participants, capsys):
    zh_id, en_id = participants
    assert script.main(["--user", str(en_id)]) == 0
    assert "succeeded" in capsys.readouterr().out
    with database.session() as session:
        [profile] = session.scalars(select(ProfileVersion)).all()
        assert profile.user_id == en_id and "allergic to shellfish [T1]" in profile.content["constraints"]
        assert session.get(User, zh_id) is not None
    assert script.main(["--all-pending"]) == 0
    assert counts(database) == (2, 2, 7)
    capsys.readouterr()
    assert script.main(["--all-pending"]) == 0
    assert capsys.readouterr().out.strip() == "nothing to consolidate"
    assert counts(database) == (2, 2, 7)


def test_unknown_user_and_missing_choice(script, database, participants, capsys):
    assert script.main(["--user", "nobody"]) == 2
    assert "no participant 'nobody'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.main([])
