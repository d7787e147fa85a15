"""The load test's bot participants and harness (``scripts/load_test.py`` is the entry point, with the usage).

It imports nothing from the platform: the bots speak HTTP only, the loopback model is tests/wire_servers.py
in its own process, and the platform is a subprocess started as `make run` or `make serve` starts it.
"""
from __future__ import annotations

import http.client
import json
import multiprocessing
import os
import random
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
# The loopback model server lives in tests/ (tests/wire_servers.py), which the editable install of
# the project does not include.
sys.path.insert(0, str(ROOT))

MAX_PARTICIPANTS = 1000
# a message whose answer was lost or refused for now (a 503 with Retry-After, a cut connection) is sent
# again with its idempotency key, this many times in all: the server stores it once and answers it once
SEND_ATTEMPTS = 5
MAX_MESSAGES = 20
# sent again after Retry-After: 503 (back-pressure), and a load balancer's 502/504 (the host it chose went away
# mid-request: the message, if stored, is answered once under its idempotency key)
RETRYABLE = (502, 503, 504)
SLOW_SECONDS = 20.0
TEXTS = ["你好，我最近在准备考试，压力有点大。", "我晚上经常睡不好，有什么建议吗？", "我喜欢跑步，但是最近没有时间。",
         "我对海鲜过敏，周末想请朋友吃饭。", "我在考虑换一份工作，你觉得要注意什么？", "谢谢，你说的很有帮助。"]


# -- the model: a latency-shaped OpenAI-compatible server in its own process ----------------------------


def _model_process(latency: dict[str, float], conn) -> None:
    from tests.wire_servers import Latency, OpenAIWireServer

    server = OpenAIWireServer(latency=Latency(**latency))
    conn.send(server.url)
    conn.recv()  # until the parent says stop
    conn.send(list(server.chat_seconds))
    server.close()


class ModelServer:
    def __init__(self, latency: dict[str, float]) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.get_context("fork").Process(target=_model_process, args=(latency, child),
                                                                 daemon=True)
        self._proc.start()
        self.url = self._conn.recv()

    def stop(self) -> list[float]:
        self._conn.send("stop")
        seconds = self._conn.recv() if self._conn.poll(30) else []
        self._proc.join(10)
        return seconds


# -- the platform ----------------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_platform(args, model_url: str, workdir: Path) -> tuple[subprocess.Popen, str, str]:
    """Start the app as `make run` or `make serve` would; returns (process, base URL, database URL)."""
    port = _free_port()
    db_url = args.database_url or f"sqlite:///{workdir / 'load.db'}"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PORT=str(port), HOST="127.0.0.1", DATABASE_URL=db_url, SECRET_KEY=secrets.token_hex(16),
               LLM_PROVIDERS="openai_compatible", OPENAI_BASE_URL=model_url, OPENAI_API_KEY="local-load-test",
               OPENAI_CHAT_MODEL="loopback", CONSOLIDATION_PROVIDERS="offline", EMBEDDING_PROVIDER="offline",
               LLM_TIMEOUT_SECONDS="60", SESSION_COOKIE_SECURE="0", PYTHONUNBUFFERED="1")
    if args.server == "serve":
        env["WEB_WORKERS"] = str(args.workers)
        command = [sys.executable, "scripts/serve.py"]
    else:
        subprocess.run([sys.executable, "scripts/migrate.py"], cwd=ROOT, env=env, check=True, capture_output=True)
        command = [sys.executable, "app.py"]
    log = open(workdir / "server.log", "w+")  # noqa: SIM115 - kept open for the server's lifetime
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the server stopped:\n{log.read()[-3000:]}")
        try:
            if Client(base).call("GET", "/healthz")[0] == 200:
                return proc, base, db_url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise SystemExit("the server did not come up within 120 s")


# -- a bot's HTTP client: one keep-alive connection, a cookie, the CSRF header ------------------------------


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


# -- the bots ---------------------------------------------------------------------------------------------


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
        self.client.call("GET", "/api/auth/csrf")
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

    def _call_retrying(self, what: str, path: str, body: Any = None) -> tuple[int, dict]:
        """POST; a 503 (back-pressure: nothing was saved) is sent again after its Retry-After."""
        for attempt in range(SEND_ATTEMPTS):
            status, answer = self.client.call("POST", path, body)
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


# -- the report -------------------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    rank = q / 100 * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: list[float]) -> dict[str, float | int | None]:
    out: dict[str, float | int | None] = {"n": len(values)}
    for q in (50, 95, 99):
        value = percentile(values, q)
        out[f"p{q}"] = None if value is None else round(value, 3)
    out["max"] = round(max(values), 3) if values else None
    return out


def stored_counts(db_url: str, prefix: str) -> dict[str, int]:
    from sqlalchemy import func, select
    from sqlalchemy.orm import aliased

    from database.db_manager import Database
    from database.models import Message, User

    db = Database(db_url)
    try:
        with db.Session() as session:
            users = select(User.id).where(User.username.like(f"{prefix}%"))
            rows = dict(session.execute(select(Message.role, func.count()).where(Message.user_id.in_(users))
                                        .group_by(Message.role)).all())
            reply = aliased(Message)
            unanswered = session.scalar(select(func.count(Message.id)).where(
                Message.user_id.in_(users), Message.role == "user",
                ~select(reply.id).where(reply.reply_to_id == Message.id).exists()))
            duplicates = session.scalar(select(func.count()).select_from(
                select(Message.reply_to_id).where(Message.user_id.in_(users), Message.role == "assistant")
                .group_by(Message.reply_to_id).having(func.count() > 1).subquery()))
            return {"users": session.scalar(select(func.count()).select_from(users.subquery())),
                    "user_messages": rows.get("user", 0), "replies": rows.get("assistant", 0),
                    "user_messages_without_reply": unanswered, "messages_with_two_replies": duplicates}
    finally:
        db.dispose()


def settle(db_url: str, prefix: str, stored: dict[str, int], bound: float) -> dict[str, int]:
    """Messages a bot gave up on stay stored without a reply; the server's ``answer_unanswered`` job answers
    them a minute after they were stored. Wait for that (at most ``bound`` seconds) and count again."""
    left = stored["user_messages_without_reply"]
    started = time.monotonic()
    while stored["user_messages_without_reply"] and time.monotonic() - started < bound:
        time.sleep(5)
        stored = stored_counts(db_url, prefix)
    stored["answered_by_server_after_the_bots"] = left - stored["user_messages_without_reply"]
    stored["settle_seconds"] = round(time.monotonic() - started, 1) if left else 0.0
    return stored


def process_tree_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process and its children (gunicorn workers), from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    pids = [pid]
    while pids:
        current = pids.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick  # utime, stime
            children = Path(f"/proc/{current}/task/{current}/children").read_text().split()
        except (OSError, IndexError, ValueError):
            continue
        pids.extend(int(c) for c in children)
    return total


class LoadSampler:
    """The machine's 1-minute load average every few seconds (the machine is shared)."""

    def __init__(self) -> None:
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(5):
            self.samples.append(os.getloadavg()[0])

    def stop(self) -> dict[str, Any]:
        self._stop.set()
        self._thread.join(1)
        samples = self.samples or [os.getloadavg()[0]]
        return {"cpus": os.cpu_count(), "loadavg_1min_mean": round(sum(samples) / len(samples), 2),
                "loadavg_1min_max": round(max(samples), 2)}


def by_window(timeline: list[tuple[float, float]], model_time: float, width: float = 10.0) -> list[dict]:
    """Overhead p95 per ``width`` seconds of the chat phase (by when the message was sent): shows
    whether the tail comes from the class's first burst or from something periodic."""
    if not timeline:
        return []
    first = min(sent for sent, _ in timeline)
    windows: dict[int, list[float]] = {}
    for sent, latency in timeline:
        windows.setdefault(int((sent - first) // width), []).append(latency - model_time)
    return [{"from_s": int(k * width), "n": len(v), "p95": round(percentile(v, 95), 3)}
            for k, v in sorted(windows.items())]


def report(args, results: Results, model_seconds: list[float], stored: dict[str, int] | None,
           load: dict[str, Any], wall: float, cpu: dict[str, float] | None) -> dict[str, Any]:
    model_time = args.first_token + args.tokens / args.tokens_per_second
    every = results.latency["json"] + results.latency["sse"]
    lost = None
    if stored is not None:
        lost = {"messages": results.acknowledged - stored["user_messages"],
                "replies": results.replies - stored["replies"],
                # acknowledged and never answered, by the bots' retries nor by the server's own job
                "never_answered": stored["user_messages_without_reply"]}
    return {
        "config": {k: getattr(args, k) for k in ("server", "workers", "participants", "register_over", "messages",
                                                  "think", "first_token", "tokens", "tokens_per_second")},
        "model_seconds_nominal": model_time,
        "model_seconds_measured": summary(model_seconds),
        "reply_latency": {"all": summary(every), "json": summary(results.latency["json"]),
                          "sse": summary(results.latency["sse"])},
        "overhead": summary([v - model_time for v in every]),
        "sse_first_delta": summary(results.first_delta),
        # the whole class starts T1 at once: the burst every first message of the class lands in
        "task_start": summary(results.task_start),
        "registration": {"registered": results.registered, "latency": summary(results.register_seconds)},
        "errors": dict(results.errors), "error_count": sum(results.errors.values()),
        "messages": {"sent": results.sent, "acknowledged": results.acknowledged, "replies_received": results.replies,
                     "acknowledged_without_reply": results.acknowledged - results.replies,
                     "retried": results.retried, "retry_causes": dict(results.retry_causes),
                     "stored": stored, "lost": lost},
        "platform_cpu_seconds": cpu, "machine": load, "wall_seconds": round(wall, 1),
        "overhead_by_10s_of_chat": by_window(results.timeline, model_time),
        "slowest_messages": results.slow,
    }


def model_latency(args) -> dict[str, float]:
    return {"first_token": args.first_token, "tokens": args.tokens, "tokens_per_second": args.tokens_per_second}


def run(args, model: ModelServer | None = None, during_chat: Any = None) -> dict[str, Any]:
    """The load run. ``model``: the loopback model when the caller started it (scripts/two_hosts.py, whose hosts
    need its address first); ``during_chat``: called in a thread of its own when the chat phase begins (the
    two-host run kills and restarts a host there), returning ``[(phase name, monotonic start), ...]`` by which
    the report splits the overhead."""
    model = model or ModelServer(model_latency(args))
    proc = None
    chaos = Chaos(during_chat)
    workdir = Path(tempfile.mkdtemp(prefix="memory-lab-load-"))
    try:
        if args.base_url:
            base, db_url = args.base_url, args.database_url
            print(f"target {base}; the server must use the model at {model.url} (LLM_PROVIDERS=openai_compatible)")
        else:
            proc, base, db_url = start_platform(args, model.url, workdir)
        prefix = f"lt{secrets.token_hex(3)}x"
        results = Results()
        started = time.monotonic()
        deadline = started + args.max_seconds
        marks: dict[str, float] = {}

        def class_ready() -> None:  # the last bot registered: the chat phase starts
            marks["chat_started"] = time.monotonic()
            if proc is not None:
                marks["cpu_at_chat"] = process_tree_cpu_seconds(proc.pid)
            chaos.begin()

        ready = threading.Barrier(args.participants, action=class_ready)
        bots = [Bot(i, args, base, prefix, results, ready, deadline) for i in range(args.participants)]
        step = args.register_over / max(1, args.participants)
        threads = [threading.Thread(target=bot.run, args=(started + i * step,), daemon=True)
                   for i, bot in enumerate(bots)]
        sampler = LoadSampler()
        cpu_start = process_tree_cpu_seconds(proc.pid) if proc else None
        harness_start = process_tree_cpu_seconds(os.getpid())  # the bots and the model server (a child)
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(max(0.1, deadline + 30 - time.monotonic()))
        chaos.join(max(0.1, deadline + 60 - time.monotonic()))
        wall = time.monotonic() - started
        load = sampler.stop()
        cpu = None
        harness = process_tree_cpu_seconds(os.getpid()) - harness_start
        if proc is not None and "cpu_at_chat" in marks:
            chat_cpu = process_tree_cpu_seconds(proc.pid) - marks["cpu_at_chat"]
            cpu = {"registration_phase": round(marks["cpu_at_chat"] - cpu_start, 1),
                   "chat_phase": round(chat_cpu, 1),
                   "chat_phase_seconds": round(time.monotonic() - marks["chat_started"], 1),
                   "per_reply_ms": round(1000 * chat_cpu / max(1, results.replies), 1)}
        load["load_test_own_cpu_seconds"] = round(harness - (process_tree_cpu_seconds(proc.pid) - cpu_start
                                                             if proc is not None else 0.0), 1)
        time.sleep(1)  # replies stored just before the last response
        stored = stored_counts(db_url, prefix) if db_url else None
        if stored is not None:
            stored = settle(db_url, prefix, stored, args.settle_seconds)
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        model_seconds = model.stop()
        if args.keep_files:
            print(f"the run's files (SQLite, server.log) are in {workdir}", file=sys.stderr)
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    return report(args, results, model_seconds, stored, load, wall, cpu) | chaos.report(
        results.timeline, args.first_token + args.tokens / args.tokens_per_second)


class Chaos:
    """What happens to the platform during the chat phase (a host killed, restarted), in a thread of its own."""

    def __init__(self, action: Any = None) -> None:
        self.action = action  # None: nothing happens
        self.phases: list[tuple[str, float]] = []
        self.failed: str | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.phases = self.action()
        except BaseException as exc:  # noqa: BLE001 - reported, and the bots finish regardless
            self.failed = repr(exc)

    def begin(self) -> None:
        if self.action is not None:
            self.thread.start()

    def join(self, bound: float) -> None:
        if self.thread.is_alive():
            self.thread.join(bound)

    def report(self, timeline: list[tuple[float, float]], model_time: float) -> dict[str, Any]:
        if self.action is None:
            return {}
        out: dict[str, Any] = {"overhead_by_phase": by_phase(timeline, self.phases, model_time)}
        if self.failed:
            out["chaos_failed"] = self.failed
        return out


def by_phase(timeline: list[tuple[float, float]], phases: list[tuple[str, float]], model_time: float) -> dict:
    """Overhead p50/p95 of the messages sent in each phase (before the kill, while a host is down, after)."""
    out = {}
    for i, (name, begins) in enumerate(phases):
        ends = phases[i + 1][1] if i + 1 < len(phases) else float("inf")
        values = [latency - model_time for sent, latency in timeline if begins <= sent < ends]
        out[name] = {k: v for k, v in summary(values).items() if k in ("n", "p50", "p95", "max")}
    return out
