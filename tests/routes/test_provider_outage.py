"""A provider outage in the middle of a participant's task, through the whole app: the real
``dashscope`` and ``openai`` SDKs talk to local wire-format servers (Qwen first, an
OpenAI-compatible server second, the offline responder last). The participant keeps chatting,
nothing is lost, and the admin sees which provider wrote each reply and every failure."""
import pytest

from tests import wire_servers as wire
from tests.conftest import ApiClient


@pytest.fixture
def servers():
    with wire.DashScopeWireServer(reply="通义千问的回复。") as qwen, \
            wire.OpenAIWireServer(reply="本地模型的回复。") as local:
        yield qwen, local


@pytest.fixture
def chain_app(settings, clock, database, servers):
    from app import create_app

    qwen, local = servers
    settings.llm_providers = ["dashscope", "openai_compatible", "offline"]
    settings.dashscope_api_key = "sk-test-qwen-0000"
    settings.dashscope_base_url = qwen.url
    settings.openai_base_url = local.url
    settings.openai_api_key = None  # a local server needs no key
    settings.openai_chat_model = "Qwen2.5-7B-Instruct"
    settings.llm_timeout_seconds = wire.CLIENT_TIMEOUT
    settings.llm_max_retries = 0
    app = create_app(settings, clock=clock)
    yield app
    app.extensions["memory_lab"].record_failure.flush()
    app.extensions["memory_lab"].db.dispose()


def test_outage_mid_task_falls_back_and_the_admin_sees_who_answered(chain_app, clock, servers, admin_client_for):
    qwen, local = servers
    api = ApiClient(chain_app.test_client())
    assert api.register("outage01").status_code == 201
    api.post("/api/tasks/T1/start")

    def say(text):
        clock.advance(5)
        response = api.post("/api/tasks/T1/messages", json={"content": text})
        assert response.status_code == 201, response.get_json()
        return response.get_json()["reply"]["content"]

    assert say("你好，我叫周舟。") == "通义千问的回复。"
    qwen.script(wire.status(500))
    assert say("我对海鲜过敏。") == "本地模型的回复。"  # Qwen is down: the OpenAI-compatible server answers
    qwen.script(wire.timeout())
    local.script(wire.malformed())
    offline_reply = say("我养了一只猫。")  # both are down: the offline responder answers
    assert offline_reply not in ("通义千问的回复。", "本地模型的回复。")
    assert say("你还在吗？") == "通义千问的回复。"  # Qwen is back

    admin = admin_client_for(chain_app)
    chain_app.extensions["memory_lab"].record_failure.flush()
    user_id = admin.get("/api/admin/participants").get_json()["participants"][0]["id"]
    record = admin.get(f"/api/admin/participants/{user_id}").get_json()
    replies = [m for m in record["messages"] if m["role"] == "assistant"]
    assert [m["provider"] for m in replies] == ["dashscope", "openai_compatible", "offline", "dashscope"]
    assert [m["content"] for m in record["messages"] if m["role"] == "user"] == [
        "你好，我叫周舟。", "我对海鲜过敏。", "我养了一只猫。", "你还在吗？"]
    failures = record["provider_failures"]
    assert [(f["provider"], f["fallback_provider"]) for f in failures] == [
        ("dashscope", "openai_compatible"), ("dashscope", "openai_compatible"), ("openai_compatible", "offline")]
    user_messages = {m["id"] for m in record["messages"] if m["role"] == "user"}
    assert all(f["message_id"] in user_messages for f in failures)
    assert "sk-test-qwen-0000" not in str(record)
    usage = admin.get("/api/admin/usage").get_json()
    assert "sk-test-qwen-0000" not in str(usage)


def test_a_stream_cut_before_its_first_token_falls_back_without_the_participant_noticing(chain_app, clock,
                                                                                          servers):
    qwen, _ = servers
    api = ApiClient(chain_app.test_client())
    api.register("outage02")
    api.post("/api/tasks/T1/start")
    clock.advance(5)
    qwen.script(wire.cut_before_first())
    response = api.post("/api/tasks/T1/messages?stream=1", json={"content": "今天有点累。"})
    body = response.get_data(as_text=True)
    assert "event: reset" not in body
    assert body.rstrip().splitlines()[-1].startswith("data: ") and "event: reply" in body
    assert "本地模型的回复。" in body


@pytest.fixture
def admin_client_for():
    from services.participants.account_service import create_admin

    def make(app):
        runtime = app.extensions["memory_lab"]
        with runtime.db.Session() as session:
            create_admin(session, "outage_admin", "admin-password-1", runtime.clock)
        admin = ApiClient(app.test_client())
        assert admin.login("outage_admin", "admin-password-1").status_code == 200
        return admin

    return make
