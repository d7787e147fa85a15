"""A graceful stop of `make serve` (SIGTERM to its main process), in a real process on 127.0.0.1: /readyz
turns 503 at once while the instance still serves (the drain), a streamed reply in flight finishes with
its ``reply`` event, the message and its reply are stored once, then the process takes no new connection
and exits within its bounds."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from sqlalchemy import func, select

from database.models import Message
from tests.test_server_start import ROOT, Browserless, _sse, free_port, wait_until_up
from tests.wire_servers import Latency, OpenAIWireServer

pytestmark = [pytest.mark.postgres, pytest.mark.slow]  # a real `make serve` process: ~20 s

DRAIN = 2.0
MODEL = Latency(first_token=0.5, tokens=40, tokens_per_second=8.0)  # a 5.5 s streamed reply


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def _stream(api: Browserless, out: list, first_delta: threading.Event) -> None:
    request = urllib.request.Request(api.base + "/api/tasks/T1/messages?stream=1",
                                     data=json.dumps({"content": "我最近在准备考试。"}).encode(), method="POST",
                                     headers={"Content-Type": "application/json", "X-CSRFToken": api.token,
                                              "Accept": "text/event-stream", "Idempotency-Key": "drain-test-1"})
    raw = b""
    with api.opener.open(request, timeout=60) as response:
        while chunk := response.read1(4096):
            raw += chunk
            if b"event: delta" in raw:
                first_delta.set()
    out.extend(_sse(raw.decode("utf-8")))


def test_sigterm_drains_then_stops_gracefully(database, tmp_path):
    if not database.url.startswith("postgresql"):
        pytest.skip("make serve runs on PostgreSQL; runs in the PostgreSQL pass")
    model = OpenAIWireServer(latency=MODEL)
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(DATABASE_URL=database.url, SECRET_KEY="drain-test", SESSION_COOKIE_SECURE="0", WEB_WORKERS="1",
               WEB_THREADS="8", PORT=str(port), DRAIN_SECONDS=str(DRAIN), LLM_PROVIDERS="openai_compatible",
               OPENAI_BASE_URL=model.url, OPENAI_API_KEY="local-test", OPENAI_CHAT_MODEL="loopback",
               EMBEDDING_PROVIDER="offline", CONSOLIDATION_PROVIDERS="offline", PYTHONUNBUFFERED="1")
    database.dispose()
    log = open(tmp_path / "serve.log", "w+")
    proc = subprocess.Popen([sys.executable, "scripts/serve.py"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        api = Browserless(base)
        wait_until_up(api, log)
        assert _status(base + "/readyz") == 200
        status, body = api.call("GET", "/api/auth/csrf")
        api.token = body["csrf_token"]
        status, body = api.call("POST", "/api/auth/register",
                                {"username": "drainer", "password": "password-123", "consent": True})
        assert status == 201, body
        api.token = body.get("csrf_token", api.token)
        assert api.call("POST", "/api/tasks/T1/start")[0] == 201

        events: list = []
        first_delta = threading.Event()
        streaming = threading.Thread(target=_stream, args=(api, events, first_delta))
        streaming.start()
        assert first_delta.wait(20), "the reply never began to stream"
        os.kill(proc.pid, signal.SIGTERM)
        stopped_at = time.monotonic()
        deadline = stopped_at + DRAIN / 2
        while _status(base + "/readyz") != 503:  # at once: the balancer stops sending
            assert time.monotonic() < deadline, "readiness did not turn 503 at once"
            time.sleep(0.05)
        assert _status(base + "/healthz") == 200  # still serving while it drains
        streaming.join(30)
        assert not streaming.is_alive()
        assert [name for name, _ in events][0] == "message" and events[-1][0] == "reply", events[-3:]
        assert proc.wait(timeout=30) == 0
        assert time.monotonic() - stopped_at >= DRAIN  # it kept serving for the drain
        with pytest.raises(OSError):  # then takes no new request
            urllib.request.urlopen(base + "/healthz", timeout=3)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        model.close()
    with database.Session() as session:
        rows = session.execute(select(Message.role, func.count()).group_by(Message.role)).all()
    assert dict(rows) == {"user": 1, "assistant": 1}  # stored once, answered once, nothing half-written
    log.seek(0)
    assert "draining for 2 s" in log.read()
