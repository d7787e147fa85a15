"""The ``dashscope`` SDK, unmocked, against a local server speaking DashScope's native HTTP API.

The chain under test is the production one, dashscope -> openai_compatible: every fault of
the DashScope endpoint must end in a reply from the OpenAI-compatible server, with the
failure recorded in a real migrated database.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import select

from database.models import ProviderFailure, User
from services.llm.chain import LLMService, stream_with_fallback
from services.llm.providers.dashscope_provider import DashScopeChatProvider, DashScopeEmbeddingProvider
from services.llm.providers.openai_compatible import OpenAICompatibleChatProvider
from services.llm.retry import RetryPolicy
from services.llm.types import AllProvidersFailed, ChatRequest, ProviderConfigError
from services.platform.failure_log import make_failure_recorder
from tests import wire_servers as wire

KEY = "sk-dashscope-5b1e0c9a77f2"
NO_RETRY = RetryPolicy(max_retries=0)
FALLBACK_REPLY = "Fallback model here: how was your day?"


class Sleeps(list):
    def __call__(self, seconds: float) -> None:
        self.append(round(seconds, 3))


@pytest.fixture(scope="module")
def dashscope_wire():
    with wire.DashScopeWireServer() as server:
        yield server


@pytest.fixture(scope="module")
def openai_wire():
    with wire.OpenAIWireServer(reply=FALLBACK_REPLY) as server:
        yield server


@pytest.fixture
def server(dashscope_wire, openai_wire):
    for s in (dashscope_wire, openai_wire):
        s.reset()
    yield dashscope_wire
    for s in (dashscope_wire, openai_wire):
        s.reset()


@pytest.fixture
def fallback_server(openai_wire, server):
    return openai_wire


def qwen(server: wire.WireServer, **overrides) -> DashScopeChatProvider:
    options = {"model": "qwen-plus", "api_key": KEY, "base_url": server.url, "timeout": wire.CLIENT_TIMEOUT}
    return DashScopeChatProvider(**{**options, **overrides})


def chain(server, fallback_server=None, *, retry: RetryPolicy = NO_RETRY, recorder=None):
    providers = [qwen(server)]
    if fallback_server is not None:
        providers.append(OpenAICompatibleChatProvider(model="deepseek-chat", api_key="sk-other-0123456789",
                                                      base_url=fallback_server.url, timeout=wire.CLIENT_TIMEOUT))
    sleeps = Sleeps()
    return LLMService(providers, on_failure=recorder, retry=retry, sleep=sleeps, rng=lambda: 0.0), sleeps


def request(user_id: int | None = None, **overrides) -> ChatRequest:
    messages = [{"role": "system", "content": "你是一位友善的助手。"}, {"role": "user", "content": "我养了一只猫。"}]
    return ChatRequest(**{"messages": messages, "user_id": user_id, **overrides})


def participant(database, clock) -> int:
    with database.session() as session:
        user = User(username="p-dashscope", password_hash="x", participant_code="P901", created_at=clock.now())
        session.add(user)
        session.flush()
        return user.id


def failure_rows(database) -> list[ProviderFailure]:
    with database.session() as session:
        return list(session.scalars(select(ProviderFailure).order_by(ProviderFailure.id)))


FAULTS = [
    pytest.param(wire.timeout(), "timeout", "timeout", id="timeout"),
    pytest.param(wire.status(500), "server_error", "server_error", id="http500"),
    pytest.param(wire.rate_limited("1"), "rate_limited", "rate_limited", id="http429"),
    pytest.param(wire.malformed(), "malformed_response", "malformed_response", id="malformed"),
    pytest.param(wire.cut_mid(), "connection_error", "stream_interrupted", id="cut_mid"),
    pytest.param(wire.cut_before_first(), "connection_error", "connection_error", id="cut_before_first"),
    pytest.param(wire.empty(), "empty_completion", "empty_completion", id="empty"),
]


@pytest.mark.parametrize(("fault", "kind", "_stream_kind"), FAULTS)
def test_each_fault_falls_back_to_openai_compatible_and_is_logged(server, fallback_server, database, clock,
                                                                 fault, kind, _stream_kind):
    user_id = participant(database, clock)
    service, _ = chain(server, fallback_server, recorder=make_failure_recorder(database, clock))
    server.script(fault)

    result = service.complete(request(user_id=user_id))

    assert (result.provider, result.model, result.text) == ("openai_compatible", "deepseek-chat", FALLBACK_REPLY)
    failed = result.attempts[0]
    assert (failed["provider"], failed["error_class"], failed["fallback_provider"]) == (
        "dashscope", kind, "openai_compatible")
    assert len(server.received) == 1  # no hidden SDK retry
    [row] = failure_rows(database)
    assert (row.provider, row.model, row.error_class, row.fallback_provider, row.user_id) == (
        "dashscope", "qwen-plus", kind, "openai_compatible", user_id)
    assert row.status_code == (fault.status if fault.kind == "status" else None)


@pytest.mark.parametrize(("fault", "_kind", "stream_kind"), FAULTS)
def test_each_fault_in_a_stream_falls_back(server, fallback_server, database, clock, fault, _kind, stream_kind):
    service, _ = chain(server, fallback_server, recorder=make_failure_recorder(database, clock))
    server.script(fault)

    events = list(stream_with_fallback(service, request()))

    result = events[-1]["result"]
    assert result.provider == "openai_compatible" and result.text == FALLBACK_REPLY
    resets = [i for i, e in enumerate(events) if "reset" in e]
    if fault.kind == "cut_mid":
        assert [e["delta"] for e in events[:resets[0]]] == server.deltas()[:2]
        assert len(resets) == 1
    else:
        assert resets == []
    tail = events[resets[0] + 1:-1] if resets else events[:-1]
    assert "".join(e["delta"] for e in tail) == FALLBACK_REPLY
    assert (result.prompt_tokens, result.completion_tokens) == (wire.PROMPT_TOKENS, wire.COMPLETION_TOKENS)
    [row] = failure_rows(database)
    assert (row.provider, row.error_class, row.fallback_provider) == ("dashscope", stream_kind, "openai_compatible")


@pytest.mark.parametrize(("fault", "kind", "_stream_kind"), FAULTS)
def test_without_a_fallback_every_attempt_is_reported(server, fault, kind, _stream_kind):
    service, _ = chain(server)
    server.script(fault)

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    [attempt] = failed.value.attempts
    assert (attempt["provider"], attempt["error_class"], attempt["action"]) == ("dashscope", kind, "give_up")


def test_a_mid_stream_cut_with_nothing_behind_it_resets_then_fails(server):
    service, _ = chain(server)
    server.script(wire.cut_mid())

    events = []
    with pytest.raises(AllProvidersFailed) as failed:
        for event in stream_with_fallback(service, request()):
            events.append(event)

    assert [e for e in events if "delta" not in e] == [{"reset": True}]
    assert failed.value.attempts[0]["error_class"] == "stream_interrupted"


def test_rate_limit_with_retry_after_is_waited_for_then_retried(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=2))
    server.script(wire.rate_limited("3"))

    result = service.complete(request())

    assert result.provider == "dashscope" and result.text == server.reply
    assert sleeps == [3.0] and len(server.received) == 2


@pytest.mark.parametrize(("code", "kind"), [(400, "client_error"), (401, "auth_error")])
def test_no_retry_on_400_or_401(server, fallback_server, code, kind):
    service, sleeps = chain(server, fallback_server, retry=RetryPolicy(max_retries=3))
    server.script(wire.status(code))

    result = service.complete(request())

    assert result.provider == "openai_compatible"
    assert result.attempts[0]["error_class"] == kind and sleeps == [] and len(server.received) == 1


def test_the_request_is_the_native_dashscope_one(server):
    result = qwen(server).complete(request(temperature=0.2, max_tokens=128))

    [sent] = server.received
    assert sent.path == wire.DashScopeWireServer.GENERATION
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.body["model"] == "qwen-plus"
    assert sent.body["input"]["messages"] == request().messages
    assert sent.body["parameters"] == {"result_format": "message", "temperature": 0.2, "max_tokens": 128}
    assert (result.prompt_tokens, result.completion_tokens) == (wire.PROMPT_TOKENS, wire.COMPLETION_TOKENS)
    assert result.latency_ms > 0 and result.params["finish_reason"] == "stop"
    assert result.params["base_url"] == server.url


def test_json_mode_sets_dashscope_response_format(server):
    server.reply = '{"intensity": 0.7, "disclosure": 0.4, "value": 0.2}'

    result = qwen(server).complete(request(json_mode=True, purpose="salience"))

    parameters = server.received[0].body["parameters"]
    assert parameters["response_format"] == {"type": "json_object"}
    assert parameters["result_format"] == "message"
    sent_messages = server.received[0].body["input"]["messages"]
    assert len(sent_messages) == 2 and "JSON" in sent_messages[0]["content"]
    assert json.loads(result.text)["intensity"] == 0.7


def test_streaming_asks_for_incremental_sse_and_counts_tokens(server):
    provider = qwen(server)

    deltas = list(provider.stream(request()))

    assert deltas == server.deltas()
    sent = server.received[0]
    assert sent.headers["x-dashscope-sse"] == "enable" and sent.headers["accept"] == "text/event-stream"
    assert sent.body["parameters"]["incremental_output"] is True
    assert provider.last_usage == {"prompt_tokens": wire.PROMPT_TOKENS, "completion_tokens": wire.COMPLETION_TOKENS}


def test_the_key_never_reaches_the_failure_log(server, database, clock):
    service, _ = chain(server, recorder=make_failure_recorder(database, clock))
    server.script(wire.status(401, message=f"Invalid API-key provided: {KEY}"))

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    assert KEY not in json.dumps(failed.value.attempts) and KEY not in str(failed.value)
    assert KEY not in failure_rows(database)[0].message


def test_configuration_comes_from_settings_and_a_missing_key_fails_at_build_time(server, settings):
    settings.dashscope_api_key = None
    with pytest.raises(ProviderConfigError, match="DASHSCOPE_API_KEY"):
        DashScopeChatProvider.from_settings(settings)
    with pytest.raises(ProviderConfigError, match="DASHSCOPE_API_KEY"):
        DashScopeEmbeddingProvider.from_settings(settings)

    settings.dashscope_api_key = KEY
    settings.dashscope_base_url = server.url
    settings.dashscope_chat_model = "qwen-max"
    provider = DashScopeChatProvider.from_settings(settings)
    provider.complete(request())
    assert server.received[0].body["model"] == "qwen-max"


# -- embeddings ------------------------------------------------------------------------------


def embedder(server, **overrides) -> DashScopeEmbeddingProvider:
    options = {"model": "text-embedding-v3", "api_key": KEY, "base_url": server.url, "timeout": wire.CLIENT_TIMEOUT,
               "retry": RetryPolicy(max_retries=2), "sleep": Sleeps()}
    return DashScopeEmbeddingProvider(**{**options, **overrides})


def test_embeddings_batch_by_ten_sort_by_index_and_normalise(server):
    texts = [f"第{i}句话：我今天很开心" for i in range(12)]
    provider = embedder(server)

    vectors = provider.embed_passages(texts)

    raw = np.asarray([wire.fake_embedding(t) for t in texts], dtype=np.float32)
    np.testing.assert_allclose(vectors, raw / np.linalg.norm(raw, axis=1, keepdims=True), rtol=1e-5)
    assert vectors.dtype == np.float32
    calls = server.requests_to("/text-embedding")
    assert [len(c.body["input"]["texts"]) for c in calls] == [10, 2]
    assert {c.body["parameters"]["text_type"] for c in calls} == {"document"}
    assert provider.model == "dashscope/text-embedding-v3"


def test_queries_are_embedded_as_queries(server):
    embedder(server).embed_queries(["我还记得什么？"])
    assert server.received[0].body["parameters"]["text_type"] == "query"


def test_embedding_rate_limit_is_retried_after_the_servers_delay(server):
    sleeps = Sleeps()
    reported = []
    provider = embedder(server, sleep=sleeps, on_failure=reported.append)
    server.script(wire.rate_limited("1"))

    provider.embed_queries(["你好"])

    assert sleeps == [1.0]
    assert [(a["provider"], a["error_class"], a["purpose"]) for a in reported] == [
        ("dashscope", "rate_limited", "embedding")]
