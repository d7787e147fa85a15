"""The bot participants: each registers, starts T1 and sends its messages (JSON or streamed), resending with
its idempotency key after a 502/503/504 or a cut connection; ``Results`` counts what they saw."""
from __future__ import annotations

import http.client
import random
import secrets
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from scripts.load_bots.client import Client

# a message whose answer was lost or refused for now (a 503 with Retry-After, a cut connection) is sent
# again with its idempotency key, this many times in all: the server stores it once and answers it once
SEND_ATTEMPTS = 5
# sent again after Retry-After: 503 (back-pressure), and a load balancer's 502/504 (the host it chose went away
# mid-request: the message, if stored, is answered once under its idempotency key)
RETRYABLE = (502, 503, 504)
SLOW_SECONDS = 20.0
TEXTS = ["你好，我最近在准备考试，压力有点大。", "我晚上经常睡不好，有什么建议吗？", "我喜欢跑步，但是最近没有时间。",
         "我对海鲜过敏，周末想请朋友吃饭。", "我在考虑换一份工作，你觉得要注意什么？", "谢谢，你说的很有帮助。"]


@dataclass
class Results:
    lock: threading.Lock = field(default_factory=threading.Lock)
    latency: dict[str, list[float]] = field(default_factory=lambda: {"json": [], "sse": []})
    timeline: list[tuple[float, float]] = field(default_factory=list)  # (sent at, latency), monotonic
    first_delta: list[float] = field(default_factory=list)
    task_start: list[float] = field(default_factory=list)  # seconds for POST /api/tasks/T1/start
    errors: Counter = field(default_factory=Counter)
    registered: int = 0
    register_seconds: list[float] = field(default_factory=list)
    sent: int = 0
    acknowledged: int = 0
    replies: int = 0
    retried: int = 0  # messages sent again (same idempotency key) after a 503, an error event or a cut
    retry_causes: Counter = field(default_factory=Counter)  # what each resend answered (not errors: retried)
    slow: list[dict] = field(default_factory=list)  # the first messages that took over SLOW_SECONDS, attempt by attempt

    def retry(self, cause: str) -> None:
        with self.lock:
            self.retry_causes[cause] += 1

    def add(self, **counts: int) -> None:
        with self.lock:
            for name, n in counts.items():
                setattr(self, name, getattr(self, name) + n)

    def error(self, kind: str) -> None:
        with self.lock:
            self.errors[kind] += 1


class Bot:
    def __init__(self, index: int, args, base: str, prefix: str, results: Results, class_ready: threading.Barrier,
                 deadline: float) -> None:
        self.index, self.args, self.results = index, args, results
        self.username = f"{prefix}{index:03d}"
        self.client = Client(base)
        self.class_ready, self.deadline = class_ready, deadline
        self.random = random.Random(index)

    def run(self, start_at: float) -> None:
        try:
            time.sleep(max(0.0, start_at - time.monotonic()))
            registered = self.register()
        except Exception as exc:  # one bot's failure is counted, the class goes on
            self.results.error(f"register:{type(exc).__name__}")
            registered = False
        try:
            self.class_ready.wait(timeout=max(1.0, self.deadline - time.monotonic()))
        except threading.BrokenBarrierError:
            pass
        if registered:
            try:
                self.chat()
            except Exception as exc:
                self.results.error(f"chat:{type(exc).__name__}")

    def register(self) -> bool:
        status, body = self._call_retrying("csrf", "/api/auth/csrf", method="GET")
        if status != 200:  # without the token (and its session cookie) the registration would be refused
            self.results.error(f"csrf:{status}:{body.get('error')}")
            return False
        started = time.monotonic()
        status, body = self._call_retrying("register", "/api/auth/register", {
            "username": self.username, "password": f"load-{self.username}-pw", "consent": True})
        if status != 201:
            self.results.error(f"register:{status}:{body.get('error')}")
            return False
        with self.results.lock:
            self.results.registered += 1
            self.results.register_seconds.append(time.monotonic() - started)
        return True

    def chat(self) -> None:
        started = time.monotonic()
        status, body = self._call_retrying("start", "/api/tasks/T1/start")
        with self.results.lock:
            self.results.task_start.append(time.monotonic() - started)
        if status != 201:
            self.results.error(f"start:{status}:{body.get('error')}")
            return
        time.sleep(self.random.uniform(0, self.args.think))  # the class does not type in lockstep
        for number in range(self.args.messages):
            if time.monotonic() > self.deadline:
                self.results.error("deadline")
                return
            path = "sse" if (self.index + number) % 2 else "json"
            self.send(number, path)
            time.sleep(self.args.think * self.random.uniform(0.8, 1.2))

    def _call_retrying(self, what: str, path: str, body: Any = None, method: str = "POST") -> tuple[int, dict]:
        """A 503 (back-pressure: nothing was saved) is sent again after its Retry-After."""
        for attempt in range(SEND_ATTEMPTS):
            status, answer = self.client.call(method, path, body)
            if status not in RETRYABLE or attempt == SEND_ATTEMPTS - 1:
                return status, answer
            self.results.retry(f"{what}:{status}")
            time.sleep(self.client.retry_after or 2.0)
        return status, answer

    def send(self, number: int, path: str) -> None:
        """One message, sent again with its idempotency key until it is answered (or SEND_ATTEMPTS)."""
        text = f"{TEXTS[(self.index + number) % len(TEXTS)]}（{number + 1}）"
        key = {"Idempotency-Key": secrets.token_hex(16)}
        self.results.add(sent=1)
        started = time.monotonic()
        acknowledged = ok = False
        trace = []  # (seconds since the first attempt, what the attempt got), for the slowest messages
        for attempt in range(SEND_ATTEMPTS):
            if attempt:
                self.results.add(retried=1)
                time.sleep(self.client.retry_after or 2.0)
            try:
                status, ok, stored = self._attempt(path, text, key)
            except (OSError, http.client.HTTPException) as exc:  # a cut connection: the answer is lost
                self.client.conn = None
                self.results.retry(f"{path}:{type(exc).__name__}")
                trace.append((round(time.monotonic() - started, 1), type(exc).__name__))
                continue
            trace.append((round(time.monotonic() - started, 1), status if ok or path == "json" else f"{status}:cut"))
            acknowledged = acknowledged or stored
            if ok or status not in (200, 201, *RETRYABLE):
                break
            self.results.retry(f"{path}:{status}")
        elapsed = time.monotonic() - started
        if elapsed > SLOW_SECONDS and len(self.results.slow) < 30:
            self.results.slow.append({"path": path, "seconds": round(elapsed, 1), "attempts": trace})
        self.results.add(acknowledged=int(acknowledged), replies=int(ok))
        if ok:
            with self.results.lock:
                self.results.latency[path].append(elapsed)
                self.results.timeline.append((started, elapsed))
        else:
            self.results.error(f"{path}:unanswered")

    def _attempt(self, path: str, text: str, key: dict[str, str]) -> tuple[int, bool, bool]:
        """(status, answered, the message is stored)."""
        if path == "json":
            status, body = self.client.call("POST", "/api/tasks/T1/messages", {"content": text}, key)
            stored = status == 201 or bool(status == 503 and body.get("details", {}).get("message_id"))
            return status, bool(status == 201 and body.get("reply", {}).get("content")), stored
        status, events, first = self.client.stream("/api/tasks/T1/messages?stream=1", {"content": text}, key)
        names = [name for name, _ in events]
        if first is not None:
            with self.results.lock:
                self.results.first_delta.append(first)
        if names and names[-1] == "error":
            self.client.retry_after = events[-1][1].get("retry_after_seconds")
            return 503, False, "message" in names
        if not names or names[-1] != "reply":  # cut short (the host went away): this connection is done
            self.client.conn.close()
            self.client.conn = None
        return status, bool(names) and names[-1] == "reply", "message" in names
