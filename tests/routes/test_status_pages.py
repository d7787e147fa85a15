"""Issue 28 item 15: status words that agree with each other. A participant who did every task is "completed"; a
task whose chat is still open is "in_progress", not "pending"; a withdrawn participant's unfinished task is
"not_needed"; the monitor, the record and the "consolidate now" answer use the same words."""
from __future__ import annotations

from datetime import datetime

import pytest

from tests.conftest import walk_task

LINES = ["你好，我叫林晓，是一名博士生。", "我养了一只叫团子的猫。", "周末我常去爬山。"]


def _unlock(api, clock, task_id: str) -> None:
    task = next(t for t in api.get("/api/tasks").get_json()["tasks"] if t["id"] == task_id)
    unlock = datetime.fromisoformat(task["available_at"].removesuffix("Z"))
    if unlock > clock.now():
        clock.set(unlock)


def _row(admin_client, user_id: int) -> dict:
    rows = admin_client.get("/api/admin/participants").get_json()["participants"]
    return next(r for r in rows if r["id"] == user_id)


@pytest.mark.postgres
def test_a_chat_still_open_is_in_progress_in_the_monitor_and_the_consolidate_answer(make_participant, admin_client,
                                                                                    clock, study):
    api = make_participant("still_chatting")
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    walk_task(api, clock, "T1", LINES, study=study)
    _unlock(api, clock, "T2")
    assert api.post("/api/tasks/T2/start").status_code == 201
    assert api.post("/api/tasks/T2/messages", json={"content": "我又来了。"}).status_code == 201

    row = _row(admin_client, user_id)
    assert row["consolidation"] == {"T1": "done", "T2": "in_progress"} and row["consolidation_pending"] == 0
    answer = admin_client.post(f"/api/admin/participants/{user_id}/consolidate").get_json()
    assert answer["runs"] == [] and answer["in_progress"] == ["T2"] and answer["not_needed"] == []
    assert "in progress: T2" in answer["reason"]
    record = admin_client.get(f"/api/admin/participants/{user_id}").get_json()
    assert {s["task_id"]: s["consolidation_state"] for s in record["task_sessions"]} == {
        "T1": "done", "T2": "in_progress"}


@pytest.mark.postgres
def test_a_withdrawn_participant_s_unfinished_task_is_not_needed_everywhere(make_participant, admin_client, clock,
                                                                            study):
    api = make_participant("left_mid_chat")
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    walk_task(api, clock, "T1", LINES, study=study)
    _unlock(api, clock, "T2")
    assert api.post("/api/tasks/T2/start").status_code == 201
    assert api.post("/api/tasks/T2/messages", json={"content": "我不想继续了。"}).status_code == 201
    assert api.post("/api/me/withdraw", json={"confirm": True, "erase": False}).status_code == 200

    row = _row(admin_client, user_id)
    assert row["status"] == "withdrawn"
    assert row["consolidation"] == {"T1": "done", "T2": "not_needed"} and row["consolidation_pending"] == 0
    # the chat left open is closed as abandoned later; it is still not consolidated, and still "not needed"
    clock.advance(study.timing.max_wall_seconds + 60)
    everyone = admin_client.post("/api/admin/consolidate-pending").get_json()
    assert everyone["runs"] == [] and everyone["not_needed"] == ["T2"]
    assert "not needed (withdrawn): T2" in everyone["reason"]
    assert _row(admin_client, user_id)["consolidation"]["T2"] == "not_needed"
    tasks = api.get("/api/tasks").get_json()
    assert tasks["participant_status"] == "withdrawn"
    assert {t["id"]: t.get("locked_reason") for t in tasks["tasks"] if t["status"] != "done"} == {
        "T2": "withdrawn", "T3": "withdrawn", "T4": "withdrawn"}


@pytest.mark.postgres
def test_a_participant_who_did_every_task_is_completed(make_participant, admin_client, clock, study):
    api = make_participant("did_everything")
    user_id = api.get("/api/auth/me").get_json()["user"]["id"]
    for task_id in study.task_ids:
        _unlock(api, clock, task_id)
        walk_task(api, clock, task_id, LINES, study=study)
    assert api.get("/api/tasks").get_json()["participant_status"] == "completed"
    row = _row(admin_client, user_id)
    assert (row["status"], row["account_status"]) == ("completed", "active")
    listed = admin_client.get("/api/admin/participants?status=completed").get_json()
    assert [r["id"] for r in listed["participants"]] == [user_id]
    assert listed["summary"]["statuses"]["completed"] == 1
    assert admin_client.get("/api/admin/participants?status=active").get_json()["participants"] == []


def test_the_monitor_says_whose_condition_has_a_forgetting_curve(make_participant, admin_client, study):
    """Issue 28 item 19: the plots page opens the forgetting-curve selector on such a participant (L4)."""
    for n in range(len(study.enabled_conditions)):
        make_participant(f"curve_{n}")
    rows = admin_client.get("/api/admin/participants").get_json()["participants"]
    assert {r["memory_group"] for r in rows} == set(study.enabled_conditions)
    assert {r["memory_group"] for r in rows if r["forgetting_curve"]} == {"L4"}
