"""Idle or slow clients cannot lock a class out: with 300 connections open and silent (or stuck
half-way through their request headers), a new participant is still answered within a second.

The server is started exactly as `make run` starts it (python app.py, waitress)."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import pytest

from tests.test_server_start import ROOT, Browserless, free_port, wait_until_up

IDLE = 300


def _open_idle(port: int, count: int) -> list[socket.socket]:
    sockets = []
    for number in range(count):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        if number % 3 == 0:  # a slow client: part of a request line, then nothing
            s.sendall(b"GET /api/auth/csrf HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        sockets.append(s)
    return sockets


@pytest.mark.slow
def test_three_hundred_idle_connections_do_not_stop_a_new_participant(tmp_path):
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PORT=str(port), DATABASE_URL=f"sqlite:///{tmp_path / 'idle.db'}", SECRET_KEY="idle-test",
               SCHEDULER_ENABLED="0", LLM_PROVIDERS="offline", EMBEDDING_PROVIDER="offline", PYTHONUNBUFFERED="1")
    log = open(tmp_path / "server.log", "w+")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    idle: list[socket.socket] = []
    try:
        api = Browserless(f"http://127.0.0.1:{port}")
        wait_until_up(api, log)
        assert api.call("GET", "/api/auth/csrf")[0] == 200  # warm: the first request loads what it needs
        idle = _open_idle(port, IDLE)
        time.sleep(0.5)  # the server has accepted them all by now
        newcomer = Browserless(f"http://127.0.0.1:{port}")
        newcomer.timeout = 1.0
        status, body = newcomer.call("GET", "/api/auth/csrf")
        assert status == 200 and body["csrf_token"]
        # the idle connections are still open (not simply dropped to make room)
        still_open = sum(1 for s in idle if _is_open(s))
        assert still_open == IDLE
    finally:
        for s in idle:
            s.close()
        proc.terminate()
        proc.wait(timeout=20)


def _is_open(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) != b""
    except BlockingIOError:
        return True  # nothing to read and not closed
    except OSError:
        return False
    finally:
        s.setblocking(True)
