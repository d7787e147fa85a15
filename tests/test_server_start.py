"""`python app.py` (what `make run` starts) comes up offline, prints the first admin password, and serves a
participant end to end over real HTTP. That a later start prints no password is checked by test_console.py,
whose last start is a later start on its database (one server start fewer for the suite)."""
import http.cookiejar
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Browserless:
    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.token = None
        self.timeout = 30.0

    def call(self, method: str, path: str, body=None):
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["X-CSRFToken"] = self.token
        data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
        request = urllib.request.Request(self.base + path, data=data, method=method, headers=headers)
        try:
            with self.opener.open(request, timeout=self.timeout) as response:
                return response.status, json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def stream(self, path: str, body) -> list[tuple[str, dict]]:
        """POST and read a server-sent event stream to its end (served by waitress, as in `make run`)."""
        request = urllib.request.Request(self.base + path, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json", "X-CSRFToken": self.token,
                                                  "Accept": "text/event-stream"})
        with self.opener.open(request, timeout=30) as response:
            assert response.headers["Content-Type"].startswith("text/event-stream")
            return _sse(response.read().decode("utf-8"))


def _sse(raw: str) -> list[tuple[str, dict]]:
    events = []
    for block in raw.strip().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], json.loads(fields["data"])))
    return events


def wait_until_up(api: Browserless, log) -> None:
    deadline = time.time() + 60
    while time.time() < deadline:
        try:
            if api.call("GET", "/healthz")[0] == 200:
                return
        except OSError:
            time.sleep(0.2)
    log.seek(0)
    pytest.fail("server did not come up:\n" + log.read())


@pytest.mark.slow
def test_server_starts_offline_and_serves_a_participant(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PORT=str(port), DATABASE_URL=f"sqlite:///{tmp_path / 'run.db'}", PILOT_DAY_SECONDS="60",
               SECRET_KEY="server-start-test", SCHEDULER_ENABLED="1", LLM_PROVIDERS="offline",
               EMBEDDING_PROVIDER="offline", PYTHONUNBUFFERED="1")
    # Task timers at 0.02 real s per study s: the chat lasts 18 s (a slow first reply on a busy machine
    # must not close it) and Finish is allowed after 0.6 s.
    study_file = tmp_path / "study.json"
    study_file.write_text('{"timing": {"min_active_seconds": 30}}')
    env.update(PILOT_TIMER_SCALE="0.02", STUDY_CONFIG=str(study_file))
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        api = Browserless(f"http://127.0.0.1:{port}")
        wait_until_up(api, log)
        log.seek(0)
        output = log.read()
        assert "First start: created admin 'admin' with password:" in output
        assert "pilot mode" in output
        status, body = api.call("GET", "/api/auth/csrf")
        api.token = body["csrf_token"]
        status, body = api.call("POST", "/api/auth/register",
                                {"username": "live01", "password": "password-123", "consent": True})
        assert status == 201, body
        api.token = body["csrf_token"]
        assert api.call("POST", "/api/tasks/T1/start")[0] == 201
        status, body = api.call("POST", "/api/tasks/T1/messages", {"content": "你好，我叫小周。"})
        assert status == 201, body
        assert body["reply"]["content"]
        events = api.stream("/api/tasks/T1/messages?stream=1", {"content": "我喜欢爬山。"})
        assert [name for name, _ in events][0] == "message" and events[-1][0] == "reply"
        assert "".join(data["text"] for name, data in events if name == "delta") == events[-1][1]["content"]
        time.sleep(0.8)  # the minimum, 30 study seconds, is 0.6 real seconds
        status, body = api.call("POST", "/api/tasks/T1/finish")
        assert status == 200, body
        assert body["task"]["phase"] == "questionnaire"
    finally:
        proc.terminate()
        proc.wait(timeout=20)
