"""What callers and providers share: the request, the result, the error kinds and the provider Protocol.

Every provider raises ``ProviderError`` with one of the kinds below, so the failure log reads
the same whichever SDK failed.
"""
from __future__ import annotations

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
