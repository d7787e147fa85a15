"""Any OpenAI-compatible server through the ``openai`` SDK: DeepSeek, a local vLLM / Ollama /
llama.cpp server, or OpenAI itself. ``OPENAI_BASE_URL`` picks the server, ``OPENAI_CHAT_MODEL``
and ``OPENAI_EMBEDDING_MODEL`` the models; nothing else changes.

The SDK's own retries are switched off (``max_retries=0``): retries, backoff and fallback
belong to ``LLMService`` so they behave the same for every provider and can be tested.
"""
from __future__ import annotations

import json
import time
from collections.abc import Generator, Iterator
from contextlib import ExitStack
from typing import Any

import httpx2
import numpy as np
import openai

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
CHAT_PATH = "/chat/completions"


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


def _body_reads(response: Any) -> Iterator[bytes]:
    """The body as it is read from the connection; a broken or stalled connection raises the SDK's own error types."""
    # the SDK's mapping of its HTTP library's transport errors (pinned openai version)
    from openai._httpx2 import request_exceptions, timeout_exceptions

    try:
        yield from response.iter_bytes()
    except timeout_exceptions() as err:
        raise openai.APITimeoutError(request=response.request) from err
    except request_exceptions() as err:
        raise openai.APIConnectionError(request=response.request) from err


def _chunk(data: bytes, response: Any) -> dict[str, Any]:
    """One ``data:`` line's JSON object; an error object inside the stream raises ``openai.APIError``, as the
    SDK's own reader does."""
    chunk = json.loads(data)
    if not isinstance(chunk, dict):
        raise ValueError(f"stream chunk is not a JSON object: {data[:120].decode(errors='replace')!r}")
    if chunk.get("error"):
        error = chunk["error"]
        message = error.get("message") if isinstance(error, dict) else None
        raise openai.APIError(message=message if isinstance(message, str) and message
                              else "An error occurred during streaming",
                              request=response.request, body=error)
    return chunk


def _sse_reads(response: Any) -> Iterator[list[dict[str, Any]]]:
    """The JSON objects of an OpenAI chat stream's ``data:`` lines, up to ``[DONE]``: one list per read of the
    body, holding the lines that read completed.

    The body is split into lines here, a read at a time, instead of by the HTTP library's text and line
    decoders, which cost a few generator hops per line; and what one read brings leaves as one batch, so the
    layers above handle a read once, not each token in it (docs/benchmarks.md, "CPU per reply, session 12")."""
    body = _body_reads(response)
    rest = b""
    done = False
    for data in body:
        if done:
            continue  # read to the end, so the connection goes back to the pool
        lines = (rest + data).replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        rest = lines.pop()  # a line the next read ends
        done = yield from _batch(lines, response)
    if not done and rest:
        yield from _batch([rest], response)  # the body ended without a last newline


def _batch(lines: list[bytes], response: Any) -> Generator[list[dict[str, Any]], None, bool]:
    """Yield the JSON objects of ``lines``' ``data:`` lines as one list; return whether ``[DONE]`` came. The
    objects before a bad line are yielded before its error is raised."""
    chunks: list[dict[str, Any]] = []
    done = False
    try:
        for line in lines:
            if not line.startswith(b"data:"):
                continue  # blank separators, ``event:``/``id:`` fields, ``:`` comments
            data = line[5:].strip()
            if data.startswith(b"[DONE]"):
                done = True
                break
            chunks.append(_chunk(data, response))
    except Exception:
        if chunks:
            yield chunks
        raise
    if chunks:
        yield chunks
    return done


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

    def _request_body(self, request: ChatRequest, **streaming: Any) -> dict[str, Any]:
        """The request's JSON body. It goes through the SDK's plain ``post`` (its requests, auth and HTTP
        errors): the typed ``create`` walks every argument against its type hints (the messages too: ~8 ms
        of CPU per reply, growing with the conversation, docs/benchmarks.md "Serving a cohort"), and builds
        typed objects from the answer, for nothing read here (docs/benchmarks.md, "CPU per reply, session 12")."""
        messages = request.messages
        body: dict[str, Any] = {"model": self.model, "temperature": request.temperature,
                                "max_tokens": request.max_tokens}
        if request.json_mode:
            messages, _ = json_instruction(messages, request.language)
            body["response_format"] = {"type": "json_object"}
        body["messages"] = messages
        body.update(streaming)
        return body

    def complete(self, request: ChatRequest) -> ChatResult:
        started = time.perf_counter()
        try:
            completion = self.client.post(CHAT_PATH, body=self._request_body(request), cast_to=httpx2.Response).json()
        except Exception as exc:
            raise translate_error(exc, secrets=self._secrets) from exc
        choices = completion.get("choices") if isinstance(completion, dict) else None
        if not choices or not isinstance(choices, list) or not isinstance(choices[0], dict):
            raise ProviderError(f"malformed response: expected a chat completion, got {str(completion)[:120]!r}",
                                provider=self.name, kind=MALFORMED_RESPONSE)
        message = choices[0].get("message")
        text = message.get("content") if isinstance(message, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ProviderError("empty completion", provider=self.name, kind=EMPTY_COMPLETION)
        usage = completion.get("usage") if isinstance(completion.get("usage"), dict) else {}
        return ChatResult(
            text=text, provider=self.name, model=self.model,
            prompt_tokens=usage.get("prompt_tokens"), completion_tokens=usage.get("completion_tokens"),
            latency_ms=round((time.perf_counter() - started) * 1000, 1),
            params={**self.request_params(request), "finish_reason": choices[0].get("finish_reason")},
        )

    def stream(self, request: ChatRequest) -> Iterator[str]:
        # The chunks are read as plain JSON, not as the SDK's typed chunk objects: building ~90
        # pydantic objects per reply cost ~45 ms of CPU, three quarters of a streamed reply's
        # platform time under load (docs/benchmarks.md, "Serving a cohort"). Requests, retries of
        # the connection and HTTP errors are still the SDK's.
        self.last_usage = {}
        with ExitStack() as stack:
            try:
                response = self.client.post(CHAT_PATH, body=self._request_body(
                    request, stream=True, stream_options={"include_usage": True}), cast_to=httpx2.Response,
                    stream=True)
            except Exception as exc:
                raise translate_error(exc, secrets=self._secrets) from exc
            stack.callback(response.close)
            finished = False
            yielded = False
            try:
                for chunks in _sse_reads(response):
                    text = []
                    for chunk in chunks:
                        if chunk.get("usage"):
                            self.last_usage = {"prompt_tokens": chunk["usage"].get("prompt_tokens"),
                                               "completion_tokens": chunk["usage"].get("completion_tokens")}
                        for choice in chunk.get("choices") or []:
                            if choice.get("finish_reason"):
                                finished = True
                            content = (choice.get("delta") or {}).get("content")
                            if content:
                                text.append(content)
                    if text:  # one delta per read of the body, however many tokens it brought
                        yielded = True
                        yield "".join(text)
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

