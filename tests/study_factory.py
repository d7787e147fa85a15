"""A whole study's rows with a known effect, written through the services the routes use (assignment by
permuted blocks, the questionnaire's items, validation and storage), for the report's tests.

Every participant has a person effect (SD ``person_sd``) shared by all their answers; each item adds noise
(SD ``item_sd``) and is rounded and clipped to its 1-7 range. ``effects`` maps (scale, condition) to the points
added to that condition's answers on that scale, at every task. A share of participants stops after T2 (and is
withdrawn), and ``attention_failures`` participants fail an attention item (excluded from the outcomes by the
default ``report.exclude_flags``).
"""
from __future__ import annotations

from datetime import timedelta

import numpy as np

from database.models import RecallEvent, TaskSession, User
from services.study import assignment_service, questionnaire_service
from services.study.definition import Study


def populate(session, study: Study, clock, *, per_condition: int, effects: dict[tuple[str, str], float],
             seed: int = 7, person_sd: float = 0.5, item_sd: float = 0.6, base: float = 4.0,
             dropout: float = 0.1, attention_failures: int = 2, recall_group: str | None = None) -> list[User]:
    rng = np.random.default_rng(seed)
    users = []
    n = per_condition * len(study.enabled_conditions)
    for index in range(n):
        now = clock.now()
        user = User(username=f"sim{index:04d}", username_key=f"sim{index:04d}", password_hash="x", role="participant",
                    participant_code=f"S{index:05d}", language="zh" if index % 2 else "en", created_at=now,
                    consent_at=now, consent_version=study.consent.version, status="active")
        session.add(user)
        session.flush()
        assignment = assignment_service.assign(session, user, study, clock, seed=seed)
        users.append((user, assignment.memory_group, rng.normal(0.0, person_sd), rng.random() < dropout))
    for task in study.tasks:
        for user, group, person, drops in users:
            if drops and task.id in ("T3", "T4"):
                continue
            at = clock.now() + timedelta(days=task.unlock_offset_days)
            ts = TaskSession(user_id=user.id, task_id=task.id, attempt=1, status="done", phase="closed",
                             started_at=at, last_activity_at=at, chat_ended_at=at, completed_at=at,
                             end_reason="finished", consolidation_status="done", active_seconds=600.0)
            session.add(ts)
            session.flush()
            items = questionnaire_service.items_for_task(study, task, user.language)
            answers = {}
            for item in items:
                if item["type"] in ("likert", "ios"):
                    shift = effects.get((item["instrument"], group), 0.0)
                    value = base + shift + person + rng.normal(0.0, item_sd)
                    answers[item["id"]] = int(min(item["max"], max(item["min"], round(value))))
                elif item["type"] == "choice":
                    answers[item["id"]] = item["options"][0]["value"]
                elif item["type"] == "text":
                    answers[item["id"]] = "ok"
            cleaned = questionnaire_service.validate_answers(items, answers, study.limits.max_text_answer_chars)
            questionnaire_service.store_answers(session, ts, items, cleaned, _At(at))
    attention = study.instruments["attention_check"]
    expected = attention.items[0]["expected"]
    for user, _, _, _ in users[:attention_failures]:
        ts = session.query(TaskSession).filter_by(user_id=user.id, task_id="T1").one()
        items = [{"id": attention.items[0]["id"], "instrument": "attention_check"}]
        questionnaire_service.store_answers(session, ts, items, {attention.items[0]["id"]: expected % 7 + 1},
                                            _At(ts.completed_at))
    for user, _, _, drops in users:
        if drops:
            user.status, user.withdrawn_at, user.withdrawn_by = "withdrawn", clock.now(), "participant"
    session.flush()
    return [u for u, *_ in users]


class _At:
    """A clock fixed at one time (store_answers stamps answers with ``clock.now()``)."""

    def __init__(self, at) -> None:
        self.at = at

    def now(self):
        return self.at


def add_recall_events(session, users: list[User], groups: dict[int, str], group: str, clock) -> int:
    """One recalled and one considered memory per ``group`` participant at T2 (messages as the chat path stores)."""
    from database.models import Message

    count = 0
    for user in users:
        if groups[user.id] != group:
            continue
        ts = session.query(TaskSession).filter_by(user_id=user.id, task_id="T2").one()
        t1 = session.query(TaskSession).filter_by(user_id=user.id, task_id="T1").one()
        memory = Message(user_id=user.id, task_session_id=t1.id, task_id="T1", role="user", content="I like tea",
                         created_at=t1.started_at)
        query = Message(user_id=user.id, task_session_id=ts.id, task_id="T2", role="user", content="tea?",
                        created_at=ts.started_at)
        session.add_all([memory, query])
        session.flush()
        for rank, recalled in ((1, True), (2, False)):
            session.add(RecallEvent(user_id=user.id, query_message_id=query.id, memory_message_id=memory.id,
                                    task_id="T2", rank=rank, cosine=0.9, r=0.8, t=2.0, g_before=1.0, g_after=1.7,
                                    p=0.6, p_final=0.65, salience=0.3, recalled=recalled, created_at=clock.now()))
            count += 1
    session.flush()
    return count
