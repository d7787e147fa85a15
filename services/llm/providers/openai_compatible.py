"""Any OpenAI-compatible server through the ``openai`` SDK: DeepSeek, a local vLLM / Ollama /
llama.cpp server, or OpenAI itself. ``OPENAI_BASE_URL`` picks the server, ``OPENAI_CHAT_MODEL``
and ``OPENAI_EMBEDDING_MODEL`` the models; nothing else changes.

The SDK's own retries are switched off (``max_retries=0``): retries, backoff and fallback
belong to ``LLMService`` so they behave the same for every provider and can be tested.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import ExitStack
from typing import Any

import numpy as np
import openai
from openai.types.chat import ChatCompletion

from services.llm.embedding_service import checked_batch, normalise
from services.llm.retry import NO_RETRIES, RetryPolicy, run_with_retries
from services.llm.types import (
    CONNECTION_ERROR,
    EMPTY_COMPLETION,
    MALFORMED_RESPONSE,
    SERVER_ERROR,
    STREAM_INTERRUPTED,
    TIMEOUT,
    ChatRequest,
    ChatResult,
    FailureHook,
    ProviderConfigError,
    ProviderError,
)
from services.llm.wire import (
    StreamUsage,
    error_kind_for_status,
    json_instruction,
    parse_retry_after,
    public_url,
    redact,
)

NAME = "openai_compatible"
# Local servers (Ollama, vLLM without --api-key, llama.cpp) accept any bearer token; the SDK
# insists on having one.
PLACEHOLDER_KEY = "no-key-needed"


def _client(api_key: str | None, base_url: str | None, timeout: float) -> openai.OpenAI:
    return openai.OpenAI(api_key=api_key or PLACEHOLDER_KEY, base_url=base_url, timeout=timeout, max_retries=0)


def _require_credentials(settings: Any) -> None:
    if not settings.openai_api_key and not settings.openai_base_url:
        raise ProviderConfigError(
            "provider 'openai_compatible' needs OPENAI_API_KEY, or OPENAI_BASE_URL for a local server "
            "that takes no key (e.g. OPENAI_BASE_URL=http://127.0.0.1:11434/v1 for Ollama)")


def translate_error(exc: BaseException, *, secrets: tuple[str | None, ...], mid_stream: bool = False) -> ProviderError:
    """An ``openai`` SDK exception (or a parsing failure) as a ``ProviderError`` of a known kind."""
    if isinstance(exc, ProviderError):
        return exc
    text = redact(f"{type(exc).__name__}: {exc}", secrets)[:400]
    if isinstance(exc, openai.APITimeoutError):
        return ProviderError(text, provider=NAME, retryable=True, kind=TIMEOUT)
    if isinstance(exc, openai.APIConnectionError):
        return ProviderError(text, provider=NAME, retryable=True,
                             kind=STREAM_INTERRUPTED if mid_stream else CONNECTION_ERROR)
    if isinstance(exc, openai.APIStatusError):
        kind, retryable = error_kind_for_status(exc.status_code)
        return ProviderError(text, provider=NAME, status_code=exc.status_code, retryable=retryable, kind=kind,
                             retry_after=parse_retry_after(exc.response.headers) if retryable else None)
    if isinstance(exc, openai.APIResponseValidationError | ValueError | TypeError | KeyError | AttributeError):
        return ProviderError(text, provider=NAME, kind=MALFORMED_RESPONSE)
    if isinstance(exc, openai.APIError):  # an error event inside a stream
        return ProviderError(text, provider=NAME, retryable=True, kind=SERVER_ERROR)
    return ProviderError(text, provider=NAME, kind=type(exc).__name__)


def _lines(response: Any) -> Iterator[str]:
    """The body's lines; a broken or stalled connection raises the SDK's own error types."""
    # the SDK's mapping of its HTTP library's transport errors (pinned openai version)
    from openai._httpx2 import request_exceptions, timeout_exceptions

    try:
        yield from response.iter_lines()
    except timeout_exceptions() as err:
        raise openai.APITimeoutError(request=response.http_request) from err
    except request_exceptions() as err:
        raise openai.APIConnectionError(request=response.http_request) from err


def _sse_chunks(response: Any) -> Iterator[dict[str, Any]]:
    """The JSON objects of an OpenAI chat stream's ``data:`` lines, up to ``[DONE]``.

    An error object inside the stream raises ``openai.APIError``, as the SDK's own reader does."""
    lines = _lines(response)
    for line in lines:
        if not line.startswith("data:"):
            continue  # blank separators, ``event:``/``id:`` fields, ``:`` comments
        data = line[5:].strip()
        if data.startswith("[DONE]"):
            for _ in lines:  # read to the end, so the connection goes back to the pool
                pass
            return
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise ValueError(f"stream chunk is not a JSON object: {data[:120]!r}")
        if chunk.get("error"):
            error = chunk["error"]
            message = error.get("message") if isinstance(error, dict) else None
            raise openai.APIError(message=message if isinstance(message, str) and message
                                  else "An error occurred during streaming",
                                  request=response.http_request, body=error)
        yield chunk


class OpenAICompatibleChatProvider(StreamUsage):
    name = NAME

    def __init__(self, *, model: str, api_key: str | None = None, base_url: str | None = None,
                 timeout: float = 30.0) -> None:
        self.model = model
        self.base_url = base_url
        self._secrets = (api_key,)
        self.client = _client(api_key, base_url, timeout)

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAICompatibleChatProvider:
        _require_credentials(settings)
        if not settings.openai_base_url and settings.openai_chat_model.startswith("deepseek"):
            raise ProviderConfigError(
                f"OPENAI_CHAT_MODEL={settings.openai_chat_model} is a DeepSeek model but OPENAI_BASE_URL is "
                "not set; set OPENAI_BASE_URL=https://api.deepseek.com")
        return cls(model=settings.openai_chat_model, api_key=settings.openai_api_key,
                   base_url=settings.openai_base_url, timeout=settings.llm_timeout_seconds)

    def request_params(self, request: ChatRequest) -> dict[str, Any]:
        """What was asked of the model, stored with the reply (never the key)."""
        params: dict[str, Any] = {"temperature": request.temperature, "max_tokens": request.max_tokens,
                                  "base_url": public_url(str(self.client.base_url))}
        if request.json_mode:
            params["response_format"] = {"type": "json_object"}
            params["json_instruction_added"] = json_instruction(request.messages, request.language)[1]
        return params

    def _arguments(self, request: ChatRequest) -> dict[str, Any]:
        messages = request.messages
        arguments: dict[str, Any] = {"model": self.model, "temperature": request.temperature,
                                     "max_tokens": request.max_tokens}
        if request.json_mode:
            messages, _ = json_instruction(messages, request.language)
            arguments["response_format"] = {"type": "json_object"}
        # The messages go in the body as they are (plain role/content strings): passed as the typed
        # ``messages`` parameter the SDK walks every message against its type hints, ~8 ms of CPU per
        # reply and growing with the conversation (docs/benchmarks.md, "Serving a cohort").
        arguments["messages"] = []
        arguments["extra_body"] = {"messages": messages}
        return arguments

    def complete(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        try:
            completion = self.client.chat.completions.create(**self._arguments(request))
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets) from exc
        # A server that answers 200 with a non-JSON content type makes the SDK hand back a str.
        if not isinstance(completion, ChatCompletion) or not completion.choices:
            raise ProviderError(f"malformed response: expected a chat completion, got {str(completion)[:120]!r}",
                                provider=self.name, kind=MALFORMED_RESPONSE)
        message = completion.choices[0].message
        text = message.content if message is not None else None
        if not isinstance(text, str) or not text.strip():
            raise ProviderError("empty completion", provider=self.name, kind=EMPTY_COMPLETION)
        usage = completion.usage
        return ChatResult(
            text=text, provider=self.name, model=self.model,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
            params={**self.request_params(request), "finish_reason": completion.choices[0].finish_reason},
        )

    def stream(self, request: ChatRequest) -> Iterator[str]:
        # The chunks are read as plain JSON, not as the SDK's typed chunk objects: building ~90
        # pydantic objects per reply cost ~45 ms of CPU, three quarters of a streamed reply's
        # platform time under load (docs/benchmarks.md, "Serving a cohort"). Requests, retries of
        # the connection and HTTP errors are still the SDK's.
        self.last_usage = {}
        with ExitStack() as stack:
            try:
                response = stack.enter_context(self.client.chat.completions.with_streaming_response.create(
                    **self._arguments(request), stream=True, stream_options={"include_usage": True}))
            except Exception as exc:
                raise translate_error(exc, secrets=self._secrets) from exc
            finished = False
            yielded = False
            try:
                for chunk in _sse_chunks(response):
                    if chunk.get("usage"):
                        self.last_usage = {"prompt_tokens": chunk["usage"].get("prompt_tokens"),
                                           "completion_tokens": chunk["usage"].get("completion_tokens")}
                    for choice in chunk.get("choices") or []:
                        if choice.get("finish_reason"):
                            finished = True
                        content = (choice.get("delta") or {}).get("content")
                        if content:
                            yielded = True
                            yield content
            except Exception as exc:
                raise translate_error(exc, secrets=self._secrets, mid_stream=yielded) from exc
        if not finished:
            # The body ended cleanly but the model never said it was done: a proxy cut it short.
            raise ProviderError("stream ended before the model finished", provider=self.name, retryable=True,
                                kind=STREAM_INTERRUPTED)


class OpenAICompatibleEmbeddingProvider:
    """``/embeddings`` of an OpenAI-compatible server; vectors come back L2-normalised float32."""

    name = NAME
    batch_size = 64

    def __init__(self, *, model: str, api_key: str | None = None, base_url: str | None = None,
                 timeout: float = 30.0, retry: RetryPolicy | None = None, on_failure: FailureHook | None = None,
                 sleep: Any = time.sleep) -> None:
        self.api_model = model
        # Stored with every vector: vectors are only ever compared within one provider and model.
        self.model = f"{NAME}/{model}"
        self.dim = 0  # learnt from the first response
        self.retry = retry if retry is not None else NO_RETRIES
        self.on_failure = on_failure
        self.sleep = sleep
        self._secrets = (api_key,)
        self.client = _client(api_key, base_url, timeout)

    @classmethod
    def from_settings(cls, settings: Any) -> OpenAICompatibleEmbeddingProvider:
        _require_credentials(settings)
        return cls(model=settings.openai_embedding_model, api_key=settings.openai_api_key,
                   base_url=settings.openai_base_url, timeout=settings.llm_timeout_seconds,
                   retry=RetryPolicy.from_settings(settings))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts)

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        # OpenAI-style embedding endpoints have no query/passage distinction.
        return self._embed(texts)

    def _embed(self, texts: list[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = [self._embed_batch_with_retries(texts[i:i + self.batch_size])
                   for i in range(0, len(texts), self.batch_size)]
        return normalise(np.vstack(batches))

    def _embed_batch_with_retries(self, batch: list[str]) -> np.ndarray:
        return run_with_retries(lambda: self._embed_batch(batch), policy=self.retry, provider=self.name,
                                model=self.model, purpose="embedding", on_failure=self.on_failure,
                                sleep=self.sleep)

    def _embed_batch(self, batch: list[str]) -> np.ndarray:
        try:
            response = self.client.embeddings.create(model=self.api_model, input=batch, encoding_format="float")
            rows = sorted(response.data, key=lambda item: item.index)
            vectors = np.asarray([row.embedding for row in rows], dtype=np.float32)
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets) from exc
        return checked_batch(vectors, len(batch), self)

