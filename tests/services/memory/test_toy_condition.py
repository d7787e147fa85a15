"""Adding a memory condition takes a module, its registration and its prompt text - nothing else.

The condition below lives only in this test module: it remembers which earlier tasks the
participant completed. It is registered here, named in a study file (its ``conditions`` entry
and system-prompt paragraph), and a participant assigned to it walks T1 -> T2 through the
HTTP API, as a bot would.
"""
from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from config import Settings
from database.models import Message, TaskSession, User
from services.memory import registry
from services.memory.base import BuildRequest, ManipulationCheck, MemoryCondition
from services.memory.context import MemoryContext, earlier_turns
from tests.conftest import walk_task

TOY_ID = "X1"
TOY_PROMPT = {"zh": "你只记得这位用户以前完成过哪些任务（见下方）。",
              "en": "You only remember which tasks this user did before."}
TITLE = {"zh": "以前完成的任务", "en": "Tasks done before"}


class EarlierTasksCondition(MemoryCondition):
    id = TOY_ID
    name = "earlier_tasks"
    manipulation_check = ManipulationCheck("the ids of the tasks completed before, nothing of what was said",
                                           holds_no_fact=True)

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        tasks = sorted({turn["task_id"] for turn in earlier_turns(request.session, request.user_id,
                                                                   request.task_session)})
        context.add_section("earlier_tasks", tasks, ", ".join(tasks) or None, title=TITLE)


@pytest.fixture
def toy_condition():
    condition = registry.register(EarlierTasksCondition())
    yield condition
    registry.unregister(TOY_ID)


@pytest.fixture
def settings(database_url, tmp_path, monkeypatch, toy_condition):
    study_file = tmp_path / "toy_study.json"
    study_file.write_text(json.dumps({
        "enabled_conditions": [TOY_ID],
        "conditions": {TOY_ID: {"name": "earlier_tasks", "recent_turns": 0}},
        "system_prompts": {TOY_ID: TOY_PROMPT},
    }, ensure_ascii=False), encoding="utf-8")
    monkeypatch.setenv("STUDY_CONFIG", str(study_file))
    return Settings.from_env(database_url=database_url, secret_key="test-secret", testing=True,
                             scheduler_enabled=False, consolidate_inline=True, assignment_seed=1234,
                             llm_providers=["offline"], embedding_provider="offline", rate_limits_enabled=False)


def test_a_condition_registered_from_a_test_module_walks_t1_to_t2(app, make_participant, clock):
    runtime = app.extensions["memory_lab"]
    study = runtime.study
    api = make_participant("toybot")
    walk_task(api, clock, "T1", ["你好，我叫林晓。", "我养了一只猫。"], study=study)
    clock.advance(days=2, seconds=60)
    walk_task(api, clock, "T2", ["你还记得我吗？"], study=study)

    with runtime.db.Session() as session:
        user = session.scalar(select(User).where(User.username == "toybot"))
        assert user.memory_group == TOY_ID
        replies = {m.task_id: m for m in session.scalars(
            select(Message).where(Message.user_id == user.id, Message.role == "assistant").order_by(Message.id))}
        t1, t2 = replies["T1"], replies["T2"]
        assert t1.memory_context["earlier_tasks"] == [] and t2.memory_context["earlier_tasks"] == ["T1"]
        assert t2.memory_group == TOY_ID and t2.provider == "offline"
        system = t2.prompt[0]["content"]
        assert TOY_PROMPT["zh"] in system and "[以前完成的任务]\nT1" in system
        assert "（没有任何以前的记忆）" in t1.prompt[0]["content"]
        sessions = session.scalars(select(TaskSession).where(TaskSession.user_id == user.id)).all()
        assert {s.task_id: s.consolidation_status for s in sessions} == {"T1": "done", "T2": "done"}


def test_a_study_naming_an_unregistered_condition_is_refused(database_url, tmp_path, monkeypatch):
    from app import create_app

    study_file = tmp_path / "study.json"
    study_file.write_text(json.dumps({"enabled_conditions": ["X9"], "conditions": {"X9": {"name": "nothing",
                                                                                         "recent_turns": 0}},
                                      "system_prompts": {"X9": TOY_PROMPT}}), encoding="utf-8")
    monkeypatch.setenv("STUDY_CONFIG", str(study_file))
    settings = Settings.from_env(database_url=database_url, secret_key="test-secret", testing=True,
                                 scheduler_enabled=False)
    with pytest.raises(ValueError, match="X9"):
        create_app(settings)


def test_registering_an_id_twice_is_refused(toy_condition):
    with pytest.raises(ValueError, match=TOY_ID):
        registry.register(EarlierTasksCondition())
    assert registry.get(TOY_ID) is toy_condition
