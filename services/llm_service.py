"""Chat providers behind one small interface, and the fallback chain over them.

A provider turns a ``ChatRequest`` into a ``ChatResult`` (or a stream of text
deltas). ``LLMService`` walks the configured chain (``LLM_PROVIDERS``, e.g.
``dashscope,openai_compatible,offline``):

* each provider gets a few tries: timeouts, connection errors, 429 and 5xx are
  retried with exponential backoff and jitter (a ``Retry-After`` up to
  ``RetryPolicy.max_retry_after`` is waited for exactly; a longer one means
  "fall back now"); other 4xx, malformed bodies and empty completions are not
  retried on the same provider;
* a per-provider circuit breaker skips a provider for a cool-down after
  ``failure_threshold`` consecutive failed calls, so a dead endpoint costs one
  participant a delay, not every participant;
* every failed try is reported through ``on_failure`` (the admin's failure log)
  and kept in ``ChatResult.attempts`` / ``AllProvidersFailed.attempts``.

The SDKs' own hidden retries are switched off by the providers so that all of
this is ours, deterministic and testable (``sleep``, ``monotonic`` and ``rng``
are injectable).
"""
from __future__ import annotations

import email.utils
import logging
import random
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

log = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class ChatRequest:
    messages: list[dict[str, str]]  # OpenAI-style [{"role", "content"}]
    temperature: float = 0.7
    max_tokens: int = 600
    json_mode: bool = False
    purpose: str = "reply"  # reply | consolidation | salience | summary
    language: str = "zh"
    # Structured memory context (MemoryContext.to_dict()); real models read the rendered
    # prompt, the offline responder reads this directly.
    memory_context: dict[str, Any] | None = None
    user_id: int | None = None
    message_id: int | None = None  # the participant's message being answered, for the failure log


@dataclass
class ChatResult:
    text: str
    provider: str
    model: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_ms: float = 0.0
    params: dict[str, Any] = field(default_factory=dict)
    attempts: list[dict[str, Any]] = field(default_factory=list)


# Error kinds shared by every provider, so the failure log reads the same whichever SDK failed.
TIMEOUT = "timeout"
CONNECTION_ERROR = "connection_error"
RATE_LIMITED = "rate_limited"
SERVER_ERROR = "server_error"
AUTH_ERROR = "auth_error"
CLIENT_ERROR = "client_error"
MALFORMED_RESPONSE = "malformed_response"
EMPTY_COMPLETION = "empty_completion"
STREAM_INTERRUPTED = "stream_interrupted"
CIRCUIT_OPEN = "circuit_open"


class ProviderError(Exception):
    """A provider could not answer. ``retryable`` marks timeouts, connection errors, 429 and 5xx.

    ``kind`` is one of the error kinds above; it is what the failure log shows as the
    error class. Messages never carry an API key (providers redact them)."""

    def __init__(self, message: str, *, provider: str, status_code: int | None = None,
                 retryable: bool = False, retry_after: float | None = None, kind: str = "provider_error") -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after
        self.kind = kind

    @property
    def counts_against_provider(self) -> bool:
        """A 400-type error is about this request (too long, bad parameter), not about the provider."""
        return self.kind != CLIENT_ERROR


class ProviderConfigError(ValueError):
    """A provider named in the chain cannot be built from the configuration (e.g. a missing key)."""


class AllProvidersFailed(Exception):
    def __init__(self, attempts: list[dict[str, Any]]) -> None:
        super().__init__("every provider in the chain failed: " + "; ".join(
            f"{a['provider']}: {a.get('error')}" for a in attempts))
        self.attempts = attempts


class ChatProvider(Protocol):
    name: str
    model: str

    def complete(self, request: ChatRequest) -> ChatResult: ...

    def stream(self, request: ChatRequest) -> Iterator[str]: ...


FailureHook = Callable[[dict[str, Any]], None]


# ---------------------------------------------------------------------------
# Helpers the providers share
# ---------------------------------------------------------------------------

_SECRET_PATTERNS = [
    re.compile(r"\bsk-[A-Za-z0-9_\-*.]{4,}"),
    re.compile(r"(?i)(bearer\s+)[A-Za-z0-9_\-.=*]{6,}"),
    re.compile(r"(?i)(api[_-]?key[\"']?\s*[:=]\s*[\"']?)[A-Za-z0-9_\-.*]{6,}"),
]


def redact(text: str, secrets: tuple[str | None, ...] = ()) -> str:
    """``text`` with the given secrets and anything shaped like an API key replaced by ``***``.

    Some APIs echo a (partially masked) key in their 401 body; that must not reach the
    failure log, the attempts stored with a message, or an export."""
    for secret in secrets:
        if secret and len(secret) >= 4:
            text = text.replace(secret, "***")
    for pattern in _SECRET_PATTERNS:
        text = pattern.sub(lambda m: (m.group(1) if m.groups() else "") + "***", text)
    return text


def public_url(url: str | None) -> str | None:
    """A base URL fit for storing with a reply: no user:password, no query string."""
    if not url:
        return None
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def parse_retry_after(headers: Mapping[str, Any] | None, now: float | None = None) -> float | None:
    """Seconds to wait from ``retry-after-ms``, ``Retry-After`` (seconds or an HTTP date), else None."""
    if not headers:
        return None
    lowered = {str(k).lower(): str(v) for k, v in headers.items()}
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = lowered.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) / divisor
        except ValueError:
            continue
        return seconds if seconds >= 0 else None
    value = lowered.get("retry-after")
    if value:
        parsed = email.utils.parsedate_tz(value)
        if parsed is not None:
            return max(0.0, email.utils.mktime_tz(parsed) - (time.time() if now is None else now))
    return None


def error_kind_for_status(status_code: int) -> tuple[str, bool]:
    """The error kind for an HTTP status, and whether trying again may help."""
    if status_code == 429:
        return RATE_LIMITED, True
    if status_code == 408:
        return TIMEOUT, True
    if status_code >= 500:
        return SERVER_ERROR, True
    if status_code in (401, 403):
        return AUTH_ERROR, False
    return CLIENT_ERROR, False


class StreamUsage:
    """``last_usage`` kept per thread: concurrent participants stream through one provider object."""

    _usage_local: threading.local

    @property
    def last_usage(self) -> dict[str, int]:
        local = self.__dict__.setdefault("_usage_local", threading.local())
        return getattr(local, "usage", {})

    @last_usage.setter
    def last_usage(self, usage: dict[str, int]) -> None:
        local = self.__dict__.setdefault("_usage_local", threading.local())
        local.usage = usage


def json_instruction(messages: list[dict[str, str]], language: str) -> tuple[list[dict[str, str]], bool]:
    """Make sure a JSON-mode prompt mentions JSON: OpenAI-style and DashScope APIs reject it otherwise.

    The note joins the existing system message rather than adding a second one, which some
    chat templates (served by vLLM or llama.cpp) refuse. Returns the messages to send and
    whether they differ from the stored prompt."""
    if any("json" in (m.get("content") or "").lower() for m in messages):
        return messages, False
    note = "请只输出一个 JSON 对象。" if language == "zh" else "Answer with a single JSON object."
    if messages and messages[0].get("role") == "system":
        first = {**messages[0], "content": f"{messages[0]['content']}\n\n{note}"}
        return [first, *messages[1:]], True
    return [{"role": "system", "content": note}, *messages], True


# ---------------------------------------------------------------------------
# Retries and circuit breaker
# ---------------------------------------------------------------------------


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


def run_with_retries(call: Callable[[], T], *, policy: RetryPolicy, provider: str, model: str, purpose: str,
                     on_failure: FailureHook | None = None, sleep: Callable[[float], None] = time.sleep,
                     monotonic: Callable[[], float] = time.monotonic,
                     rng: Callable[[], float] = random.random) -> T:
    """``call()`` with the retry policy, for single-provider work such as embeddings (no fallback:
    the study's embedder is pinned). Every failed try is reported; the last error is raised."""
    started = monotonic()
    retries_done = 0
    while True:
        try_started = time.perf_counter()
        try:
            return call()
        except Exception as exc:
            delay = policy.next_delay(exc, retries_done, monotonic() - started, rng)
            attempt = failed_attempt(provider, model, exc, latency_ms=_ms_since(try_started), purpose=purpose,
                                     try_number=retries_done + 1, retry_in=delay, next_provider=None)
            _report(on_failure, attempt)
            if delay is None:
                raise
            sleep(delay)
            retries_done += 1


def _ms_since(started: float) -> float:
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


def _report(on_failure: FailureHook | None, attempt: dict[str, Any]) -> None:
    if on_failure is None:
        return
    try:
        on_failure(attempt)
    except Exception:  # the failure log must never take the reply down with it
        log.exception("failure hook raised while recording a %s failure", attempt.get("provider"))


# ---------------------------------------------------------------------------
# The chain
# ---------------------------------------------------------------------------


class LLMService:
    """Tries each provider in order (with retries, behind its circuit breaker); reports each
    failure; returns the first success. Without ``retry`` there are no retries (see
    ``build_llm_service`` for the configured chain)."""

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
        attempts: list[dict[str, Any]] = []
        for index, provider in enumerate(self.providers):
            if not self._admit(provider, index, request, attempts):
                continue
            provider_started = self.monotonic()
            retries_done = 0
            while True:
                started = time.perf_counter()
                try:
                    result = provider.complete(request)
                    if not (result.text or "").strip():
                        raise ProviderError("empty completion", provider=provider.name, kind=EMPTY_COMPLETION)
                except Exception as exc:  # any provider failure: retry, or move on down the chain
                    delay = self._failed(provider, exc, started, index, request, attempts, provider_started,
                                         retries_done)
                    if delay is None:
                        break
                    self.sleep(delay)
                    retries_done += 1
                    continue
                self.breaker(provider).record_success()
                result.attempts = attempts + [_ok_attempt(provider, result.latency_ms, retries_done + 1)]
                return result
        raise AllProvidersFailed(attempts)

    def stream(self, request: ChatRequest) -> Iterator[dict[str, Any]]:
        return stream_with_fallback(self, request)

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

    def _failed(self, provider: ChatProvider, exc: Exception, started: float, index: int, request: ChatRequest,
                attempts: list[dict[str, Any]], provider_started: float, retries_done: int,
                *, allow_retry: bool = True) -> float | None:
        """Record a failed try; return the delay before retrying this provider, or None to move on."""
        delay = (self.retry.next_delay(exc, retries_done, self.monotonic() - provider_started, self.rng)
                 if allow_retry else None)
        attempt = failed_attempt(provider.name, provider.model, exc, latency_ms=_ms_since(started),
                                 purpose=request.purpose, try_number=retries_done + 1, retry_in=delay,
                                 next_provider=self._next_name(index), user_id=request.user_id,
                                 message_id=request.message_id)
        if delay is None and getattr(exc, "counts_against_provider", True):
            attempt["circuit_opened"] = self.breaker(provider).record_failure()
        attempts.append(attempt)
        _report(self.on_failure, attempt)
        return delay


def _ok_attempt(provider: ChatProvider, latency_ms: float, try_number: int) -> dict[str, Any]:
    return {"provider": provider.name, "model": provider.model, "ok": True, "latency_ms": latency_ms,
            "try": try_number}


def build_llm_service(settings: Any, chain: list[str] | None = None, on_failure: FailureHook | None = None,
                      **options: Any) -> LLMService:
    """The provider chain named in settings (``LLM_PROVIDERS``), in order.

    ``options`` go to ``LLMService`` (``retry``, ``breakers``, ``sleep`` ...); by default the
    retry policy comes from ``LLM_MAX_RETRIES`` / ``LLM_TIMEOUT_SECONDS``. A provider that
    cannot be configured (missing key) raises ``ProviderConfigError`` here, at start-up."""
    from services.providers import build_chat_provider

    names = chain or settings.llm_providers
    options.setdefault("retry", RetryPolicy.from_settings(settings))
    return LLMService([build_chat_provider(name, settings) for name in names], on_failure=on_failure, **options)


def stream_with_fallback(service: LLMService, request: ChatRequest) -> Iterator[dict[str, Any]]:
    """Stream a reply: yields ``{"delta": text}`` events, then ``{"result": ChatResult}``.

    A provider whose stream fails *before its first token* is retried (same policy as
    ``complete``) and then replaced by the next one; the participant sees only a delay.
    A break *after* the first token is reported, ``{"reset": True}`` tells the client to
    discard the partial text, and the next provider streams the whole reply instead.
    Raises ``AllProvidersFailed`` when nobody could answer."""
    attempts: list[dict[str, Any]] = []
    for index, provider in enumerate(service.providers):
        if not service._admit(provider, index, request, attempts):
            continue
        provider_started = service.monotonic()
        retries_done = 0
        while True:
            started = time.perf_counter()
            first_token_ms: float | None = None
            parts: list[str] = []
            try:
                for delta in provider.stream(request):
                    if delta:
                        if first_token_ms is None:
                            first_token_ms = _ms_since(started)
                        parts.append(delta)
                        yield {"delta": delta}
                if not "".join(parts).strip():
                    raise ProviderError("empty completion", provider=provider.name, kind=EMPTY_COMPLETION)
            except Exception as exc:
                # Text already shown cannot be silently extended by a retry: only a clean
                # failure before the first token is retried on the same provider.
                delay = service._failed(provider, exc, started, index, request, attempts, provider_started,
                                        retries_done, allow_retry=not parts)
                if parts:
                    yield {"reset": True}
                if delay is None:
                    break
                service.sleep(delay)
                retries_done += 1
                continue
            service.breaker(provider).record_success()
            latency = _ms_since(started)
            usage = getattr(provider, "last_usage", None) or {}
            describe = getattr(provider, "request_params", None)
            params = dict(describe(request)) if describe else {
                "temperature": request.temperature, "max_tokens": request.max_tokens}
            params.update(stream=True, first_token_ms=first_token_ms)
            result = ChatResult(
                text="".join(parts), provider=provider.name, model=provider.model,
                prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
                latency_ms=latency, params=params,
            )
            result.attempts = attempts + [_ok_attempt(provider, latency, retries_done + 1)]
            yield {"result": result}
            return
    raise AllProvidersFailed(attempts)
