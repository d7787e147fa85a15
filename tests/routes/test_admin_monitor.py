"""The monitor: rows, filters, per-group counts and the completion funnel; failures and usage."""
from __future__ import annotations

from datetime import timedelta

from sqlalchemy import func, select

from database.models import Message, ProviderFailure
from tests.conftest import walk_task


def _id(api) -> int:
    return api.get("/api/auth/me").get_json()["user"]["id"]


def test_monitor_summary_counts_groups_and_funnel(make_participant, admin_client, clock, study):
    people = [make_participant() for _ in range(5)]
    walk_task(people[0], clock, "T1", ["你好，我是第一位。"], study=study)
    walk_task(people[1], clock, "T1", ["Hello there."], study=study)
    body = admin_client.get("/api/admin/participants").get_json()
    rows = body["participants"]
    assert len(rows) == 5
    summary = body["summary"]
    assert set(summary["groups"]) >= set(study.enabled_conditions)
    assert sum(summary["groups"].values()) == 5
    for group, n in summary["groups"].items():
        assert n == sum(1 for r in rows if r["memory_group"] == group)
    assert summary["funnel"] == {"registered": 5, "T1": 2, "T2": 0, "T3": 0, "T4": 0}
    done_groups = {r["memory_group"] for r in rows if r["tasks"]["T1"] == "done"}
    for group in done_groups:
        assert summary["funnel_by_group"][group]["T1"] == sum(
            1 for r in rows if r["memory_group"] == group and r["tasks"]["T1"] == "done")
    assert body["generated_at"] == clock.now().isoformat(timespec="seconds") + "Z"
    walked = next(r for r in rows if r["id"] == _id(people[0]))
    assert walked["messages"] == 2 and walked["questionnaires_done"] == 1
    assert walked["task_details"][0]["status"] == "done"


def test_filters_by_group_status_and_overdue(make_participant, admin_client, clock, study):
    people = [make_participant() for _ in range(4)]
    ids = [_id(p) for p in people]
    walk_task(people[0], clock, "T1", ["第一条消息"], study=study)
    assert admin_client.post(f"/api/admin/participants/{ids[3]}/withdraw", json={"reason": "moved away"}
                             ).status_code == 200
    rows = admin_client.get("/api/admin/participants").get_json()["participants"]
    group = next(r["memory_group"] for r in rows if r["id"] == ids[0])
    by_group = admin_client.get(f"/api/admin/participants?group={group}").get_json()["participants"]
    assert by_group and all(r["memory_group"] == group for r in by_group)
    assert {r["id"] for r in by_group} == {r["id"] for r in rows if r["memory_group"] == group}
    withdrawn = admin_client.get("/api/admin/participants?status=withdrawn").get_json()
    assert [r["id"] for r in withdrawn["participants"]] == [ids[3]]
    assert withdrawn["summary"]["funnel"]["registered"] == 4  # the summary always counts everyone
    active = admin_client.get("/api/admin/participants?status=active").get_json()["participants"]
    assert sorted(r["id"] for r in active) == ids[:3]

    assert admin_client.get("/api/admin/participants?overdue=1").get_json()["participants"] == []
    # T1 is available from registration; past overdue_after_days it is overdue for those who never started
    clock.advance(days=study.timing.overdue_after_days + 0.1)
    overdue = admin_client.get("/api/admin/participants?overdue=1").get_json()
    assert sorted(r["id"] for r in overdue["participants"]) == ids[1:3]  # not the withdrawn one
    assert overdue["summary"]["overdue"] == 2
    not_overdue = admin_client.get("/api/admin/participants?overdue=0").get_json()["participants"]
    assert sorted(r["id"] for r in not_overdue) == [ids[0], ids[3]]


def test_invalid_filters_are_400(admin_client):
    for query in ("group=L9", "status=gone", "overdue=maybe"):
        response = admin_client.get(f"/api/admin/participants?{query}")
        assert response.status_code == 400, query
        assert response.get_json()["error"] == "invalid_filter"


def test_unknown_participant_is_404(admin_client):
    response = admin_client.get("/api/admin/participants/9999")
    assert response.status_code == 404
    # an admin is not a participant either
    admin_id = admin_client.get("/api/auth/me").get_json()["user"]["id"]
    assert admin_client.get(f"/api/admin/participants/{admin_id}").status_code == 404


def test_failure_log_newest_first_with_codes_and_provider_counts(app, make_participant, admin_client, clock, study):
    alice = make_participant("alice")
    walk_task(alice, clock, "T1", ["今天有点累。", "想早点睡。"], study=study)
    alice_id = _id(alice)
    runtime = app.extensions["memory_lab"]
    now = clock.now()
    with runtime.db.session() as session:
        session.add_all([
            ProviderFailure(at=now - timedelta(minutes=5), provider="dashscope", model="qwen-plus", purpose="reply",
                            error_class="timeout", status_code=None, message="read timed out", user_id=alice_id,
                            fallback_provider="offline"),
            ProviderFailure(at=now, provider="dashscope", model="qwen-plus", purpose="consolidation",
                            error_class="http_error", status_code=500, message="server error", user_id=alice_id),
            ProviderFailure(at=now - timedelta(minutes=1), provider="openai_compatible", model="deepseek-chat",
                            purpose="reply", error_class="rate_limited", status_code=429, message="slow down",
                            user_id=None),
        ])
    body = admin_client.get("/api/admin/failures").get_json()
    assert [f["error_class"] for f in body["failures"]] == ["http_error", "rate_limited", "timeout"]
    code = admin_client.get(f"/api/admin/participants/{alice_id}").get_json()["participant"]["participant_code"]
    assert body["failures"][0]["participant_code"] == code
    assert body["failures"][1]["participant_code"] is None
    assert body["total"] == 3
    providers = {p["provider"]: p for p in body["by_provider"]}
    assert providers["dashscope"]["failures"] == 2
    assert providers["dashscope"]["failures_by_purpose"] == {"reply": 1, "consolidation": 1}
    assert providers["offline"]["replies"] == 2 and providers["offline"]["failures"] == 0
    assert admin_client.get("/api/admin/failures?limit=1").get_json()["failures"][0]["error_class"] == "http_error"
    assert admin_client.get("/api/admin/failures?limit=0").status_code == 400


def test_usage_sums_tokens_and_latency_per_participant_and_provider(app, make_participant, admin_client, clock,
                                                                    study):
    alice, bob = make_participant("alice"), make_participant("bob")
    walk_task(alice, clock, "T1", ["你好！", "我喜欢画画。", "再见。"], study=study)
    walk_task(bob, clock, "T1", ["Hi, nice to meet you."], study=study)
    body = admin_client.get("/api/admin/usage").get_json()
    runtime = app.extensions["memory_lab"]
    with runtime.db.Session() as session:
        replies = session.scalars(select(Message).where(Message.role == "assistant")).all()
        prompt_total = session.scalar(select(func.sum(Message.prompt_tokens)))
    assert body["totals"]["replies"] == len(replies) == 4
    assert body["totals"]["prompt_tokens"] == prompt_total
    assert body["totals"]["latency_ms_total"] == round(sum(m.latency_ms for m in replies), 3)
    (offline,) = body["by_provider"]
    assert offline["provider"] == "offline" and offline["replies"] == 4
    assert offline["token_units"] == ["characters"]
    per_person = {p["user_id"]: p for p in body["by_participant"]}
    assert per_person[_id(alice)]["replies"] == 3 and per_person[_id(bob)]["replies"] == 1
    assert per_person[_id(alice)]["completion_tokens"] == sum(
        m.completion_tokens for m in replies if m.user_id == _id(alice))
    assert per_person[_id(alice)]["memory_group"]
