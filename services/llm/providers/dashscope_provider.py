"""Qwen chat and DashScope text embeddings through the ``dashscope`` SDK (native HTTP API).

``DASHSCOPE_API_KEY`` is required; ``DASHSCOPE_BASE_URL`` (e.g. the international
``https://dashscope-intl.aliyuncs.com/api/v1``) is passed per call as the SDK's
``base_address``, so the SDK's module-level globals are never touched.

The SDK has no retry loop of its own except one: it re-sends a request once when a
pooled keep-alive connection turns out dead *before any response byte* (a
``requests`` ConnectionError at send time). That cannot be switched off and never
fires on a timeout, a 429 or a 5xx; everything else about retries is ``LLMService``'s.
"""
from __future__ import annotations

import time
from collections.abc import Iterator
from http import HTTPStatus
from typing import Any

import numpy as np
import requests

from services.llm.embedding_service import checked_batch, normalise
from services.llm.retry import NO_RETRIES, RetryPolicy, run_with_retries
from services.llm.types import (
    CONNECTION_ERROR,
    EMPTY_COMPLETION,
    MALFORMED_RESPONSE,
    RATE_LIMITED,
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

NAME = "dashscope"
DEFAULT_BASE_URL = "https://dashscope.aliyuncs.com/api/v1"
# Documented batch limit of text-embedding-v3/v4 (v1/v2 accept more; 10 is safe for all).
EMBEDDING_BATCH = 10


def _require_key(settings: Any) -> str:
    if not settings.dashscope_api_key:
        raise ProviderConfigError(
            "provider 'dashscope' needs DASHSCOPE_API_KEY (LLM_PROVIDERS or EMBEDDING_PROVIDER names it)")
    return settings.dashscope_api_key


def translate_error(exc: BaseException, *, secrets: tuple[str | None, ...], mid_stream: bool = False) -> ProviderError:
    """A transport or parsing failure under the ``dashscope`` SDK as a ``ProviderError``."""
    if isinstance(exc, ProviderError):
        return exc
    text = redact(f"{type(exc).__name__}: {exc}", secrets)[:400]
    # requests turns a read timeout *inside* a streamed body into a ConnectionError.
    if isinstance(exc, requests.exceptions.Timeout) or (
            isinstance(exc, requests.exceptions.ConnectionError) and "timed out" in str(exc).lower()):
        return ProviderError(text, provider=NAME, retryable=True, kind=TIMEOUT)
    if isinstance(exc, requests.exceptions.JSONDecodeError):
        return ProviderError(text, provider=NAME, kind=MALFORMED_RESPONSE)
    if isinstance(exc, requests.exceptions.ChunkedEncodingError):
        return ProviderError(text, provider=NAME, retryable=True,
                             kind=STREAM_INTERRUPTED if mid_stream else CONNECTION_ERROR)
    if isinstance(exc, requests.exceptions.RequestException):
        return ProviderError(text, provider=NAME, retryable=True, kind=CONNECTION_ERROR)
    if isinstance(exc, ValueError | TypeError | KeyError | AttributeError | IndexError):
        return ProviderError(text, provider=NAME, kind=MALFORMED_RESPONSE)
    return ProviderError(text, provider=NAME, kind=type(exc).__name__)


def error_from_response(response: Any, *, secrets: tuple[str | None, ...], streaming: bool = False) -> ProviderError:
    """A non-200 ``DashScopeAPIResponse`` (HTTP error, or an error record inside a stream)."""
    status = int(response.status_code)
    code = response.code or ""
    message = response.message if isinstance(response.message, str) else str(response.message)
    text = redact(f"HTTP {status} {code}: {message}", secrets)[:400]
    if streaming and code == "Unknown" and status == HTTPStatus.BAD_REQUEST:
        # The SDK reports an SSE record whose data is not JSON as 400/"Unknown" with the raw data.
        return ProviderError(f"malformed stream record: {text}", provider=NAME, status_code=status,
                             kind=MALFORMED_RESPONSE)
    kind, retryable = error_kind_for_status(status)
    if code.startswith("Throttling"):
        kind, retryable = RATE_LIMITED, True
    return ProviderError(text, provider=NAME, status_code=status, retryable=retryable, kind=kind,
                         retry_after=parse_retry_after(response.headers) if retryable else None)


def _finished(reason: Any) -> bool:
    # DashScope sends the string "null" until the last record.
    return reason not in (None, "", "null")


class DashScopeChatProvider(StreamUsage):
    name = NAME

    def __init__(self, *, model: str, api_key: str, base_url: str | None = None, timeout: float = 30.0) -> None:
        if not api_key:
            raise ProviderConfigError("DashScopeChatProvider needs an API key (DASHSCOPE_API_KEY)")
        self.model = model
        self.base_url = base_url
        self.timeout = timeout
        self._api_key = api_key
        self._secrets = (api_key,)
        self.session = requests.Session()  # our own pool, not the SDK's process-wide one

    @classmethod
    def from_settings(cls, settings: Any) -> DashScopeChatProvider:
        return cls(model=settings.dashscope_chat_model, api_key=_require_key(settings),
                   base_url=settings.dashscope_base_url, timeout=settings.llm_timeout_seconds)

    def request_params(self, request: ChatRequest) -> dict[str, Any]:
        params: dict[str, Any] = {"temperature": request.temperature, "max_tokens": request.max_tokens,
                                  "result_format": "message", "base_url": public_url(self._base_url())}
        if request.json_mode:
            params["response_format"] = {"type": "json_object"}
            params["json_instruction_added"] = json_instruction(request.messages, request.language)[1]
        return params

    def _base_url(self) -> str:
        import dashscope

        return self.base_url or dashscope.base_http_api_url or DEFAULT_BASE_URL

    def _call(self, request: ChatRequest, *, stream: bool) -> Any:
        from dashscope import Generation

        messages = request.messages
        extra: dict[str, Any] = {}
        if request.json_mode:
            messages, _ = json_instruction(messages, request.language)
            extra["response_format"] = {"type": "json_object"}
        if stream:
            extra.update(stream=True, incremental_output=True)
        if self.base_url:
            extra["base_address"] = self.base_url
        return Generation.call(
            model=self.model, messages=messages, api_key=self._api_key, result_format="message",
            temperature=request.temperature, max_tokens=request.max_tokens,
            request_timeout=self.timeout, session=self.session, **extra,
        )

    @staticmethod
    def _content(response: Any) -> tuple[str | None, Any]:
        """Text and finish reason of one response record (message or legacy text format)."""
        output = response.output
        if output is None:
            raise ProviderError("malformed response: no output", provider=NAME, kind=MALFORMED_RESPONSE)
        if output.choices:
            choice = output.choices[0]
            message = choice.message
            return (message.content if message is not None else None), choice.finish_reason
        return output.text, output.finish_reason

    def complete(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        try:
            response = self._call(request, stream=False)
            if response.status_code != HTTPStatus.OK:
                raise error_from_response(response, secrets=self._secrets)
            text, finish_reason = self._content(response)
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets) from exc
        if not isinstance(text, str) or not text.strip():
            raise ProviderError("empty completion", provider=self.name, kind=EMPTY_COMPLETION)
        usage = response.usage or {}
        return ChatResult(
            text=text, provider=self.name, model=self.model,
            prompt_tokens=usage.get("input_tokens"), completion_tokens=usage.get("output_tokens"),
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
            params={**self.request_params(request), "finish_reason": finish_reason},
        )

    def stream(self, request: ChatRequest) -> Iterator[str]:
        self.last_usage = {}
        finished = False
        yielded = False
        try:
            for response in self._call(request, stream=True):
                if response.status_code != HTTPStatus.OK:
                    raise error_from_response(response, secrets=self._secrets, streaming=True)
                text, finish_reason = self._content(response)
                usage = response.usage or {}
                if usage:  # cumulative in every record
                    self.last_usage = {"prompt_tokens": usage.get("input_tokens"),
                                       "completion_tokens": usage.get("output_tokens")}
                finished = finished or _finished(finish_reason)
                if text:
                    yielded = True
                    yield text
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets, mid_stream=yielded) from exc
        if not finished:
            raise ProviderError("stream ended before the model finished", provider=self.name, retryable=True,
                                kind=STREAM_INTERRUPTED)


class DashScopeEmbeddingProvider:
    """DashScope ``text-embedding-v*``; queries use ``text_type=query``, stored memories ``document``."""

    name = NAME
    batch_size = EMBEDDING_BATCH

    def __init__(self, *, model: str, api_key: str, base_url: str | None = None, timeout: float = 30.0,
                 retry: RetryPolicy | None = None, on_failure: FailureHook | None = None,
                 sleep: Any = time.sleep) -> None:
        if not api_key:
            raise ProviderConfigError("DashScopeEmbeddingProvider needs an API key (DASHSCOPE_API_KEY)")
        self.api_model = model
        self.model = f"{NAME}/{model}"  # stored with every vector
        self.dim = 0  # learnt from the first response
        self.base_url = base_url
        self.timeout = timeout
        self.retry = retry if retry is not None else NO_RETRIES
        self.on_failure = on_failure
        self.sleep = sleep
        self._api_key = api_key
        self._secrets = (api_key,)
        self.session = requests.Session()

    @classmethod
    def from_settings(cls, settings: Any) -> DashScopeEmbeddingProvider:
        return cls(model=settings.dashscope_embedding_model, api_key=_require_key(settings),
                   base_url=settings.dashscope_base_url, timeout=settings.llm_timeout_seconds,
                   retry=RetryPolicy.from_settings(settings))

    def embed_queries(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "query")

    def embed_passages(self, texts: list[str]) -> np.ndarray:
        return self._embed(texts, "document")

    def _embed(self, texts: list[str], text_type: str) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        batches = [
            run_with_retries(lambda batch=texts[i:i + self.batch_size]: self._embed_batch(batch, text_type),
                             policy=self.retry, provider=self.name, model=self.model, purpose="embedding",
                             on_failure=self.on_failure, sleep=self.sleep)
            for i in range(0, len(texts), self.batch_size)
        ]
        return normalise(np.vstack(batches))

    def _embed_batch(self, batch: list[str], text_type: str) -> np.ndarray:
        from dashscope import TextEmbedding

        extra: dict[str, Any] = {"base_address": self.base_url} if self.base_url else {}
        try:
            response = TextEmbedding.call(model=self.api_model, input=batch, api_key=self._api_key,
                                          text_type=text_type, request_timeout=self.timeout, session=self.session,
                                          **extra)
            if response.status_code != HTTPStatus.OK:
                raise error_from_response(response, secrets=self._secrets)
            rows = sorted(response.output["embeddings"], key=lambda row: row["text_index"])
            vectors = np.asarray([row["embedding"] for row in rows], dtype=np.float32)
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets) from exc
        return checked_batch(vectors, len(batch), self)
