"""The fallback chain itself: retry policy, circuit breaker, streaming events, and the chain
built from environment variables alone (``LLM_PROVIDERS``, ``OPENAI_BASE_URL`` ...)."""
from __future__ import annotations

import email.utils

import pytest

from config import Settings
from services.llm.chain import LLMService, stream_with_fallback
from services.llm.factory import build_llm_service
from services.llm.providers.offline import OfflineChatProvider
from services.llm.retry import CircuitBreaker, RetryPolicy
from services.llm.types import AllProvidersFailed, ChatRequest, ProviderConfigError, ProviderError
from services.llm.wire import parse_retry_after, public_url, redact
from tests import wire_servers as wire


def request(**overrides) -> ChatRequest:
    return ChatRequest(**{"messages": [{"role": "user", "content": "你好，我叫小林。"}], **overrides})


def retryable(**kw) -> ProviderError:
    return ProviderError("boom", provider="x", retryable=True, kind="server_error", **kw)


# -- retry policy --------------------------------------------------------------------------------


def test_backoff_doubles_is_capped_and_jitter_only_shortens_it():
    policy = RetryPolicy(max_retries=10, base_delay=0.5, max_delay=4.0, jitter=0.25)
    assert [policy.next_delay(retryable(), n, 0.0, rng=lambda: 0.0) for n in range(5)] == [0.5, 1.0, 2.0, 4.0, 4.0]
    assert policy.next_delay(retryable(), 1, 0.0, rng=lambda: 1.0) == pytest.approx(0.75)


def test_no_retry_for_non_retryable_errors_or_once_retries_are_used_up():
    policy = RetryPolicy(max_retries=2)
    assert policy.next_delay(ProviderError("bad request", provider="x", kind="client_error"), 0, 0.0) is None
    assert policy.next_delay(ValueError("bug"), 0, 0.0) is None
    assert policy.next_delay(retryable(), 2, 0.0) is None


def test_retry_after_is_used_as_given_unless_above_the_cap_or_the_budget():
    policy = RetryPolicy(max_retries=3, max_retry_after=5.0, budget_seconds=10.0)
    assert policy.next_delay(retryable(retry_after=4.0), 0, 0.0) == 4.0
    assert policy.next_delay(retryable(retry_after=6.0), 0, 0.0) is None
    assert policy.next_delay(retryable(retry_after=4.0), 0, 7.0) is None  # 7 s spent + 4 s > 10 s budget


def test_parse_retry_after_reads_seconds_milliseconds_and_http_dates():
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"retry-after-ms": "1500", "Retry-After": "9"}) == 1.5
    when = email.utils.formatdate(1_000_030, usegmt=True)
    assert parse_retry_after({"Retry-After": when}, now=1_000_000) == pytest.approx(30.0)
    assert parse_retry_after({"Retry-After": "soon"}) is None
    assert parse_retry_after(None) is None


def test_redact_removes_keys_and_key_shaped_strings():
    text = "Incorrect API key provided: sk-abcd1234efgh. Authorization: Bearer abcdef123456; api_key=qwerty98765"
    cleaned = redact(text, ("sk-abcd1234efgh",))
    assert "sk-abcd" not in cleaned and "abcdef123456" not in cleaned and "qwerty98765" not in cleaned
    assert "Incorrect API key provided" in cleaned
    assert redact("task-12345 finished") == "task-12345 finished"


def test_public_url_drops_credentials_and_query():
    assert public_url("https://user:pw@api.example.com:8443/v1?key=secret") == "https://api.example.com:8443/v1"
    assert public_url(None) is None


# -- circuit breaker -----------------------------------------------------------------------------


def test_breaker_opens_after_consecutive_failures_and_a_success_resets_the_count():
    now = [0.0]
    breaker = CircuitBreaker(failure_threshold=3, cooldown_seconds=60.0, monotonic=lambda: now[0])
    breaker.record_failure()
    breaker.record_failure()
    breaker.record_success()
    assert not breaker.record_failure() and not breaker.record_failure()
    assert breaker.state == "closed"
    assert breaker.record_failure() is True
    assert breaker.state == "open" and not breaker.allow()
    assert breaker.seconds_until_retry() == 60.0
    now[0] = 59.9
    assert not breaker.allow()
    now[0] = 60.0
    assert breaker.state == "half_open" and breaker.allow()
    breaker.record_success()
    assert breaker.state == "closed"


def test_when_every_provider_is_skipped_the_caller_gets_all_providers_failed_at_once():
    service = LLMService([OfflineChatProvider()], failure_threshold=1)
    service.breaker("offline").record_failure()

    with pytest.raises(AllProvidersFailed) as failed:
        service.complete(request())

    [attempt] = failed.value.attempts
    assert attempt["skipped"] is True and attempt["action"] == "give_up"


def test_breakers_can_be_shared_between_services():
    shared: dict[str, CircuitBreaker] = {}
    reply = LLMService([OfflineChatProvider()], breakers=shared)
    consolidation = LLMService([OfflineChatProvider()], breakers=shared)
    assert reply.breaker("offline") is consolidation.breaker("offline")


# -- streaming and hooks -------------------------------------------------------------------------


def test_offline_stream_yields_deltas_then_a_result_with_the_whole_text():
    service = LLMService([OfflineChatProvider()])

    events = list(stream_with_fallback(service, request(user_id=7)))

    text = "".join(e["delta"] for e in events[:-1])
    result = events[-1]["result"]
    assert result.text == text and result.provider == "offline"
    assert result.attempts == [{"provider": "offline", "model": "offline-template-responder", "ok": True,
                                "latency_ms": result.latency_ms, "try": 1}]
    assert result.params["stream"] is True


def test_a_failing_failure_hook_does_not_take_the_reply_down():
    def broken_hook(attempt):
        raise RuntimeError("database gone")

    with wire.OpenAIWireServer() as server:
        from services.llm.providers.openai_compatible import OpenAICompatibleChatProvider

        provider = OpenAICompatibleChatProvider(model="m", api_key="k", base_url=server.url,
                                                timeout=wire.CLIENT_TIMEOUT)
        service = LLMService([provider, OfflineChatProvider()], on_failure=broken_hook,
                             retry=RetryPolicy(max_retries=0))
        server.script(wire.status(500))
        assert service.complete(request()).provider == "offline"


def test_an_empty_chain_is_refused():
    with pytest.raises(ValueError):
        LLMService([])


# -- configuration: the chain from the environment, no code changes -------------------------------


@pytest.fixture
def servers():
    with wire.DashScopeWireServer() as dashscope, wire.OpenAIWireServer(reply="local model reply") as local:
        yield dashscope, local


def test_llm_providers_from_the_environment_build_the_chain(servers, monkeypatch, tmp_path):
    dashscope, local = servers
    for name, value in {
        "LLM_PROVIDERS": "dashscope,openai_compatible,offline",
        "DASHSCOPE_API_KEY": "sk-ds-000111222333",
        "DASHSCOPE_BASE_URL": dashscope.url,
        "OPENAI_BASE_URL": local.url,
        "OPENAI_CHAT_MODEL": "Qwen2.5-7B-Instruct",
        "LLM_TIMEOUT_SECONDS": str(wire.CLIENT_TIMEOUT),
        "LLM_MAX_RETRIES": "0",
        "SECRET_KEY": "test",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'env.db'}",
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    settings = Settings.from_env()
    service = build_llm_service(settings)

    assert [(p.name, p.model) for p in service.providers] == [
        ("dashscope", "qwen-plus"), ("openai_compatible", "Qwen2.5-7B-Instruct"),
        ("offline", "offline-template-responder")]
    assert service.retry.max_retries == 0 and service.retry.budget_seconds == wire.CLIENT_TIMEOUT

    assert service.complete(request()).provider == "dashscope"
    dashscope.script(wire.status(503))
    assert service.complete(request()).text == "local model reply"
    dashscope.script(wire.status(503))
    local.script(wire.timeout())
    last = service.complete(request())
    assert last.provider == "offline"
    assert [a["provider"] for a in last.attempts] == ["dashscope", "openai_compatible", "offline"]


def test_a_chain_naming_dashscope_without_a_key_fails_at_start_up(monkeypatch):
    monkeypatch.setenv("LLM_PROVIDERS", "dashscope,offline")
    monkeypatch.setenv("SECRET_KEY", "test")
    monkeypatch.delenv("DASHSCOPE_API_KEY", raising=False)
    settings = Settings.from_env(database_url="sqlite://")
    with pytest.raises(ProviderConfigError, match="DASHSCOPE_API_KEY"):
        build_llm_service(settings)


def test_unknown_provider_names_are_refused(settings):
    with pytest.raises(ValueError, match="unknown chat provider"):
        build_llm_service(settings, chain=["gpt5-magic"])
