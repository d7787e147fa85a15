"""Test doubles for a model's *output* (the real SDK paths are tested against local wire-format
servers in tests/services/llm/test_providers_*.py): a model that answers from a script, and one that
is down."""
from __future__ import annotations

from services.llm.types import ChatRequest, ChatResult, ProviderError


class ScriptedModel:
    """Answers each request with the next scripted text (the last one repeats), or raises it."""

    name = "scripted"
    model = "scripted-json"

    def __init__(self, *answers: str | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[ChatRequest] = []

    def complete(self, request: ChatRequest) -> ChatResult:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return ChatResult(text=answer, provider=self.name, model=self.model)

    def stream(self, request: ChatRequest):
        yield self.complete(request).text


class DownModel:
    """A model server that refuses connections; counts the calls it refused."""

    name = "unreachable"
    model = "nowhere-1"

    def __init__(self) -> None:
        self.calls = 0

    def complete(self, request: ChatRequest) -> ChatResult:
        self.calls += 1
        raise ProviderError("connection refused", provider=self.name, retryable=True)

    def stream(self, request: ChatRequest):
        self.calls += 1
        raise ProviderError("connection refused", provider=self.name, retryable=True)
        yield  # pragma: no cover - makes this a generator like a real stream
