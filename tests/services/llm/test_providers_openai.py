"""The ``openai`` SDK, unmocked, against a local OpenAI-compatible server with injected faults.

Each fault must end in a reply from the next provider (or ``AllProvidersFailed`` carrying
every attempt when there is none), with the failure in the ``provider_failures`` table of
a real migrated database. Sleeping is recorded, never done.
"""
from __future__ import annotations

import json

import numpy as np
import pytest
from sqlalchemy import select

from database.models import ProviderFailure, User
from services.llm.chain import LLMService, stream_with_fallback
from services.llm.providers.offline import OfflineChatProvider
from services.llm.providers.openai_compatible import (
    PLACEHOLDER_KEY,
    OpenAICompatibleChatProvider,
    OpenAICompatibleEmbeddingProvider,
)
from services.llm.retry import RetryPolicy
from services.llm.types import AllProvidersFailed, ChatRequest, ProviderConfigError, ProviderError
from services.platform.failure_log import make_failure_recorder
from tests import wire_servers as wire

KEY = "sk-test-0penai-7f3a9c2e51d4"
NO_RETRY = RetryPolicy(max_retries=0)


class Sleeps(list):
    """A fake ``sleep`` that remembers what it was asked to wait."""

    def __call__(self, seconds: float) -> None:
        self.append(round(seconds, 3))


@pytest.fixture(scope="module")
def wire_server():
    with wire.OpenAIWireServer() as server:
        yield server


@pytest.fixture
def server(wire_server):
    wire_server.reset()
    yield wire_server
    wire_server.reset()


def chat_provider(server: wire.WireServer, **overrides) -> OpenAICompatibleChatProvider:
    options = {"model": "deepseek-chat", "api_key": KEY, "base_url": server.url, "timeout": wire.CLIENT_TIMEOUT}
    return OpenAICompatibleChatProvider(**{**options, **overrides})


def chain(server, *, fallback: bool = True, retry: RetryPolicy = NO_RETRY, recorder=None, **options):
    providers = [chat_provider(server)] + ([OfflineChatProvider()] if fallback else [])
    sleeps = Sleeps()
    service = LLMService(providers, on_failure=recorder, retry=retry, sleep=sleeps, rng=lambda: 0.0, **options)
    return service, sleeps


def request(user_id: int | None = None, **overrides) -> ChatRequest:
    messages = [{"role": "system", "content": "你是一位友善的助手。"},
                {"role": "user", "content": "我最近在准备考研。"}]
    return ChatRequest(**{"messages": messages, "user_id": user_id, **overrides})


def participant(database, clock) -> int:
    with database.session() as session:
        user = User(username="p-openai", password_hash="x", participant_code="P900", created_at=clock.now())
        session.add(user)
        session.flush()
        return user.id


def failure_rows(database) -> list[ProviderFailure]:
    with database.session() as session:
        return list(session.scalars(select(ProviderFailure).order_by(ProviderFailure.id)))


# What each fault looks like to a plain call and to a stream.
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
def test_each_fault_falls_back_and_is_logged(server, database, clock, fault, kind, _stream_kind):
    user_id = participant(database, clock)
    service, _ = chain(server, recorder=make_failure_recorder(database, clock))
    server.script(fault)

    result = service.complete(request(user_id=user_id))

    assert result.provider == "offline" and result.text
    failed, answered = result.attempts
    assert failed["provider"] == "openai_compatible" and failed["error_class"] == kind
    assert failed["action"] == "fallback" and failed["fallback_provider"] == "offline"
    assert answered == {"provider": "offline", "model": "offline-template-responder", "ok": True,
                        "latency_ms": answered["latency_ms"], "try": 1}
    assert len(server.received) == 1
    [row] = failure_rows(database)
    assert (row.provider, row.model, row.error_class, row.fallback_provider, row.user_id, row.purpose) == (
        "openai_compatible", "deepseek-chat", kind, "offline", user_id, "reply")
    assert row.at == clock.now()
    assert row.status_code == (fault.status if fault.kind == "status" else None)


@pytest.mark.parametrize(("fault", "_kind", "stream_kind"), FAULTS)
def test_each_fault_in_a_stream_falls_back(server, database, clock, fault, _kind, stream_kind):
    user_id = participant(database, clock)
    service, _ = chain(server, recorder=make_failure_recorder(database, clock))
    server.script(fault)

    events = list(stream_with_fallback(service, request(user_id=user_id)))

    result = events[-1]["result"]
    assert result.provider == "offline"
    resets = [i for i, e in enumerate(events) if "reset" in e]
    if fault.kind == "cut_mid":
        # Two deltas reached the participant before the cut; the client is told to drop them.
        assert [e["delta"] for e in events[:resets[0]]] == server.deltas()[:2]
        assert len(resets) == 1
    else:
        assert resets == []
    after_reset = events[resets[0] + 1:-1] if resets else events[:-1]
    assert "".join(e["delta"] for e in after_reset) == result.text
    assert result.attempts[0]["error_class"] == stream_kind
    [row] = failure_rows(database)
    assert (row.provider, row.error_class, row.fallback_provider, row.user_id) == (
        "openai_compatible", stream_kind, "offline", user_id)


@pytest.mark.parametrize(("fault", "kind", "_stream_kind"), FAULTS)
def test_without_a_fallback_every_attempt_is_reported(server, fault, kind, _stream_kind):
    service, _ = chain(server, fallback=False)
    server.script(fault)

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    [attempt] = failed.value.attempts
    assert attempt["error_class"] == kind and attempt["action"] == "give_up"
    assert attempt["fallback_provider"] is None


def test_retries_back_off_exponentially_then_give_up_with_every_attempt(server, database, clock):
    service, sleeps = chain(server, fallback=False, retry=RetryPolicy(max_retries=2),
                            recorder=make_failure_recorder(database, clock))
    server.script(wire.status(503), wire.status(500), wire.status(502))

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    attempts = failed.value.attempts
    assert [a["action"] for a in attempts] == ["retry", "retry", "give_up"]
    assert [a["status_code"] for a in attempts] == [503, 500, 502]
    assert sleeps == [0.5, 1.0]  # base 0.5 s doubling; rng=0 means no jitter reduction
    assert len(server.received) == 3
    rows = failure_rows(database)
    assert [r.status_code for r in rows] == [503, 500, 502]
    assert [(r.try_number, r.action, r.retry_in_s) for r in rows] == [(1, "retry", 0.5), (2, "retry", 1.0),
                                                                    (3, "give_up", None)]
    assert not rows[0].message.startswith("[")  # the provider's text only: the try is worded when shown


def test_a_retry_that_succeeds_answers_from_the_same_provider(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=2))
    server.script(wire.status(500))

    result = service.complete(request())

    assert result.provider == "openai_compatible" and result.text == server.reply
    assert [a["ok"] for a in result.attempts] == [False, True]
    assert result.attempts[-1]["try"] == 2
    assert sleeps == [0.5]


def test_retry_after_is_honoured_exactly(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=2, max_retry_after=5.0))
    server.script(wire.rate_limited("2"))

    result = service.complete(request())

    assert result.provider == "openai_compatible"
    assert sleeps == [2.0]
    assert result.attempts[0]["retry_in_s"] == 2.0 and result.attempts[0]["status_code"] == 429


def test_retry_after_longer_than_the_cap_falls_back_at_once(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=2, max_retry_after=5.0))
    server.script(wire.rate_limited("30"))

    result = service.complete(request())

    assert result.provider == "offline"
    assert sleeps == [] and len(server.received) == 1


@pytest.mark.parametrize(("code", "kind"), [(400, "client_error"), (401, "auth_error"), (404, "client_error")])
def test_no_retry_on_other_4xx(server, code, kind):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=3))
    server.script(wire.status(code))

    result = service.complete(request())

    assert result.provider == "offline"
    assert result.attempts[0]["error_class"] == kind and result.attempts[0]["status_code"] == code
    assert sleeps == [] and len(server.received) == 1


def test_a_timeout_uses_up_the_budget_so_the_fallback_answers_without_retrying(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=2, budget_seconds=wire.CLIENT_TIMEOUT))
    server.script(wire.timeout())

    result = service.complete(request())

    assert result.provider == "offline"
    assert sleeps == [] and len(server.received) == 1


def test_circuit_breaker_opens_skips_and_closes_after_the_cooldown(server):
    now = [1000.0]
    service, _ = chain(server, failure_threshold=2, cooldown_seconds=30.0, monotonic=lambda: now[0])
    server.script(wire.status(500), wire.status(500))

    assert service.complete(request()).provider == "offline"
    second = service.complete(request())
    assert second.attempts[0]["circuit_opened"] is True
    assert service.breaker("openai_compatible").state == "open"

    skipped = service.complete(request())
    assert skipped.provider == "offline"
    assert skipped.attempts[0]["skipped"] is True and skipped.attempts[0]["error_class"] == "circuit_open"
    assert len(server.received) == 2  # the open circuit sent nothing

    now[0] += 31.0
    assert service.breaker("openai_compatible").state == "half_open"
    recovered = service.complete(request())
    assert recovered.provider == "openai_compatible"
    assert service.breaker("openai_compatible").state == "closed"


def test_a_failure_while_half_open_reopens_the_circuit(server):
    now = [0.0]
    service, _ = chain(server, failure_threshold=1, cooldown_seconds=10.0, monotonic=lambda: now[0])
    server.script(wire.status(500), wire.status(500))
    service.complete(request())
    now[0] += 10.0

    service.complete(request())

    assert service.breaker("openai_compatible").state == "open"
    assert len(server.received) == 2


def test_request_specific_errors_do_not_trip_the_breaker(server):
    service, _ = chain(server, failure_threshold=1)
    server.script(wire.status(400))
    service.complete(request())
    assert service.breaker("openai_compatible").state == "closed"


def test_tokens_latency_and_parameters_are_captured(server):
    service, _ = chain(server)

    result = service.complete(request(temperature=0.3, max_tokens=200))

    assert (result.prompt_tokens, result.completion_tokens) == (wire.PROMPT_TOKENS, wire.COMPLETION_TOKENS)
    assert result.latency_ms > 0
    assert result.params["base_url"] == server.url + "/" and result.params["finish_reason"] == "stop"
    sent = server.received[0].body
    assert (sent["model"], sent["temperature"], sent["max_tokens"]) == ("deepseek-chat", 0.3, 200)
    assert "response_format" not in sent


def test_streaming_yields_deltas_and_usage(server):
    service, _ = chain(server)

    events = list(stream_with_fallback(service, request()))

    assert [e["delta"] for e in events[:-1]] == server.deltas()
    result = events[-1]["result"]
    assert result.provider == "openai_compatible" and result.text == server.reply
    assert (result.prompt_tokens, result.completion_tokens) == (wire.PROMPT_TOKENS, wire.COMPLETION_TOKENS)
    assert result.params["stream"] is True and result.params["first_token_ms"] is not None
    sent = server.received[0].body
    assert sent["stream"] is True and sent["stream_options"] == {"include_usage": True}


def test_a_stream_cut_before_the_first_token_is_retried_on_the_same_provider(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=1))
    server.script(wire.cut_before_first())

    events = list(stream_with_fallback(service, request()))

    assert not any("reset" in e for e in events)
    assert events[-1]["result"].provider == "openai_compatible"
    assert sleeps == [0.5]


def test_a_stream_cut_mid_way_is_not_retried_on_the_same_provider(server):
    service, sleeps = chain(server, retry=RetryPolicy(max_retries=3))
    server.script(wire.cut_mid())

    events = list(stream_with_fallback(service, request()))

    assert sum("reset" in e for e in events) == 1
    assert events[-1]["result"].provider == "offline"
    assert sleeps == []


def test_json_mode_sends_response_format_and_mentions_json(server):
    server.reply = '好的：```json\n{"preferences": ["hiking [T1]"]}\n```'
    service, _ = chain(server)

    result = service.complete(request(json_mode=True, purpose="consolidation"))

    sent = server.received[0].body
    assert sent["response_format"] == {"type": "json_object"}
    # The API refuses JSON mode without the word; the note joins the one system message.
    assert [m["role"] for m in sent["messages"]] == ["system", "user"]
    system = sent["messages"][0]["content"]
    assert system.startswith("你是一位友善的助手。") and "JSON" in system
    assert result.params["response_format"] == {"type": "json_object"}
    assert result.params["json_instruction_added"] is True
    from services.text.structured_output import parse_json_object

    assert parse_json_object(result.text) == {"preferences": ["hiking [T1]"]}


def test_json_mode_leaves_a_prompt_that_already_asks_for_json_alone(server):
    service, _ = chain(server)
    messages = [{"role": "user", "content": "Return a JSON object with key a."}]

    result = service.complete(request(json_mode=True, messages=messages))

    assert server.received[0].body["messages"] == messages
    assert result.params["json_instruction_added"] is False


def test_the_key_is_sent_but_never_stored_or_shown(server, database, clock):
    service, _ = chain(server, fallback=False, recorder=make_failure_recorder(database, clock))
    server.script(wire.status(401, message=f"Incorrect API key provided: {KEY}. Check it."))

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    assert server.received[0].headers["authorization"] == f"Bearer {KEY}"
    assert KEY not in str(failed.value)
    assert KEY not in json.dumps(failed.value.attempts)
    [row] = failure_rows(database)
    assert KEY not in row.message and "Incorrect API key provided" in row.message


def test_a_local_server_needs_no_key(server, settings):
    settings.openai_api_key = None
    settings.openai_base_url = server.url
    settings.openai_chat_model = "qwen2.5:7b-instruct"

    provider = OpenAICompatibleChatProvider.from_settings(settings)
    provider.complete(request())

    assert server.received[0].headers["authorization"] == f"Bearer {PLACEHOLDER_KEY}"
    assert server.received[0].body["model"] == "qwen2.5:7b-instruct"


def test_missing_key_and_url_is_a_configuration_error(settings):
    settings.openai_api_key = None
    settings.openai_base_url = None
    with pytest.raises(ProviderConfigError, match="OPENAI_API_KEY"):
        OpenAICompatibleChatProvider.from_settings(settings)
    with pytest.raises(ProviderConfigError, match="OPENAI_API_KEY"):
        OpenAICompatibleEmbeddingProvider.from_settings(settings)


def test_deepseek_without_a_base_url_says_which_url_to_set(settings):
    settings.openai_api_key = KEY
    settings.openai_base_url = None
    settings.openai_chat_model = "deepseek-chat"
    with pytest.raises(ProviderConfigError, match="https://api.deepseek.com"):
        OpenAICompatibleChatProvider.from_settings(settings)


# -- embeddings ------------------------------------------------------------------------------


def embedder(server, **overrides) -> OpenAICompatibleEmbeddingProvider:
    options = {"model": "bge-m3", "api_key": KEY, "base_url": server.url, "timeout": wire.CLIENT_TIMEOUT,
               "retry": RetryPolicy(max_retries=2), "sleep": Sleeps()}
    return OpenAICompatibleEmbeddingProvider(**{**options, **overrides})


def expected_vectors(texts: list[str]) -> np.ndarray:
    raw = np.asarray([wire.fake_embedding(t) for t in texts], dtype=np.float32)
    return raw / np.linalg.norm(raw, axis=1, keepdims=True)


def test_embeddings_are_batched_ordered_and_normalised(server):
    texts = ["我喜欢爬山", "明天要考试", "my cat is called Mimi", "咖啡", "晚安", "周末去海边", "I run every morning"]
    provider = embedder(server)
    provider.batch_size = 3

    vectors = provider.embed_passages(texts)

    assert vectors.dtype == np.float32 and vectors.shape == (7, wire.EMBEDDING_DIM)
    np.testing.assert_allclose(vectors, expected_vectors(texts), rtol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)
    batches = server.requests_to("/embeddings")
    assert [r.body["input"] for r in batches] == [texts[0:3], texts[3:6], texts[6:7]]
    assert all(r.body["encoding_format"] == "float" for r in batches)  # many local servers lack base64
    assert provider.model == "openai_compatible/bge-m3" and provider.dim == wire.EMBEDDING_DIM
    assert provider.embed_queries([]).shape == (0, wire.EMBEDDING_DIM)


def test_embedding_failures_are_retried_and_reported(server):
    reported = []
    sleeps = Sleeps()
    provider = embedder(server, on_failure=reported.append, sleep=sleeps)
    server.script(wire.status(503))

    vectors = provider.embed_queries(["你好"])

    np.testing.assert_allclose(vectors, expected_vectors(["你好"]), rtol=1e-5)
    assert sleeps == [pytest.approx(sleeps[0])] and 0.375 <= sleeps[0] <= 0.5
    assert [(a["purpose"], a["error_class"], a["action"]) for a in reported] == [
        ("embedding", "server_error", "retry")]


def test_a_malformed_embedding_response_is_an_error_not_a_vector(server):
    provider = embedder(server)
    server.script(wire.malformed())
    with pytest.raises(ProviderError) as failed:
        provider.embed_passages(["你好"])
    assert failed.value.kind == "malformed_response"
    assert len(server.received) == 1  # a malformed body is not retried
