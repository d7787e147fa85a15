"""Chat providers behind one small interface, and the fallback chain over them.

A provider turns a ``ChatRequest`` into a ``ChatResult`` (or a stream of text
deltas). ``LLMService`` walks the configured chain (``LLM_PROVIDERS``, e.g.
``dashscope,openai_compatible,offline``); every failure is reported through
``on_failure`` so it lands in the admin's failure log, and the next provider
answers. Only when the whole chain fails does the caller see ``AllProvidersFailed``.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


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


class ProviderError(Exception):
    """A provider could not answer. ``retryable`` marks timeouts, 429 and 5xx."""

    def __init__(self, message: str, *, provider: str, status_code: int | None = None,
                 retryable: bool = False, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.provider = provider
        self.status_code = status_code
        self.retryable = retryable
        self.retry_after = retry_after


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


class LLMService:
    """Tries each provider in order; reports each failure; returns the first success."""

    def __init__(self, providers: list[ChatProvider], on_failure: FailureHook | None = None) -> None:
        if not providers:
            raise ValueError("LLMService needs at least one provider")
        self.providers = providers
        self.on_failure = on_failure

    @property
    def primary(self) -> ChatProvider:
        return self.providers[0]

    def complete(self, request: ChatRequest) -> ChatResult:
        attempts: list[dict[str, Any]] = []
        for index, provider in enumerate(self.providers):
            started = time.perf_counter()
            try:
                result = provider.complete(request)
            except Exception as exc:  # any provider failure moves on down the chain
                attempt = self._failed(provider, exc, started, index, request)
                attempts.append(attempt)
                continue
            result.attempts = attempts + [{"provider": provider.name, "model": provider.model, "ok": True,
                                           "latency_ms": result.latency_ms}]
            return result
        raise AllProvidersFailed(attempts)

    def _failed(self, provider: ChatProvider, exc: Exception, started: float, index: int,
                request: ChatRequest) -> dict[str, Any]:
        next_name = self.providers[index + 1].name if index + 1 < len(self.providers) else None
        attempt = {
            "provider": provider.name,
            "model": provider.model,
            "ok": False,
            "error_class": type(exc).__name__,
            "error": str(exc)[:500],
            "status_code": getattr(exc, "status_code", None),
            "latency_ms": round((time.perf_counter() - started) * 1000, 1),
            "fallback_provider": next_name,
            "purpose": request.purpose,
            "user_id": request.user_id,
        }
        if self.on_failure:
            self.on_failure(attempt)
        return attempt


def build_llm_service(settings, chain: list[str] | None = None, on_failure: FailureHook | None = None) -> LLMService:
    """The provider chain named in settings (``LLM_PROVIDERS``), in order."""
    from services.providers import build_chat_provider

    names = chain or settings.llm_providers
    return LLMService([build_chat_provider(name, settings) for name in names], on_failure=on_failure)


def stream_with_fallback(service: LLMService, request: ChatRequest) -> Iterator[dict[str, Any]]:
    """Stream a reply: yields ``{"delta": text}`` events, then ``{"result": ChatResult}``.

    A provider whose stream breaks *before its first token* is reported and the next one
    streams instead; a break after the first token is also reported, and the text so far
    is completed by the next provider's whole answer replacing it (``{"reset": True}``)."""
    attempts: list[dict[str, Any]] = []
    for index, provider in enumerate(service.providers):
        started = time.perf_counter()
        parts: list[str] = []
        try:
            for delta in provider.stream(request):
                if delta:
                    parts.append(delta)
                    yield {"delta": delta}
            if not "".join(parts).strip():
                raise ProviderError("empty completion", provider=provider.name)
        except Exception as exc:
            attempts.append(service._failed(provider, exc, started, index, request))
            if parts:
                yield {"reset": True}
            continue
        latency = round((time.perf_counter() - started) * 1000, 1)
        usage = getattr(provider, "last_usage", None) or {}
        result = ChatResult(
            text="".join(parts), provider=provider.name, model=provider.model,
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
            latency_ms=latency, params={"temperature": request.temperature, "max_tokens": request.max_tokens,
                                        "stream": True},
        )
        result.attempts = attempts + [{"provider": provider.name, "model": provider.model, "ok": True,
                                       "latency_ms": latency}]
        yield {"result": result}
        return
    raise AllProvidersFailed(attempts)
