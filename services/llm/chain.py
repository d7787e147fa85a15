"""The fallback chain: ``LLMService`` walks the configured providers (``LLM_PROVIDERS``, e.g.
``dashscope,openai_compatible,offline``) and returns the first answer.

* each provider gets a few tries under the ``RetryPolicy`` (``services.llm.retry``);
* a per-provider circuit breaker skips a provider for a cool-down after ``failure_threshold``
  consecutive failed calls, so a dead endpoint costs one participant a delay, not every participant;
* every failed try is reported through ``on_failure`` (the admin's failure log) and kept in
  ``ChatResult.attempts`` / ``AllProvidersFailed.attempts``.

Blocking and streamed replies go through the same loop (``_run``); they differ only in how one
try talks to the provider. The SDKs' own hidden retries are switched off by the providers so that
all of this is ours, deterministic and testable.
"""
from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Generator, Iterator
from typing import Any

from services.llm.retry import NO_RETRIES, CircuitBreaker, RetryPolicy, failed_attempt, ms_since, report, retrying
from services.llm.types import (
    CIRCUIT_OPEN,
    EMPTY_COMPLETION,
    AllProvidersFailed,
    ChatProvider,
    ChatRequest,
    ChatResult,
    FailureHook,
    ProviderError,
)

Event = dict[str, Any]
# One try of one provider: yields ``{"delta": ...}`` events, returns the ChatResult.
Attempt = Callable[[ChatProvider, ChatRequest], Generator[Event, None, ChatResult]]
RESET: Event = {"reset": True}


class LLMService:
    """Tries each provider in order (with retries, behind its circuit breaker); reports each
    failure; returns the first success. Without ``retry`` there are no retries (see
    ``services.llm.factory.build_llm_service`` for the configured chain)."""

    def __init__(self, providers: list[ChatProvider], on_failure: FailureHook | None = None, *,
                 retry: RetryPolicy | None = None, failure_threshold: int = 3, cooldown_seconds: float = 60.0,
                 breakers: dict[str, CircuitBreaker] | None = None, sleep: Callable[[float], None] = time.sleep,
                 monotonic: Callable[[], float] = time.monotonic, rng: Callable[[], float] = random.random) -> None:
        if not providers:
            raise ValueError("LLMService needs at least one provider")
        self.providers = providers
        self.on_failure = on_failure
        self.retry = retry if retry is not None else NO_RETRIES
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        # Pass one dict to several services (reply chain, consolidation chain) to share breakers.
        self.breakers = breakers if breakers is not None else {}
        self.sleep = sleep
        self.monotonic = monotonic
        self.rng = rng
        self._lock = threading.Lock()

    @property
    def primary(self) -> ChatProvider:
        return self.providers[0]

    def breaker(self, provider: ChatProvider | str) -> CircuitBreaker:
        name = provider if isinstance(provider, str) else provider.name
        with self._lock:
            if name not in self.breakers:
                self.breakers[name] = CircuitBreaker(self.failure_threshold, self.cooldown_seconds, self.monotonic)
            return self.breakers[name]

    def complete(self, request: ChatRequest) -> ChatResult:
        """The first provider's answer that is not empty. Raises ``AllProvidersFailed``."""
        for event in self._run(request, _complete_once):
            if "result" in event:
                return event["result"]
        raise AssertionError("the chain ended without a result or an error")  # _run always does one or the other

    def stream(self, request: ChatRequest) -> Iterator[Event]:
        """Stream a reply: yields ``{"delta": text}`` events, then ``{"result": ChatResult}``.

        A provider whose stream fails *before its first token* is retried (same policy as
        ``complete``) and then replaced by the next one; the participant sees only a delay.
        A break *after* the first token is reported, ``{"reset": True}`` tells the client to
        discard the partial text, and the next provider streams the whole reply instead.
        Raises ``AllProvidersFailed`` when nobody could answer."""
        return self._run(request, _stream_once)

    def _run(self, request: ChatRequest, attempt: Attempt) -> Iterator[Event]:
        """The chain: each admitted provider in turn, with retries, until one answers."""
        attempts: list[dict[str, Any]] = []
        for index, provider in enumerate(self.providers):
            if not self._admit(provider, index, request, attempts):
                continue
            on_failed = self._recorder(provider, index, request, attempts)
            try:
                result, tries = yield from retrying(
                    lambda provider=provider: attempt(provider, request), policy=self.retry, on_failed=on_failed,
                    sleep=self.sleep, monotonic=self.monotonic, rng=self.rng, reset=RESET)
            except Exception:  # already recorded by on_failed: move on down the chain
                continue
            self.breaker(provider).record_success()
            result.attempts = attempts + [_ok_attempt(provider, result.latency_ms, tries)]
            yield {"result": result}
            return
        raise AllProvidersFailed(attempts)

    def _next_name(self, index: int) -> str | None:
        return self.providers[index + 1].name if index + 1 < len(self.providers) else None

    def _admit(self, provider: ChatProvider, index: int, request: ChatRequest,
               attempts: list[dict[str, Any]]) -> bool:
        """False (and a ``skipped`` attempt) when the provider's circuit is open."""
        breaker = self.breaker(provider)
        if breaker.allow():
            return True
        next_name = self._next_name(index)
        attempts.append({
            "provider": provider.name, "model": provider.model, "ok": False, "skipped": True,
            "error_class": CIRCUIT_OPEN,
            "error": (f"skipped: {breaker.consecutive_failures} consecutive failures, "
                      f"circuit open for another {breaker.seconds_until_retry():.0f} s"),
            "status_code": None, "latency_ms": 0.0, "try": 0,
            "action": "fallback" if next_name else "give_up",
            "retry_in_s": None, "fallback_provider": next_name,
            "purpose": request.purpose, "user_id": request.user_id, "message_id": request.message_id,
        })
        return False

    def _recorder(self, provider: ChatProvider, index: int, request: ChatRequest,
                  attempts: list[dict[str, Any]]) -> Callable[[BaseException, int, float | None, float], None]:
        """What happens to a failed try of ``provider``: it is kept, reported, and a give-up that is
        the provider's fault (not a 400 about this request) counts towards its circuit breaker."""

        def on_failed(exc: BaseException, try_number: int, delay: float | None, latency_ms: float) -> None:
            attempt = failed_attempt(provider.name, provider.model, exc, latency_ms=latency_ms,
                                     purpose=request.purpose, try_number=try_number, retry_in=delay,
                                     next_provider=self._next_name(index), user_id=request.user_id,
                                     message_id=request.message_id)
            if delay is None and getattr(exc, "counts_against_provider", True):
                attempt["circuit_opened"] = self.breaker(provider).record_failure()
            attempts.append(attempt)
            report(self.on_failure, attempt)

        return on_failed


def stream_with_fallback(service: LLMService, request: ChatRequest) -> Iterator[Event]:
    """``service.stream(request)``, for callers that hold the service as a value."""
    return service.stream(request)


def _complete_once(provider: ChatProvider, request: ChatRequest) -> Generator[Event, None, ChatResult]:
    yield from ()  # a blocking try has no events, only its result
    result = provider.complete(request)
    if not (result.text or "").strip():
        raise ProviderError("empty completion", provider=provider.name, kind=EMPTY_COMPLETION)
    return result


def _stream_once(provider: ChatProvider, request: ChatRequest) -> Generator[Event, None, ChatResult]:
    started = time.perf_counter()
    first_token_ms: float | None = None
    parts: list[str] = []
    for delta in provider.stream(request):
        if delta:
            if first_token_ms is None:
                first_token_ms = ms_since(started)
            parts.append(delta)
            yield {"delta": delta}
    if not "".join(parts).strip():
        raise ProviderError("empty completion", provider=provider.name, kind=EMPTY_COMPLETION)
    usage = getattr(provider, "last_usage", None) or {}
    describe = getattr(provider, "request_params", None)
    params = dict(describe(request)) if describe else {"temperature": request.temperature,
                                                       "max_tokens": request.max_tokens}
    params.update(stream=True, first_token_ms=first_token_ms)
    return ChatResult(
        text="".join(parts), provider=provider.name, model=provider.model,
        prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
        latency_ms=ms_since(started), params=params,
    )


def _ok_attempt(provider: ChatProvider, latency_ms: float, try_number: int) -> dict[str, Any]:
    return {"provider": provider.name, "model": provider.model, "ok": True, "latency_ms": latency_ms,
            "try": try_number}
