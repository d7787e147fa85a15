"""The bots' HTTP client and the bots themselves: a cookie and CSRF-header client, one bot walking
register -> T1 ... T4 exactly as a browser would (polling for unlocks, heartbeats until the minimum task time),
the admin account that reads groups and contexts, and the enrolment of whole assignment blocks.

They reach a server through its JSON API only and import nothing from ``services`` (scripts/check_layers.py
checks it), so they test the platform as a participant meets it.
"""
from __future__ import annotations

import http.cookiejar
import json
import secrets
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.research.bots.personas import OPEN_ANSWERS, SCRIPTS, TASKS

POLL_SECONDS = 0.25
CONSOLIDATION_WAIT_SECONDS = 180.0
SEND_RETRIES = 4  # a 503 (back-pressure, a provider outage) is waited out this many times, as the page does
BOT_CHAT_SECONDS = 120.0  # real seconds of chat a bot's task script needs on a busy machine


# ---------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, payload: dict[str, Any]) -> None:
        super().__init__(f"{method} {path} -> {status} {payload.get('error', '')}: {payload.get('message', '')}")
        self.status = status
        self.payload = payload


MAX_WAIT_SECONDS = 3600.0  # a limit per hour says so; a bot waits it out


def retry_wait(headers: Any, payload: dict[str, Any]) -> float:
    """How long a refusal (429, 503) says to wait: its Retry-After, which the server keeps equal to the body's
    ``retry_after_seconds`` (read when the header is missing); 1 s when neither says, at most an hour."""
    raw = headers.get("Retry-After") if headers is not None else None
    if raw is None:
        raw = (payload.get("details") or {}).get("retry_after_seconds") if isinstance(payload, dict) else None
    try:
        seconds = float(raw) if raw is not None else 1.0
    except (TypeError, ValueError):
        seconds = 1.0
    return min(max(seconds, 0.0), MAX_WAIT_SECONDS)


class HttpClient:
    """A browser-like JSON client: cookie session, CSRF header on POST, waits out 429s."""

    def __init__(self, base_url: str, timeout: float = 120.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()))
        self.csrf: str | None = None

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, dict[str, Any]]:
        for _ in range(10):
            request = urllib.request.Request(self.base_url + path, method=method,
                                             headers={"Accept": "application/json"})
            if method == "POST":
                if self.csrf is None:
                    self.csrf = self.expect("GET", "/api/auth/csrf")["csrf_token"]
                request.add_header("X-CSRFToken", self.csrf)
                request.add_header("Content-Type", "application/json")
                request.data = json.dumps(body or {}, ensure_ascii=False).encode("utf-8")
            try:
                with self.opener.open(request, timeout=self.timeout) as response:
                    status, raw, headers = response.status, response.read(), response.headers
            except urllib.error.HTTPError as exc:
                status, raw, headers = exc.code, exc.read(), exc.headers
            payload = json.loads(raw) if raw and "json" in (headers.get("Content-Type") or "") else {}
            if status == 429:
                time.sleep(retry_wait(headers, payload))
                continue
            if isinstance(payload, dict) and payload.get("csrf_token"):
                self.csrf = payload["csrf_token"]  # login and registration start a new session
            return status, payload
        raise ApiError(method, path, 429, {"error": "too_many_requests"})

    def expect(self, method: str, path: str, body: dict[str, Any] | None = None,
               ok: tuple[int, ...] = (200, 201)) -> dict[str, Any]:
        status, payload = self.call(method, path, body)
        if status not in ok:
            raise ApiError(method, path, status, payload)
        return payload


def _parse_time(value: str) -> datetime:
    return datetime.fromisoformat(value.rstrip("Z"))


# ---------------------------------------------------------------------------------------------
# One bot
# ---------------------------------------------------------------------------------------------


@dataclass
class SentTurn:
    task_id: str
    kind: str
    text: str
    message_id: int | None = None
    reply_id: int | None = None


@dataclass
class Bot:
    username: str
    language: str
    client: HttpClient
    user_id: int | None = None
    participant_code: str | None = None
    memory_group: str | None = None
    turns: list[SentTurn] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    tasks_done: list[str] = field(default_factory=list)
    # the bot's own script ({task: turns with .kind and .text}); None: SCRIPTS of its language
    script: dict[str, Any] | None = None

    def register(self, password: str) -> None:
        payload = self.client.expect("POST", "/api/auth/register", {
            "username": self.username, "password": password, "consent": True, "language": self.language})
        self.user_id = payload["user"]["id"]
        self.participant_code = payload["user"]["participant_code"]

    def speak(self, language: str) -> None:
        """Switch the account's language (as the page's language toggle does); scripts follow it."""
        if language != self.language:
            self.client.expect("POST", "/api/auth/language", {"language": language})
            self.language = language

    def walk(self, memory_ready: Callable[[int, str], None]) -> None:
        try:
            for task_id in TASKS:
                self._wait_until_available(task_id)
                memory_ready(self.user_id, task_id)
                self._do_task(task_id)
                self.tasks_done.append(task_id)
        except Exception as exc:  # one bot's failure is reported, not fatal to the others
            self.errors.append(f"{type(exc).__name__}: {exc}")

    def _wait_until_available(self, task_id: str) -> None:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            listing = self.client.expect("GET", "/api/tasks")
            task = next(t for t in listing["tasks"] if t["id"] == task_id)
            if task["status"] in ("available", "in_progress"):
                return
            if task["status"] == "done":
                raise RuntimeError(f"{task_id} is already done")
            wait = POLL_SECONDS
            if task.get("available_at"):
                wait = max(POLL_SECONDS, (_parse_time(task["available_at"]) - _parse_time(listing["now"]))
                           .total_seconds() + 0.05)
            time.sleep(min(wait, 5.0))
        raise TimeoutError(f"{task_id} did not unlock within 10 minutes")

    def _send(self, task_id: str, text: str) -> tuple[int, dict[str, Any]]:
        """One message, as the participant page sends it: with an idempotency key, sent again after a 503's
        wait when nothing was stored, and its reply asked for again after the wait when it was."""
        key = secrets.token_hex(16)
        status, payload = self.client.call("POST", f"/api/tasks/{task_id}/messages",
                                           {"content": text, "idempotency_key": key})
        for _ in range(SEND_RETRIES):
            if status != 503:
                break
            details = payload.get("details", {})
            time.sleep(min(retry_wait(None, payload), 30.0))  # the body's value, which Retry-After repeats
            if details.get("message_id"):  # stored: ask for its reply
                status, payload = self.client.call(
                    "POST", f"/api/tasks/{task_id}/messages/{details['message_id']}/reply")
            else:  # refused before it was stored: send it again under the same key
                status, payload = self.client.call("POST", f"/api/tasks/{task_id}/messages",
                                                   {"content": text, "idempotency_key": key})
        return status, payload

    def _do_task(self, task_id: str) -> None:
        self.client.expect("POST", f"/api/tasks/{task_id}/start")
        for turn in (self.script if self.script is not None else SCRIPTS[self.language])[task_id]:
            sent = SentTurn(task_id=task_id, kind=turn.kind, text=turn.text)
            status, payload = self._send(task_id, turn.text)
            if status == 409 and payload.get("error") == "time_up":
                self.notes.append(f"{task_id}: the task timer ran out after {len(self.turns)} turns")
                break
            if status != 201:
                raise ApiError("POST", f"/api/tasks/{task_id}/messages", status, payload)
            sent.message_id, sent.reply_id = payload["message"]["id"], payload["reply"]["id"]
            self.turns.append(sent)
        self._finish(task_id)
        items = self.client.expect("GET", f"/api/tasks/{task_id}/questionnaire")["items"]
        answers = {}
        for n, item in enumerate(items):
            if item["type"] in ("likert", "ios"):
                answers[item["id"]] = item["min"] + (n + len(self.username)) % (item["max"] - item["min"] + 1)
            elif item["type"] == "choice" and item.get("options"):
                answers[item["id"]] = item["options"][0]["value"]
            elif item["type"] == "text":
                answers[item["id"]] = OPEN_ANSWERS[self.language]
        self.client.expect("POST", f"/api/tasks/{task_id}/questionnaire", {"answers": answers})

    def _finish(self, task_id: str) -> None:
        """Finish the chat, keeping the page 'open' with heartbeats until the minimum time is reached."""
        for _ in range(1000):
            status, payload = self.client.call("POST", f"/api/tasks/{task_id}/finish")
            if status == 200:
                return
            if status == 409 and payload.get("error") == "task_phase_questionnaire":
                return  # the timer closed the chat already
            if status != 409 or payload.get("error") != "too_early":
                raise ApiError("POST", f"/api/tasks/{task_id}/finish", status, payload)
            timer = payload["details"]["timer"]
            scale = (timer["remaining_real_seconds"] / timer["remaining_seconds"]) if timer["remaining_seconds"] else 0
            missing_real = (timer["min_active_seconds"] - timer["active_seconds"]) * scale
            # stay under the idle-gap threshold, or the wait would not count as active time
            time.sleep(min(max(missing_real, 0.01) + 0.01, 0.8 * timer["idle_gap_real_seconds"]))
            self.client.call("POST", f"/api/tasks/{task_id}/heartbeat")
        raise TimeoutError(f"{task_id}: the minimum task time was never reached")


# ---------------------------------------------------------------------------------------------
# The run
# ---------------------------------------------------------------------------------------------


class Admin:
    """Reads groups and memory contexts; waits for consolidation between tasks."""

    def __init__(self, base_url: str, user: str, password: str) -> None:
        self.client = HttpClient(base_url)
        self.client.expect("POST", "/api/auth/login", {"username": user, "password": password})
        self.lock = threading.Lock()
        self.waits: list[float] = []

    def get(self, path: str) -> dict[str, Any]:
        with self.lock:
            return self.client.expect("GET", path)

    def withdraw(self, user_id: int, reason: str) -> None:
        with self.lock:
            self.client.expect("POST", f"/api/admin/participants/{user_id}/withdraw", {"reason": reason})

    def memory_ready(self, user_id: int, next_task: str) -> None:
        """Block until every earlier task of this participant is consolidated (or failed)."""
        earlier = TASKS[:TASKS.index(next_task)]
        started = time.monotonic()
        while time.monotonic() - started < CONSOLIDATION_WAIT_SECONDS:
            states = self.get(f"/api/admin/participants/{user_id}")["participant"]["consolidation"]
            if all(states.get(t) not in ("pending", "running") for t in earlier):
                self.waits.append(time.monotonic() - started)
                return
            time.sleep(POLL_SECONDS)
        raise TimeoutError(f"consolidation of {', '.join(earlier)} did not finish in {CONSOLIDATION_WAIT_SECONDS} s")


def languages_of(language: str) -> list[str]:
    return ["zh", "en"] if language == "both" else [language]


@dataclass
class Enrolment:
    """The bots that walk (``per_group`` per enabled group and language) and how they were reached:
    assignment is by permuted blocks the bots cannot choose, so they register in whole blocks until every
    group holds enough, and the extra registrations are withdrawn by the admin before anyone starts."""

    bots: list[Bot]
    registered: int
    withdrawn: dict[str, int]
    groups: list[str]

    def describe(self) -> str:
        per_group = ", ".join(f"{g} {sum(1 for b in self.bots if b.memory_group == g)}" for g in self.groups)
        extra = ", ".join(f"{g} {n}" for g, n in self.withdrawn.items() if n)
        return (f"registered {self.registered} bots, {len(self.groups)} at a time (assignment is by permuted "
                f"blocks), until every group held enough; {len(self.bots)} walk: {per_group}"
                + (f"; withdrew the extra registrations ({extra})" if extra else ""))


def _register_until_filled(base_url: str, admin: Admin, groups: list[str], need: int,
                           language: str) -> dict[str, list[Bot]]:
    """Register bots a block's width at a time until every group in ``groups`` holds ``need`` of them."""
    run_id, password = secrets.token_hex(3), secrets.token_urlsafe(12)
    by_group: dict[str, list[Bot]] = defaultdict(list)
    registered = 0
    limit = 3 * need * len(groups) + 60  # permuted blocks fill every group within one block of the need
    while any(len(by_group[g]) < need for g in groups):
        if registered >= limit:
            raise RuntimeError(f"{registered} registrations did not give every group {need} bots: "
                               + ", ".join(f"{g} {len(by_group[g])}" for g in groups))
        batch = [Bot(username=f"bot_{run_id}_{registered + i:03d}", language=language,
                     client=HttpClient(base_url)) for i in range(len(groups))]
        for bot in batch:
            bot.register(password)
        registered += len(batch)
        rows = {r["id"]: r for r in admin.get("/api/admin/participants")["participants"]}
        for bot in batch:
            bot.memory_group = rows[bot.user_id]["memory_group"]
            by_group[bot.memory_group].append(bot)
    return by_group


def enrol(base_url: str, admin: Admin, per_group: int, languages: list[str]) -> Enrolment:
    """``per_group`` bots per enabled group in each language; see ``Enrolment``."""
    summary = admin.get("/api/admin/participants")["summary"]
    groups = list(summary.get("enabled") or summary["groups"])
    need = per_group * len(languages)
    by_group = _register_until_filled(base_url, admin, groups, need, languages[0])
    walking: list[Bot] = []
    withdrawn: dict[str, int] = {}
    for group, members in by_group.items():
        for index, bot in enumerate(members[:need]):
            bot.speak(languages[index % len(languages)])
            walking.append(bot)
        for bot in members[need:]:
            admin.withdraw(bot.user_id, "simulation: registered only to complete an assignment block; never ran")
        withdrawn[group] = len(members) - need
    registered = sum(len(m) for m in by_group.values())
    return Enrolment(bots=walking, registered=registered, withdrawn=withdrawn, groups=groups)


def server_facts(base_url: str) -> dict[str, Any]:
    """The public study facts; refuses a server that is not in pilot mode, or whose task timer would close
    the bots' chats before their scripts are through."""
    status, facts = HttpClient(base_url).call("GET", "/api/study")
    if status != 200 or not facts.get("pilot_mode"):
        raise RuntimeError("the server is not in pilot mode (PILOT_DAY_SECONDS); bots would take three weeks")
    chat = facts.get("task_chat_real_seconds")
    if chat is not None and chat < BOT_CHAT_SECONDS:
        raise RuntimeError(
            f"the server's task timer closes a chat after {chat:.1f} real seconds; the bots' scripts need about "
            f"{BOT_CHAT_SECONDS:.0f} s: start it with a PILOT_TIMER_SCALE that leaves them that long (e.g. "
            f"PILOT_TIMER_SCALE=0.2 turns a 900 s task into 180 s), or run without --base-url")
    return facts


def run_bots(base_url: str, admin: Admin, per_group: int, language: str,
             log: Callable[[str], None]) -> Enrolment:
    server_facts(base_url)
    enrolment = enrol(base_url, admin, per_group, languages_of(language))
    log(enrolment.describe())
    with ThreadPoolExecutor(max_workers=len(enrolment.bots), thread_name_prefix="bot") as pool:
        list(pool.map(lambda b: b.walk(admin.memory_ready), enrolment.bots))
    return enrolment
