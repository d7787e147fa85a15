"""When to try a provider again, when to stop calling it for a while, and the one retry loop.

Timeouts, connection errors, 429 and 5xx are retried with exponential backoff and jitter (a
``Retry-After`` up to ``RetryPolicy.max_retry_after`` is waited for exactly; a longer one means
"fall back now"); other 4xx, malformed bodies and empty completions are not retried on the same
provider. ``sleep``, ``monotonic`` and ``rng`` are injectable so all of it is deterministic in tests.
"""
from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, TypeVar

from services.llm.types import FailureHook, ProviderError
from services.llm.wire import redact

log = logging.getLogger(__name__)

E = TypeVar("E")
T = TypeVar("T")

# (exception, try number, delay before the next try or None, latency of the try in ms)
TryFailed = Callable[[BaseException, int, float | None, float], None]


@dataclass(frozen=True)
class RetryPolicy:
    """When to try the same provider again, and after how long.

    ``budget_seconds``: no new try starts once this much time has gone into one
    provider; after a timeout that has normally happened, so a hung endpoint
    costs one timeout before the fallback answers, not ``max_retries + 1`` of them."""

    max_retries: int = 2
    base_delay: float = 0.5
    max_delay: float = 8.0
    max_retry_after: float = 5.0
    jitter: float = 0.25  # each backoff is shortened by up to this fraction, at random
    budget_seconds: float | None = None

    @classmethod
    def from_settings(cls, settings: Any) -> RetryPolicy:
        return cls(max_retries=max(0, int(settings.llm_max_retries)), budget_seconds=settings.llm_timeout_seconds)

    def next_delay(self, exc: BaseException, retries_done: int, elapsed: float,
                   rng: Callable[[], float] = random.random) -> float | None:
        """Seconds to wait before the next try, or None when this provider should be given up."""
        if not getattr(exc, "retryable", False) or retries_done >= self.max_retries:
            return None
        retry_after = getattr(exc, "retry_after", None)
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None  # the server asks for longer than a participant should wait: fall back
            delay = float(retry_after)
        else:
            delay = min(self.base_delay * 2 ** retries_done, self.max_delay) * (1 - self.jitter * rng())
        if self.budget_seconds is not None and elapsed + delay > self.budget_seconds:
            return None
        return delay


# A plain ``LLMService(providers)`` moves straight down the chain; ``build_llm_service`` applies
# the configured policy (LLM_MAX_RETRIES, LLM_TIMEOUT_SECONDS).
NO_RETRIES = RetryPolicy(max_retries=0)


class CircuitBreaker:
    """Closed -> open after ``failure_threshold`` consecutive failed calls -> half-open after
    ``cooldown_seconds`` (calls go through again) -> closed on the first success, open again
    on the next failure."""

    def __init__(self, failure_threshold: int = 3, cooldown_seconds: float = 60.0,
                 monotonic: Callable[[], float] = time.monotonic) -> None:
        self.failure_threshold = failure_threshold
        self.cooldown_seconds = cooldown_seconds
        self.monotonic = monotonic
        self.consecutive_failures = 0
        self.opened_at: float | None = None
        self._lock = threading.Lock()

    @property
    def state(self) -> str:
        with self._lock:
            if self.opened_at is None:
                return "closed"
            return "half_open" if self.monotonic() - self.opened_at >= self.cooldown_seconds else "open"

    def allow(self) -> bool:
        return self.state != "open"

    def seconds_until_retry(self) -> float:
        with self._lock:
            if self.opened_at is None:
                return 0.0
            return max(0.0, self.cooldown_seconds - (self.monotonic() - self.opened_at))

    def record_success(self) -> None:
        with self._lock:
            self.consecutive_failures = 0
            self.opened_at = None

    def record_failure(self) -> bool:
        """Count a failed call; True when this failure (re)opens the circuit."""
        with self._lock:
            self.consecutive_failures += 1
            if self.consecutive_failures >= self.failure_threshold:
                self.opened_at = self.monotonic()
                return True
            return False


def retrying(attempt: Callable[[], Generator[E, None, T]], *, policy: RetryPolicy, on_failed: TryFailed,
             sleep: Callable[[float], None] = time.sleep, monotonic: Callable[[], float] = time.monotonic,
             rng: Callable[[], float] = random.random, reset: E | None = None) -> Generator[E, None, tuple[T, int]]:
    """Run ``attempt()`` (a generator of events that returns its result) until it succeeds;
    return ``(result, tries used)``.

    Its events are passed through. ``on_failed`` hears of every failed try. A try that had
    already produced events is not retried (text already shown cannot be silently extended);
    ``reset`` is yielded after it so the consumer can discard the partial output. When the
    policy gives up, the last error is raised."""
    started = monotonic()
    retries_done = 0
    while True:
        try_started = time.perf_counter()
        produced = False
        try:
            events = attempt()
            while True:
                try:
                    event = next(events)
                except StopIteration as done:
                    return done.value, retries_done + 1
                produced = True
                yield event
        except Exception as exc:  # any failure of the try: retry it, or give the provider up
            delay = None if produced else policy.next_delay(exc, retries_done, monotonic() - started, rng)
            on_failed(exc, retries_done + 1, delay, ms_since(try_started))
            if produced and reset is not None:
                yield reset
            if delay is None:
                raise
            sleep(delay)
            retries_done += 1


def run_with_retries(call: Callable[[], T], *, policy: RetryPolicy, provider: str, model: str, purpose: str,
                     on_failure: FailureHook | None = None, sleep: Callable[[float], None] = time.sleep,
                     monotonic: Callable[[], float] = time.monotonic,
                     rng: Callable[[], float] = random.random) -> T:
    """``call()`` with the retry policy, for single-provider work such as embeddings (no fallback:
    the study's embedder is pinned). Every failed try is reported; the last error is raised."""

    def attempt() -> Generator[None, None, T]:
        yield from ()  # no events: only the result
        return call()

    def on_failed(exc: BaseException, try_number: int, delay: float | None, latency_ms: float) -> None:
        report(on_failure, failed_attempt(provider, model, exc, latency_ms=latency_ms, purpose=purpose,
                                          try_number=try_number, retry_in=delay, next_provider=None))

    result, _ = result_of(retrying(attempt, policy=policy, on_failed=on_failed, sleep=sleep, monotonic=monotonic,
                                   rng=rng))
    return result


def result_of(events: Generator[Any, None, T]) -> T:
    """Run a generator whose events nobody needs to its end, and return what it returns."""
    try:
        while True:
            next(events)
    except StopIteration as done:
        return done.value


def ms_since(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 1)


def failed_attempt(provider: str, model: str, exc: BaseException, *, latency_ms: float, purpose: str,
                   try_number: int, retry_in: float | None, next_provider: str | None,
                   user_id: int | None = None, message_id: int | None = None) -> dict[str, Any]:
    """The record of one failed try, as stored with a reply and in the failure log."""
    if isinstance(exc, ProviderError):
        error_class, error = exc.kind, str(exc)
    else:
        error_class, error = type(exc).__name__, f"{type(exc).__name__}: {exc}"
    if retry_in is not None:
        action = "retry"
    else:
        action = "fallback" if next_provider else "give_up"
    return {
        "provider": provider,
        "model": model,
        "ok": False,
        "error_class": error_class,
        "error": redact(error)[:500],
        "status_code": getattr(exc, "status_code", None),
        "latency_ms": latency_ms,
        "try": try_number,
        "action": action,
        "retry_in_s": None if retry_in is None else round(retry_in, 3),
        "fallback_provider": next_provider if action == "fallback" else None,
        "purpose": purpose,
        "user_id": user_id,
        "message_id": message_id,
    }


def report(on_failure: FailureHook | None, attempt: dict[str, Any]) -> None:
    """Hand a failed attempt to the failure hook; the failure log must never take the reply down with it."""
    if on_failure is None:
        return
    try:
        on_failure(attempt)
    except Exception:  # a broken hook (e.g. the database gone) is logged, and the reply goes on
        log.exception("failure hook raised while recording a %s failure", attempt.get("provider"))
