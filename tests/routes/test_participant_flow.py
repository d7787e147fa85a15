"""The participant's way through the study, through the JSON API, as a bot would walk it."""
from datetime import timedelta

import pytest
from sqlalchemy import func, select

from database.models import Message, QuestionnaireResponse, TaskSession, User
from tests.conftest import walk_task

T1_LINES = ["你好，我叫林晓，是一名博士生。", "我对海鲜过敏，一吃就起疹子。", "我养了一只叫团子的猫。"]


def db(app):
    return app.extensions["memory_lab"].db


def statuses(api):
    return {t["id"]: t["status"] for t in api.get("/api/tasks").get_json()["tasks"]}


@pytest.mark.postgres
@pytest.mark.parametrize("group", ["L1", "L2", "L3", "L4"])
def test_bot_walks_t1_to_t4_with_questionnaires(app, make_participant, clock, study, group):
    runtime = app.extensions["memory_lab"]
    runtime.settings.study = runtime.study.with_overrides({"enabled_conditions": [group]})
    api = make_participant(f"bot{group}")
    assert statuses(api) == {"T1": "available", "T2": "locked", "T3": "locked", "T4": "locked"}
    walk_task(api, clock, "T1", T1_LINES, study=study)
    tasks = api.get("/api/tasks").get_json()["tasks"]
    assert [t["status"] for t in tasks] == ["done", "locked", "locked", "locked"]
    for task_id, days in (("T2", 2), ("T3", 9), ("T4", 16)):
        available_at = next(t for t in api.get("/api/tasks").get_json()["tasks"] if t["id"] == task_id)
        assert api.post(f"/api/tasks/{task_id}/start").status_code == 409  # not unlocked yet
        clock.set(clock.now().replace(microsecond=0) + timedelta(days=1))  # moving on a day is not enough
        assert statuses(api)[task_id] == "locked"
        t1_done = _t1_completed(app, group)
        clock.set(t1_done + timedelta(days=days))
        assert available_at["available_at"] == (t1_done + timedelta(days=days)).isoformat() + "Z"
        assert statuses(api)[task_id] == "available"
        walk_task(api, clock, task_id, ["你还记得我吗？", "最近有点累。"], study=study)
    assert statuses(api) == {"T1": "done", "T2": "done", "T3": "done", "T4": "done"}
    with db(app).Session() as session:
        user = session.scalar(select(User).where(User.username == f"bot{group}"))
        assert user.memory_group == group
        messages = session.scalars(select(Message).where(Message.user_id == user.id)).all()
        assert len(messages) == 2 * (len(T1_LINES) + 3 * 2)
        assert {m.task_id for m in messages} == {"T1", "T2", "T3", "T4"}
        replies = [m for m in messages if m.role == "assistant"]
        assert all(r.memory_group == group and r.provider == "offline" and r.prompt and r.memory_context
                   for r in replies)
        answers = session.scalar(select(func.count(QuestionnaireResponse.id))
                                 .where(QuestionnaireResponse.user_id == user.id))
        expected = sum(len(api.get(f"/api/tasks/{t}/questionnaire").get_json()["items"]) for t in
                       ("T1", "T2", "T3", "T4"))
        assert answers == expected


def _t1_completed(app, group):
    with db(app).Session() as session:
        user = session.scalar(select(User).where(User.username == f"bot{group}"))
        return session.scalar(select(TaskSession.completed_at).where(TaskSession.user_id == user.id,
                                                                   TaskSession.task_id == "T1"))


def test_tasks_run_in_order_and_only_once(app, make_participant, clock, study):
    api = make_participant()
    assert api.post("/api/tasks/T2/start").status_code == 409
    assert api.post("/api/tasks/T2/messages", json={"content": "hi"}).status_code == 409
    walk_task(api, clock, "T1", ["hello"], study=study)
    response = api.post("/api/tasks/T1/start")
    assert response.status_code == 409 and response.get_json()["error"] == "task_done"
    assert api.post("/api/tasks/T1/messages", json={"content": "again"}).status_code == 409
    assert api.post("/api/tasks/T1/questionnaire", json={"answers": {}}).status_code == 409
    clock.advance(days=20)
    # T3 and T4 are past their offsets but T2 is not done: still locked
    assert statuses(api) == {"T1": "done", "T2": "available", "T3": "locked", "T4": "locked"}
    assert api.post("/api/tasks/T3/start").status_code == 409


def test_unknown_task_is_404(make_participant):
    api = make_participant()
    for path in ("/api/tasks/T9/start", "/api/tasks/T9/finish", "/api/tasks/T9/messages"):
        response = api.post(path, json={"content": "x"})
        assert response.status_code == 404, path
        assert response.get_json()["error"] == "unknown_task"
    assert api.get("/api/tasks/T9/questionnaire").status_code == 404


def _message_count(app) -> int:
    with db(app).Session() as session:
        return session.scalar(select(func.count(Message.id)))


def test_bad_messages_are_refused_and_store_nothing(app, make_participant, clock, study):
    api = make_participant()
    api.post("/api/tasks/T1/start")
    clock.advance(3)
    for content, status in (("", 400), ("   \n ", 400), (None, 400), (42, 400),
                            ("字" * (study.limits.max_message_chars + 1), 413)):
        response = api.post("/api/tasks/T1/messages", json={"content": content})
        assert response.status_code == status, content
        assert set(response.get_json()) >= {"error", "message"}
    assert _message_count(app) == 0
    exactly = api.post("/api/tasks/T1/messages", json={"content": "字" * study.limits.max_message_chars})
    assert exactly.status_code == 201
    assert _message_count(app) == 2


def test_invalid_questionnaire_answers_name_the_items_and_store_nothing(app, make_participant, clock, study):
    api = make_participant()
    api.post("/api/tasks/T1/start")
    clock.advance(60)
    api.post("/api/tasks/T1/messages", json={"content": "hi"})
    while api.post("/api/tasks/T1/finish").status_code != 200:
        clock.advance(100)
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    assert {i["type"] for i in items} >= {"likert", "ios"}
    good = {i["id"]: i["min"] for i in items}
    bad = dict(good, pu_1=8, ios_1="3", close_1=True, sat_1=2.5, bogus=1)
    del bad["pu_2"]
    response = api.post("/api/tasks/T1/questionnaire", json={"answers": bad})
    assert response.status_code == 400
    named = response.get_json()["details"]["items"]
    assert set(named) == {"pu_1", "pu_2", "ios_1", "close_1", "sat_1", "bogus"}
    assert named["pu_2"] == "required"
    assert api.post("/api/tasks/T1/questionnaire", json={"answers": "nope"}).status_code == 400
    with db(app).Session() as session:
        assert session.scalar(select(func.count(QuestionnaireResponse.id))) == 0
    assert statuses(api)["T1"] == "in_progress"
    assert api.post("/api/tasks/T1/questionnaire", json={"answers": good}).status_code == 201


def test_timer_counts_active_time_only_and_enforces_minimum_and_maximum(app, make_participant, clock, study):
    timing = study.timing
    api = make_participant()
    api.post("/api/tasks/T1/start")
    clock.advance(60)
    api.post("/api/tasks/T1/messages", json={"content": "one"})
    clock.advance(timing.idle_gap_seconds + 500)  # an idle gap: not counted
    api.post("/api/tasks/T1/heartbeat")
    timer = api.get("/api/tasks").get_json()["tasks"][0]["timer"]
    assert timer["active_seconds"] == 60
    assert timer["can_finish"] is False
    response = api.post("/api/tasks/T1/finish")
    assert response.status_code == 409 and response.get_json()["error"] == "too_early"
    # keep active until the limit: the chat closes by itself
    while True:
        clock.advance(100)
        response = api.post("/api/tasks/T1/messages", json={"content": "still here"})
        if response.status_code == 409:
            assert response.get_json()["error"] == "time_up"
            break
        assert response.status_code == 201
    task = api.get("/api/tasks").get_json()["tasks"][0]
    assert task["phase"] == "questionnaire"
    assert task["timer"]["active_seconds"] == timing.task_active_seconds
    with db(app).Session() as session:
        ts = session.scalar(select(TaskSession))
        assert ts.end_reason == "time_up" and ts.idle_gap_count == 1


def test_a_chat_left_open_past_the_maximum_wall_time_closes_as_abandoned(app, make_participant, clock, study):
    api = make_participant()
    api.post("/api/tasks/T1/start")
    clock.advance(study.timing.max_wall_seconds + 1)
    response = api.post("/api/tasks/T1/messages", json={"content": "back again"})
    assert response.status_code == 409
    assert response.get_json()["error"] == "task_phase_questionnaire"
    with db(app).Session() as session:
        assert session.scalar(select(TaskSession.end_reason)) == "abandoned"
        assert session.scalar(select(func.count(Message.id))) == 0


def test_pilot_mode_compresses_unlocks_and_timers(settings, clock, database):
    from app import create_app
    from tests.conftest import ApiClient

    settings.day_seconds = 60  # one study day per real minute
    app = create_app(settings, clock=clock)
    api = ApiClient(app.test_client())
    api.register("pilot01")
    api.post("/api/tasks/T1/start")
    clock.advance(0.1)
    api.post("/api/tasks/T1/messages", json={"content": "hi"})
    timer = api.get("/api/tasks").get_json()["tasks"][0]["timer"]
    assert timer["active_seconds"] == pytest.approx(0.1 * 86400 / 60)
    assert timer["remaining_real_seconds"] == pytest.approx((900 - 144) * 60 / 86400, abs=1e-3)
    clock.advance(0.2)
    assert api.post("/api/tasks/T1/finish").status_code == 200
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    api.post("/api/tasks/T1/questionnaire", json={"answers": {i["id"]: i["min"] for i in items if i["required"]}})
    clock.advance(119)  # 2 study days are 120 real seconds
    assert statuses(api)["T2"] == "locked"
    clock.advance(1)
    assert statuses(api)["T2"] == "available"
    app.extensions["memory_lab"].db.dispose()


def test_withdrawn_participant_cannot_continue(app, make_participant, clock):
    api = make_participant("quitter")
    with db(app).Session() as session:
        user = session.scalar(select(User).where(User.username == "quitter"))
        user.status = "withdrawn"
        session.commit()
    response = api.post("/api/tasks/T1/start")
    assert response.status_code == 403 and response.get_json()["error"] == "withdrawn"
    assert statuses(api)["T1"] == "locked"


def test_participant_cannot_reach_another_participants_messages(app, make_participant, clock):
    alice = make_participant("alice")
    bob = make_participant("bob")
    alice.post("/api/tasks/T1/start")
    clock.advance(5)
    sent = alice.post("/api/tasks/T1/messages", json={"content": "alice's secret"}).get_json()
    bob.post("/api/tasks/T1/start")
    # bob cannot ask for a reply to alice's message, nor read her conversation
    response = bob.post(f"/api/tasks/T1/messages/{sent['message']['id']}/reply")
    assert response.status_code in (404, 409)
    assert "alice's secret" not in bob.get("/api/tasks/T1").get_data(as_text=True)
    assert bob.get("/api/admin/participants").status_code == 403
    with db(app).Session() as session:
        alice_id = session.scalar(select(User.id).where(User.username == "alice"))
    assert bob.get(f"/api/admin/participants/{alice_id}").status_code == 403


def test_pilot_timer_scale_keeps_tasks_long_enough_for_a_person(settings, clock, database):
    from app import create_app
    from tests.conftest import ApiClient

    settings.day_seconds = 60
    settings.pilot_timer_scale = 0.1  # a 900 s task lasts 90 real seconds; days still last 60 s
    app = create_app(settings, clock=clock)
    api = ApiClient(app.test_client())
    api.register("pilot02")
    api.post("/api/tasks/T1/start")
    clock.advance(20)  # typing the first message
    response = api.post("/api/tasks/T1/messages", json={"content": "你好"})
    assert response.status_code == 201
    timer = api.get("/api/tasks").get_json()["tasks"][0]["timer"]
    assert timer["active_seconds"] == pytest.approx(200)
    assert timer["remaining_real_seconds"] == pytest.approx(70)
    clock.advance(10)
    assert api.post("/api/tasks/T1/finish").status_code == 200
    items = api.get("/api/tasks/T1/questionnaire").get_json()["items"]
    api.post("/api/tasks/T1/questionnaire", json={"answers": {i["id"]: i["min"] for i in items if i["required"]}})
    clock.advance(120)  # unlocks still follow PILOT_DAY_SECONDS: T2 two study days later
    assert statuses(api)["T2"] == "available"
    app.extensions["memory_lab"].db.dispose()


def test_choice_items_accept_only_their_options(app, make_participant, clock, study):
    from services.study.questionnaire_service import items_for_task, validate_answers

    t4 = study.task("T4")
    items = items_for_task(study, t4, "en")
    choice = next(i for i in items if i["type"] == "choice")
    assert [o["value"] for o in choice["options"]] == ["nothing", "session", "key_facts", "everything"]
    assert choice["options"][0]["label"] == "Nothing"
    good = {i["id"]: (i["min"] if i["type"] in ("likert", "ios") else "ok") for i in items}
    good[choice["id"]] = "key_facts"
    assert validate_answers(items, good, 2000)[choice["id"]] == "key_facts"
    from services.platform.errors import BadInput

    for bad in ("all", 1, ["key_facts"]):
        with pytest.raises(BadInput) as err:
            validate_answers(items, dict(good, **{choice["id"]: bad}), 2000)
        assert set(err.value.details["items"]) == {choice["id"]}


def test_the_task_list_and_the_task_detail_report_time_left_as_of_now(app, make_participant, clock, study):
    """Reloading 40 s after a message shows 40 s less, and the next heartbeat agrees (issue 20, item 2)."""
    api = make_participant("reloader")
    api.post("/api/tasks/T1/start")
    clock.advance(20)
    api.post("/api/tasks/T1/messages", json={"content": "one"})
    clock.advance(40)

    listed = api.get("/api/tasks").get_json()["tasks"][0]["timer"]
    detail = api.get("/api/tasks/T1").get_json()["task"]["timer"]
    expected = study.timing.task_active_seconds - 60
    assert listed["remaining_seconds"] == pytest.approx(expected)
    assert detail["remaining_seconds"] == pytest.approx(expected)
    after_heartbeat = api.post("/api/tasks/T1/heartbeat").get_json()["task"]["timer"]
    assert after_heartbeat["remaining_seconds"] == pytest.approx(expected)


def test_the_heartbeat_names_the_newest_message_so_a_second_tab_can_see_it_missed_one(app, make_participant,
                                                                                    clock):
    api = make_participant("two_tabs")
    api.post("/api/tasks/T1/start")
    assert api.post("/api/tasks/T1/heartbeat").get_json()["last_message_id"] is None
    clock.advance(5)
    sent = api.post("/api/tasks/T1/messages", json={"content": "from the other tab"}).get_json()
    assert api.post("/api/tasks/T1/heartbeat").get_json()["last_message_id"] == sent["reply"]["id"]
