"""Local HTTP servers that speak the OpenAI and DashScope wire formats, with scripted faults.

The provider tests drive the real ``openai`` and ``dashscope`` SDKs against these
servers (127.0.0.1, an ephemeral port, one thread per connection), so what is
tested is the SDK's own request building, SSE parsing and error mapping plus our
handling of it - nothing is mocked.

Embeddings are fake, deterministic vectors unless a server is given a real model
(``model_embedder``, e.g. the offline e5): then it serves that model's vectors, so
a calibration fit through the wire format means something.

Each request takes the next scripted ``Fault`` (``server.script(...)``); once the
script is used up every request succeeds. Every request is recorded (path,
headers, JSON body) so tests can assert on what the client actually sent.

Formats spoken:

* OpenAI ``POST /v1/chat/completions`` (plain and ``stream: true`` SSE ending in
  ``data: [DONE]``, with a usage chunk when ``stream_options.include_usage``),
  ``POST /v1/embeddings`` (``encoding_format`` float or base64).
* DashScope ``POST /api/v1/services/aigc/text-generation/generation`` (plain and
  SSE with ``id:``/``event:result``/``:HTTP_STATUS/200``/``data:`` records, as
  the ``X-DashScope-SSE: enable`` header asks) and
  ``POST /api/v1/services/embeddings/text-embedding/text-embedding``.
"""
from __future__ import annotations

import base64
import hashlib
import json
import struct
import sys
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DEFAULT_REPLY = "你好，很高兴认识你。今天过得怎么样？"
PROMPT_TOKENS = 42
COMPLETION_TOKENS = 17
EMBEDDING_DIM = 8


@dataclass(frozen=True)
class Fault:
    """What the server does with one request.

    kind: ``ok`` | ``timeout`` (stall ``seconds`` before answering, past the client's
    timeout) | ``status`` (HTTP ``status`` with an error body, optional ``retry_after``
    header) | ``malformed`` (HTTP 200 whose JSON body, or first SSE record, does not
    parse) | ``cut_mid`` (connection dropped after two text deltas, or halfway through
    a plain body) | ``cut_before_first`` (headers sent, then dropped before any data) |
    ``empty`` (a well-formed completion with no text).
    """

    kind: str = "ok"
    status: int = 500
    retry_after: str | None = None
    seconds: float = 3.0
    message: str | None = None  # error text in the body (e.g. one that echoes the caller's key)


def ok() -> Fault:
    return Fault("ok")


# Client timeout used by the provider tests: generous, because a loaded 2-core machine can take
# more than half a second to answer even a canned response; a hung server outlasts it.
CLIENT_TIMEOUT = 2.0
HANG_SECONDS = 4.0


def timeout(seconds: float = HANG_SECONDS) -> Fault:
    return Fault("timeout", seconds=seconds)


def status(code: int, retry_after: str | None = None, message: str | None = None) -> Fault:
    return Fault("status", status=code, retry_after=retry_after, message=message)


def rate_limited(retry_after: str | None = "2") -> Fault:
    return Fault("status", status=429, retry_after=retry_after)


def malformed() -> Fault:
    return Fault("malformed")


def cut_mid() -> Fault:
    return Fault("cut_mid")


def cut_before_first() -> Fault:
    return Fault("cut_before_first")


def empty() -> Fault:
    return Fault("empty")


@dataclass(frozen=True)
class Latency:
    """A model's own timing, for load tests: the first token after ``first_token`` seconds, then
    ``tokens`` tokens at ``tokens_per_second`` (the reply ends at first_token + tokens/rate).
    A plain (non-streaming) completion arrives whole at that same end time."""

    first_token: float = 0.8
    tokens: int = 88
    tokens_per_second: float = 40.0

    @property
    def total(self) -> float:
        return self.first_token + self.tokens / self.tokens_per_second

    def text(self) -> list[str]:
        """One short piece of reply per token (one Chinese character each)."""
        source = "好的，我明白你的意思。我们可以一起想想办法，看看哪一种安排最适合你现在的情况。"
        return [source[i % len(source)] for i in range(self.tokens)]


@dataclass
class ReceivedRequest:
    path: str
    headers: dict[str, str]  # lower-case names
    body: Any
    fault: Fault = field(default_factory=ok)


def fake_embedding(text: str, dim: int = EMBEDDING_DIM) -> list[float]:
    """Deterministic, deliberately un-normalised vector for a text (so normalisation is tested)."""
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return [round((digest[i] - 127.5) / 10.0, 4) for i in range(dim)]


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, like a real API front end
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - signature fixed by the stdlib
        pass

    def do_POST(self) -> None:  # noqa: N802 - stdlib naming
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw.decode("utf-8")) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        wire = self.server.wire
        fault = wire.next_fault()
        wire.record(ReceivedRequest(path=self.path, headers={k.lower(): v for k, v in self.headers.items()},
                                    body=body, fault=fault))
        if fault.kind == "timeout":
            # Wake early when the server is closed so no thread outlives the test module.
            wire.stopped.wait(fault.seconds)
        try:
            wire.handle(self, body if isinstance(body, dict) else {}, fault)
        except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout), as intended
            self.close_connection = True

    # -- small writers used by the wire formats ------------------------------------------------

    def send_json(self, status_code: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        self.send_raw(status_code, data, "application/json", headers)

    def send_raw(self, status_code: int, data: bytes, content_type: str,
                 headers: dict[str, str] | None = None) -> None:
        self.send_response(status_code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()

    def send_truncated(self, status_code: int, data: bytes, content_type: str) -> None:
        """Promise the whole body, send half of it, drop the connection."""
        self.send_response(status_code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data[: len(data) // 2])
        self.wfile.flush()
        self.close_connection = True

    def start_chunked(self, content_type: str) -> None:
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.flush()

    def write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode("ascii") + data + b"\r\n")
        self.wfile.flush()

    def end_chunked(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def drop(self) -> None:
        """Close without the terminating chunk: the client sees an incomplete body."""
        self.wfile.flush()
        self.close_connection = True


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # a load test opens hundreds of connections at once
    block_on_close = False
    wire: WireServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients drop keep-alive sockets and give up on stalled requests; that is the point.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class WireServer:
    """Base: lifecycle, fault script, request log. Subclasses implement ``handle``."""

    prefix = ""

    def __init__(self, reply: str = DEFAULT_REPLY, *, embedding_dim: int = EMBEDDING_DIM,
                 latency: Latency | None = None, model_embedder: Any = None) -> None:
        self.reply = self._initial_reply = reply
        self.embedding_dim = embedding_dim
        # A real embedding model behind the wire (``embed_queries`` / ``embed_passages``, e.g. the offline e5):
        # the vectors a lab's remote embedder would send, so a fit over them means something. None: fake ones.
        self.model_embedder = model_embedder
        self.latency = latency
        self.chat_seconds: list[float] = []  # the model's own time per chat completion (latency mode)
        self.received: list[ReceivedRequest] = []
        self.stopped = threading.Event()
        self._script: deque[Fault] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.wire = self
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"{type(self).__name__}", daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self._server.server_address[1]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{self.prefix}"

    def script(self, *faults: Fault) -> None:
        """Faults for the next requests, in order; afterwards every request succeeds."""
        with self._lock:
            self._script.extend(faults)

    def reset(self) -> None:
        """Forget the script, the request log and any reply a test set."""
        with self._lock:
            self._script.clear()
            self.received.clear()
            self.reply = self._initial_reply

    def next_fault(self) -> Fault:
        with self._lock:
            return self._script.popleft() if self._script else ok()

    def record(self, request: ReceivedRequest) -> None:
        with self._lock:
            self.received.append(request)

    def requests_to(self, suffix: str) -> list[ReceivedRequest]:
        with self._lock:
            return [r for r in self.received if r.path.split("?")[0].endswith(suffix)]

    def close(self) -> None:
        self.stopped.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> WireServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def deltas(self) -> list[str]:
        """The reply in the small pieces a streaming server sends."""
        return [self.reply[i:i + 4] for i in range(0, len(self.reply), 4)]

    def handle(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        raise NotImplementedError


class OpenAIWireServer(WireServer):
    """OpenAI chat completions and embeddings, as DeepSeek, vLLM, Ollama and llama.cpp serve them."""

    prefix = "/v1"

    def handle(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        path = h.path.split("?")[0]
        if path == "/v1/chat/completions" and self.latency is not None and fault.kind == "ok":
            self._timed_chat(h, body, self.latency)
        elif path == "/v1/chat/completions":
            self._chat(h, body, fault)
        elif path == "/v1/embeddings":
            self._embeddings(h, body, fault)
        else:
            h.send_json(404, {"error": {"message": f"no route {path}", "type": "invalid_request_error"}})

    @staticmethod
    def _error(h: _Handler, fault: Fault) -> None:
        kinds = {400: "invalid_request_error", 401: "authentication_error", 429: "rate_limit_error"}
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        h.send_json(fault.status, {"error": {"message": fault.message or f"injected HTTP {fault.status}",
                                             "type": kinds.get(fault.status, "server_error"),
                                             "code": None, "param": None}}, headers)

    def _chat(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        model = body.get("model", "unknown")
        if fault.kind == "status":
            return self._error(h, fault)
        if body.get("stream"):
            return self._chat_stream(h, body, model, fault)
        text = "" if fault.kind == "empty" else self.reply
        payload = {
            "id": "chatcmpl-local", "object": "chat.completion", "created": 1767225600, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop",
                         "logprobs": None}],
            "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                      "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS},
        }
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        if fault.kind == "malformed":
            return h.send_raw(200, data[: len(data) // 3], "application/json")
        if fault.kind in ("cut_mid", "cut_before_first"):
            return h.send_truncated(200, data, "application/json")
        h.send_raw(200, data, "application/json")

    def _chat_stream(self, h: _Handler, body: dict[str, Any], model: str, fault: Fault) -> None:
        def chunk(delta: dict[str, Any], finish: str | None, usage: dict[str, int] | None = None,
                  choices: bool = True) -> bytes:
            payload = {"id": "chatcmpl-local", "object": "chat.completion.chunk", "created": 1767225600,
                       "model": model,
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if choices else [],
                       "usage": usage}
            return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"

        h.start_chunked("text/event-stream; charset=utf-8")
        if fault.kind == "cut_before_first":
            return h.drop()
        if fault.kind == "malformed":
            h.write_chunk(b'data: {"id": "chatcmpl-local", "choices": [\n\n')
            h.write_chunk(b"data: [DONE]\n\n")
            return h.end_chunked()
        h.write_chunk(chunk({"role": "assistant", "content": ""}, None))
        pieces = [] if fault.kind == "empty" else self.deltas()
        for number, piece in enumerate(pieces):
            if fault.kind == "cut_mid" and number == 2:
                return h.drop()
            h.write_chunk(chunk({"content": piece}, None))
        h.write_chunk(chunk({}, "stop"))
        if (body.get("stream_options") or {}).get("include_usage"):
            h.write_chunk(chunk({}, None, {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS,
                                           "total_tokens": PROMPT_TOKENS + COMPLETION_TOKENS}, choices=False))
        h.write_chunk(b"data: [DONE]\n\n")
        h.end_chunked()

    def _timed_chat(self, h: _Handler, body: dict[str, Any], latency: Latency) -> None:
        """A completion that takes the model's time: first token, then tokens at a steady rate."""
        import time

        started = time.monotonic()
        model = body.get("model", "unknown")
        pieces = latency.text()
        usage = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": latency.tokens,
                 "total_tokens": PROMPT_TOKENS + latency.tokens}

        def wait_until(offset: float) -> None:
            delay = started + offset - time.monotonic()
            if delay > 0:
                time.sleep(delay)

        if not body.get("stream"):
            wait_until(latency.total)
            h.send_json(200, {"id": "chatcmpl-local", "object": "chat.completion", "created": 1767225600,
                              "model": model, "usage": usage,
                              "choices": [{"index": 0, "finish_reason": "stop", "logprobs": None,
                                           "message": {"role": "assistant", "content": "".join(pieces)}}]})
        else:
            def chunk(delta: dict[str, Any], finish: str | None, extra: dict[str, Any] | None = None) -> bytes:
                payload = {"id": "chatcmpl-local", "object": "chat.completion.chunk", "created": 1767225600,
                           "model": model, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                           **(extra or {})}
                return b"data: " + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n"

            h.start_chunked("text/event-stream; charset=utf-8")
            wait_until(latency.first_token)
            h.write_chunk(chunk({"role": "assistant", "content": ""}, None))
            for number, piece in enumerate(pieces, start=1):
                wait_until(latency.first_token + number / latency.tokens_per_second)
                h.write_chunk(chunk({"content": piece}, None))
            h.write_chunk(chunk({}, "stop", {"usage": usage}))
            h.write_chunk(b"data: [DONE]\n\n")
            h.end_chunked()
        with self._lock:
            self.chat_seconds.append(time.monotonic() - started)

    def _embeddings(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        if fault.kind == "status":
            return self._error(h, fault)
        texts = body.get("input")
        texts = [texts] if isinstance(texts, str) else list(texts or [])
        as_base64 = body.get("encoding_format") == "base64"
        data = []
        for index, text in enumerate(texts):
            vector = fake_embedding(text, self.embedding_dim)
            encoded: Any = (base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode("ascii")
                            if as_base64 else vector)
            data.append({"object": "embedding", "index": index, "embedding": encoded})
        data.reverse()  # servers may answer out of order; clients must sort by index
        payload = {"object": "list", "data": data, "model": body.get("model"),
                   "usage": {"prompt_tokens": sum(len(t) for t in texts), "total_tokens": sum(len(t) for t in texts)}}
        raw = json.dumps(payload).encode("utf-8")
        if fault.kind == "malformed":
            return h.send_raw(200, raw[: len(raw) // 3], "application/json")
        if fault.kind in ("cut_mid", "cut_before_first"):
            return h.send_truncated(200, raw, "application/json")
        h.send_raw(200, raw, "application/json")


class DashScopeWireServer(WireServer):
    """DashScope native text-generation and text-embedding, as ``dashscope`` 2.x calls them over HTTP."""

    prefix = "/api/v1"
    GENERATION = "/api/v1/services/aigc/text-generation/generation"
    EMBEDDING = "/api/v1/services/embeddings/text-embedding/text-embedding"

    def handle(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        path = h.path.split("?")[0]
        if path == self.GENERATION:
            self._generation(h, body, fault)
        elif path == self.EMBEDDING:
            self._embedding(h, body, fault)
        else:
            h.send_json(404, {"code": "NotFound", "message": f"no route {path}", "request_id": "local"})

    @staticmethod
    def _error(h: _Handler, fault: Fault) -> None:
        codes = {400: "InvalidParameter", 401: "InvalidApiKey", 429: "Throttling.RateQuota",
                 500: "InternalError", 503: "ServiceUnavailable"}
        headers = {"Retry-After": fault.retry_after} if fault.retry_after is not None else {}
        h.send_json(fault.status, {"code": codes.get(fault.status, "InternalError"),
                                   "message": fault.message or f"injected HTTP {fault.status}",
                                   "request_id": "local-error"},
                    headers)

    @staticmethod
    def _usage(output_tokens: int) -> dict[str, int]:
        return {"input_tokens": PROMPT_TOKENS, "output_tokens": output_tokens,
                "total_tokens": PROMPT_TOKENS + output_tokens}

    def _generation(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        if fault.kind == "status":
            return self._error(h, fault)
        if h.headers.get("X-DashScope-SSE", "").lower() == "enable":
            return self._generation_stream(h, body, fault)
        text = "" if fault.kind == "empty" else self.reply
        payload = {"output": {"choices": [{"finish_reason": "stop",
                                           "message": {"role": "assistant", "content": text}}]},
                   "usage": self._usage(COMPLETION_TOKENS), "request_id": "local-1"}
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        if fault.kind == "malformed":
            return h.send_raw(200, data[: len(data) // 3], "application/json")
        if fault.kind in ("cut_mid", "cut_before_first"):
            return h.send_truncated(200, data, "application/json")
        h.send_raw(200, data, "application/json")

    def _generation_stream(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        incremental = bool((body.get("parameters") or {}).get("incremental_output"))

        def record(number: int, content: str, finish: str, output_tokens: int) -> bytes:
            payload = {"output": {"choices": [{"message": {"content": content, "role": "assistant"},
                                               "finish_reason": finish}]},
                       "usage": self._usage(output_tokens), "request_id": "local-1"}
            return (f"id:{number}\nevent:result\n:HTTP_STATUS/200\ndata:".encode()
                    + json.dumps(payload, ensure_ascii=False).encode("utf-8") + b"\n\n")

        h.start_chunked("text/event-stream;charset=UTF-8")
        if fault.kind == "cut_before_first":
            return h.drop()
        if fault.kind == "malformed":
            h.write_chunk(b'id:1\nevent:result\n:HTTP_STATUS/200\ndata:{"output": {"choices": [\n\n')
            return h.end_chunked()
        pieces = [""] if fault.kind == "empty" else self.deltas()
        so_far = ""
        for number, piece in enumerate(pieces, start=1):
            if fault.kind == "cut_mid" and number == 3:
                return h.drop()
            so_far += piece
            last = number == len(pieces)
            tokens = COMPLETION_TOKENS if last else number
            h.write_chunk(record(number, piece if incremental else so_far, "stop" if last else "null", tokens))
        h.end_chunked()

    def _embedding(self, h: _Handler, body: dict[str, Any], fault: Fault) -> None:
        if fault.kind == "status":
            return self._error(h, fault)
        texts = list(((body.get("input") or {}).get("texts")) or [])
        if self.model_embedder is not None and texts:
            query = (body.get("parameters") or {}).get("text_type") == "query"
            encode = self.model_embedder.embed_queries if query else self.model_embedder.embed_passages
            vectors = [[float(x) for x in row] for row in encode(texts)]
        else:
            vectors = [fake_embedding(t, self.embedding_dim) for t in texts]
        embeddings = [{"text_index": i, "embedding": vector} for i, vector in enumerate(vectors)]
        embeddings.reverse()  # the API does not promise order; clients sort by text_index
        payload = {"output": {"embeddings": embeddings},
                   "usage": {"total_tokens": sum(len(t) for t in texts)}, "request_id": "local-emb"}
        raw = json.dumps(payload).encode("utf-8")
        if fault.kind == "malformed":
            return h.send_raw(200, raw[: len(raw) // 3], "application/json")
        if fault.kind in ("cut_mid", "cut_before_first"):
            return h.send_truncated(200, raw, "application/json")
        h.send_raw(200, raw, "application/json")
