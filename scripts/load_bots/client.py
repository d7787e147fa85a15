"""A bot's HTTP client: one keep-alive connection, a cookie, the CSRF header; 127.0.0.1 only."""
from __future__ import annotations

import http.client
import json
import time
from typing import Any


class Client:
    def __init__(self, base: str, timeout: float = 120.0) -> None:
        host, port = base.removeprefix("http://").rstrip("/").split(":")
        if host not in ("127.0.0.1", "localhost"):
            raise SystemExit("the load test only sends traffic to 127.0.0.1")
        self.host, self.port, self.timeout = host, int(port), timeout
        self.conn: http.client.HTTPConnection | None = None
        self.cookie: str | None = None
        self.token: str | None = None
        self.retry_after: float | None = None  # the last answer's Retry-After, seconds

    def _send(self, method: str, path: str, body: Any, accept: str,
              extra: dict[str, str] | None = None) -> http.client.HTTPResponse:
        headers = {"Accept": accept, "Content-Type": "application/json", **(extra or {})}
        if self.cookie:
            headers["Cookie"] = self.cookie
        if self.token:
            headers["X-CSRFToken"] = self.token
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        for attempt in (0, 1):  # a kept-alive connection the server closed while idle: reconnect once
            if self.conn is None:
                self.conn = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
            try:
                self.conn.request(method, path, body=data, headers=headers)
                response = self.conn.getresponse()
                break
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.conn.close()
                self.conn = None
                if attempt:
                    raise
        self.retry_after = None
        for name, value in response.getheaders():
            if name.lower() == "set-cookie" and value.startswith("session="):
                self.cookie = value.split(";", 1)[0]
            elif name.lower() == "retry-after" and value.isdigit() and response.status in (429, 503):
                # (the rate limiter's headers carry a Retry-After on every answer: the window's reset, not a wait)
                self.retry_after = float(value)
        return response

    def call(self, method: str, path: str, body: Any = None,
             headers: dict[str, str] | None = None) -> tuple[int, dict]:
        response = self._send(method, path, body, "application/json", headers)
        raw = response.read()
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:  # not the platform's JSON (a proxy's own page): the status says what happened
            payload = {"error": "not_json", "body": raw[:200].decode("utf-8", "replace")}
        if isinstance(payload, dict) and payload.get("csrf_token"):
            self.token = payload["csrf_token"]
        return response.status, payload

    def stream(self, path: str, body: Any,
               headers: dict[str, str] | None = None) -> tuple[int, list[tuple[str, dict]], float | None]:
        """POST and read an SSE stream; returns (status, events, seconds to the first delta)."""
        started = time.monotonic()
        response = self._send("POST", path, body, "text/event-stream", headers)
        if response.status != 201 and response.status != 200:
            response.read()
            return response.status, [], None
        events, name, first = [], None, None
        while True:
            line = response.readline()
            if not line:
                break
            line = line.decode("utf-8").rstrip("\n")
            if line.startswith("event: "):
                name = line[7:]
            elif line.startswith("data: ") and name:
                events.append((name, json.loads(line[6:])))
                if name == "delta" and first is None:
                    first = time.monotonic() - started
        return response.status, events, first
