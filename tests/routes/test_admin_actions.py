"""Admin actions: withdraw, reset a stuck task, consolidate one participant or everything pending."""
from __future__ import annotations

from sqlalchemy import func, select

from database.models import AuditLog, ConsolidationRun, Message, ProfileVersion, TaskSession, User
from tests.conftest import walk_task


def _id(api) -> int:
    return api.get("/api/auth/me").get_json()["user"]["id"]


class DeferredRunner:
    """Stands in for the background pool when the task_end job never ran (a crash, a restart)."""

    def __init__(self) -> None:
        self.skipped: list[tuple] = []

    def submit(self, fn, *args, **kwargs):
        self.skipped.append((fn.__name__, args[1:]))

    def shutdown(self, wait: bool = True) -> None:
        return None


def test_withdraw_keeps_data_blocks_tasks_and_is_audited(app, make_participant, admin_client, clock, study):
    alice = make_participant("alice")
    walk_task(alice, clock, "T1", ["我想退出研究了。"], study=study)
    alice_id = _id(alice)
    response = admin_client.post(f"/api/admin/participants/{alice_id}/withdraw",
                                 json={"reason": "participant asked by e-mail"})
    assert response.status_code == 200
    assert response.get_json()["participant"]["status"] == "withdrawn"
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        user = session.get(User, alice_id)
        assert user.status == "withdrawn" and user.withdrawn_at == clock.now()
        assert user.withdrawn_reason == "participant asked by e-mail"
        assert session.scalar(select(func.count()).select_from(Message).where(Message.user_id == alice_id)) == 2
        audit = session.scalars(select(AuditLog).where(AuditLog.action == "participant_withdrawn")).all()
        assert len(audit) == 1 and audit[0].target_user_id == alice_id
        assert audit[0].details["reason"] == "participant asked by e-mail"
    clock.advance(days=3)
    refused = alice.post("/api/tasks/T2/start")
    assert refused.status_code == 403 and refused.get_json()["error"] == "withdrawn"
    again = admin_client.post(f"/api/admin/participants/{alice_id}/withdraw", json={"reason": "twice"})
    assert again.status_code == 409 and again.get_json()["error"] == "already_withdrawn"
    row = admin_client.get(f"/api/admin/participants/{alice_id}").get_json()["participant"]
    assert row["status"] == "withdrawn" and row["overdue"] is False and row["tasks"]["T1"] == "done"


def test_withdraw_without_a_reason_is_allowed_but_not_a_bad_one(make_participant, admin_client):
    alice, bob = make_participant("alice"), make_participant("bob")
    assert admin_client.post(f"/api/admin/participants/{_id(alice)}/withdraw", json={}).status_code == 200
    bad = admin_client.post(f"/api/admin/participants/{_id(bob)}/withdraw", json={"reason": 42})
    assert bad.status_code == 400
    assert admin_client.post("/api/admin/participants/9999/withdraw", json={}).status_code == 404


def test_reset_a_stuck_task(app, make_participant, admin_client, clock, study):
    alice = make_participant("alice")
    alice_id = _id(alice)
    path = f"/api/admin/participants/{alice_id}/tasks/T1/reset"
    not_started = admin_client.post(path, json={"reason": "stuck"})
    assert not_started.status_code == 409 and not_started.get_json()["error"] == "task_not_started"
    assert alice.post("/api/tasks/T1/start").status_code == 201
    assert alice.post("/api/tasks/T1/messages", json={"content": "页面卡住了"}).status_code == 201
    for body in ({}, {"reason": ""}, {"reason": "   "}, {"reason": None}):
        response = admin_client.post(path, json=body)
        assert response.status_code == 400, body
        assert response.get_json()["error"] == "reason_required"
    assert admin_client.post(f"/api/admin/participants/{alice_id}/tasks/T9/reset",
                             json={"reason": "x"}).status_code == 404
    response = admin_client.post(path, json={"reason": "browser crashed mid-task"})
    assert response.status_code == 200
    body = response.get_json()
    assert body["attempt"] == 1 and body["task"]["status"] == "available"
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        voided = session.get(TaskSession, body["task_session_id"])
        assert voided.status == "reset" and voided.reset_reason == "browser crashed mid-task"
        audit = session.scalars(select(AuditLog).where(AuditLog.action == "task_reset")).one()
        assert audit.details == {"task_id": "T1", "attempt": 1, "reason": "browser crashed mid-task"}
        assert audit.actor_user_id == _id(admin_client)
    # the participant starts over with a fresh attempt; the old one and its message are kept
    restarted = alice.post("/api/tasks/T1/start")
    assert restarted.status_code == 201 and restarted.get_json()["task_session_id"] != body["task_session_id"]
    assert alice.post("/api/tasks/T1/messages", json={"content": "重新开始"}).status_code == 201


def test_a_completed_task_cannot_be_reset(make_participant, admin_client, clock, study):
    alice = make_participant("alice")
    walk_task(alice, clock, "T1", ["完成了"], study=study)
    response = admin_client.post(f"/api/admin/participants/{_id(alice)}/tasks/T1/reset", json={"reason": "oops"})
    assert response.status_code == 409 and response.get_json()["error"] == "task_done"


def test_consolidate_a_participant_and_everything_pending(app, make_participant, admin_client, clock, study):
    runtime = app.extensions["memory_lab"]
    runtime.background = DeferredRunner()
    alice, bob = make_participant("alice"), make_participant("bob")
    walk_task(alice, clock, "T1", ["我叫爱丽丝，我对花生过敏。", "我养了一只猫。"], study=study)
    walk_task(bob, clock, "T1", ["My name is Bob and I love hiking."], study=study)
    assert [name for name, _ in runtime.background.skipped] == ["consolidate_session", "consolidate_session"]
    alice_row = admin_client.get(f"/api/admin/participants/{_id(alice)}").get_json()["participant"]
    assert alice_row["consolidation"] == {"T1": "pending"} and alice_row["consolidation_pending"] == 1

    runs = admin_client.post(f"/api/admin/participants/{_id(alice)}/consolidate").get_json()["runs"]
    assert [(r["user_id"], r["task_id"], r["status"], r["trigger"]) for r in runs] == [
        (_id(alice), "T1", "succeeded", "manual")]
    assert admin_client.get(f"/api/admin/participants/{_id(alice)}").get_json()["participant"][
        "consolidation"] == {"T1": "done"}
    # bob is still pending; the second call picks him up, and alice is not redone
    runs = admin_client.post("/api/admin/consolidate-pending").get_json()["runs"]
    assert [(r["user_id"], r["status"]) for r in runs] == [(_id(bob), "succeeded")]
    assert admin_client.post("/api/admin/consolidate-pending").get_json()["runs"] == []
    with runtime.db.Session() as session:
        assert session.scalar(select(func.count()).select_from(ConsolidationRun)
                              .where(ConsolidationRun.status == "succeeded")) == 2
        consolidated = session.scalars(select(Message).where(Message.role == "user")).all()
        assert all(m.consolidation_g is not None for m in consolidated)
        groups = {u.id: u.memory_group for u in session.scalars(select(User))}
        profiles = session.scalars(select(ProfileVersion)).all()
        assert {p.user_id for p in profiles} == {uid for uid in (_id(alice), _id(bob))
                                                  if groups[uid] in ("L3", "L4")}
        actions = session.scalars(select(AuditLog.action).where(AuditLog.action == "consolidation_triggered")).all()
        assert len(actions) == 3
    assert admin_client.post("/api/admin/participants/9999/consolidate").status_code == 404


def test_a_chat_still_running_is_not_counted_as_pending_consolidation(app, make_participant, admin_client, clock):
    app.extensions["memory_lab"].background = DeferredRunner()
    carol = make_participant("carol")
    carol.post("/api/tasks/T1/start")
    clock.advance(5)
    carol.post("/api/tasks/T1/messages", json={"content": "still chatting"})
    row = admin_client.get(f"/api/admin/participants/{_id(carol)}").get_json()["participant"]
    assert row["consolidation_pending"] == 0
    clock.advance(3601)  # past the maximum wall time: the chat is closed as abandoned
    carol.post("/api/tasks/T1/heartbeat")
    row = admin_client.get(f"/api/admin/participants/{_id(carol)}").get_json()["participant"]
    assert row["consolidation_pending"] == 1


def test_a_withdrawn_participants_tasks_show_their_real_state_to_the_admin(make_participant, admin_client, clock,
                                                                            study):
    """Not "locked": T1 done stays done, T2 stopped mid-chat shows withdrawn in its chat phase, T3 not started."""
    api = make_participant()
    walk_task(api, clock, "T1", ["你好，我是小林。"], study=study)
    clock.advance(days=study.task("T2").unlock_offset_days, seconds=60)
    assert api.post("/api/tasks/T2/start").status_code == 201
    user_id = _id(api)
    assert admin_client.post(f"/api/admin/participants/{user_id}/withdraw", json={"reason": "moved away"}
                             ).status_code == 200
    row = next(r for r in admin_client.get("/api/admin/participants").get_json()["participants"] if r["id"] == user_id)
    assert row["tasks"] == {"T1": "done", "T2": "withdrawn", "T3": "withdrawn", "T4": "withdrawn"}
    details = {d["id"]: d for d in row["task_details"]}
    assert details["T2"]["progress"] == "in_progress" and details["T2"]["phase"] == "chat"
    assert details["T3"]["progress"] == "not_started"
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    assert {d["id"]: d["status"] for d in record["participant"]["task_details"]}["T2"] == "withdrawn"
    # the participant's own view is unchanged: nothing can be started
    assert {t["id"]: t["status"] for t in api.get("/api/tasks").get_json()["tasks"]}["T3"] == "locked"


def test_the_record_says_which_tasks_can_be_reset_and_why_not(make_participant, admin_client, clock, study):
    api = make_participant()
    walk_task(api, clock, "T1", ["你好。"], study=study)
    clock.advance(days=study.task("T2").unlock_offset_days, seconds=60)
    assert api.post("/api/tasks/T2/start").status_code == 201
    record = admin_client.get(f"/api/admin/participants/{_id(api)}").get_json()
    assert record["reset_options"] == [
        {"task_id": "T1", "allowed": False, "code": "task_done"},
        {"task_id": "T2", "allowed": True, "code": None},
        {"task_id": "T3", "allowed": False, "code": "task_not_started"},
        {"task_id": "T4", "allowed": False, "code": "task_not_started"},
    ]
    refused = admin_client.post(f"/api/admin/participants/{_id(api)}/tasks/T1/reset", json={"reason": "x"})
    assert (refused.status_code, refused.get_json()["error"]) == (409, "task_done")
