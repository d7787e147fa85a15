"""Two `make serve` processes on one PostgreSQL: participants alternate between them on every
request (no sticky sessions). Every message is stored once with one reply, each task is
consolidated exactly once, the S1 summaries never collide, and the scheduler's jobs run in one
process only - until it is killed, when the other takes over."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from sqlalchemy import func, select

from database.models import Assignment, ConsolidationRun, Message, ProfileVersion, TaskSession, User
from tests.conftest import answer_for
from tests.test_server_start import ROOT, Browserless, free_port, wait_until_up

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

PARTICIPANTS = 8
MESSAGES = ("你好，我叫小林，在上海读研究生。", "我对花生过敏，平时喜欢做饭。", "最近在准备论文答辩，有点紧张。",
            "周末想和朋友去爬山。")
TASK_MINIMUM_REAL_SECONDS = 300 * 0.02  # the study's 300-second minimum at PILOT_TIMER_SCALE 0.02


@pytest.fixture
def two_servers(database, tmp_path):
    if not database.url.startswith("postgresql"):
        pytest.skip("two server processes share one PostgreSQL database; runs in the PostgreSQL pass")
    study = tmp_path / "study.json"
    study.write_text(json.dumps({"enabled_conditions": ["L3", "L4", "S1", "R1"]}))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(DATABASE_URL=database.url, SECRET_KEY="two-process-test", SESSION_COOKIE_SECURE="0",
               PILOT_DAY_SECONDS="60", PILOT_TIMER_SCALE="0.02", SCHEDULER_ENABLED="1", SCHEDULER_SWEEP_SECONDS="1",
               SCHEDULER_OVERDUE_SECONDS="1", LLM_PROVIDERS="offline", EMBEDDING_PROVIDER="offline",
               STUDY_CONFIG=str(study), WEB_WORKERS="1", WEB_THREADS="16", PYTHONUNBUFFERED="1")
    database.dispose()
    servers = []
    for name in ("a", "b"):
        port = free_port()
        log = open(tmp_path / f"server-{name}.log", "w+")
        proc = subprocess.Popen([sys.executable, "scripts/serve.py"], cwd=ROOT, env={**env, "PORT": str(port)},
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        servers.append((proc, f"http://127.0.0.1:{port}", log))
        wait_until_up(Browserless(servers[-1][1]), log)  # one at a time: the first one migrates
    yield servers
    for proc, _, _ in servers:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)


class Alternating:
    """One participant whose every request goes to the other server (one cookie jar for both)."""

    def __init__(self, bases: list[str]) -> None:
        self.apis = [Browserless(base) for base in bases]
        for api in self.apis[1:]:
            api.opener = self.apis[0].opener  # the same browser: one cookie jar
        self.turn = 0

    def next(self) -> Browserless:
        api = self.apis[self.turn % len(self.apis)]
        self.turn += 1
        return api

    def call(self, method: str, path: str, body=None):
        api = self.next()
        api.token = self.token
        status, payload = api.call(method, path, body)
        if isinstance(payload, dict) and payload.get("csrf_token"):
            self.token = payload["csrf_token"]
        return status, payload

    def stream(self, path: str, body):
        api = self.next()
        api.token = self.token
        return api.stream(path, body)


def _chat_t1(participant: Alternating, number: int) -> int:
    """Register, start T1 and send the messages; ``_finish_t1`` ends the task once its minimum has passed."""
    participant.token = None
    participant.call("GET", "/api/auth/csrf")
    status, body = participant.call("POST", "/api/auth/register",
                                    {"username": f"twoproc{number}", "password": "password-123", "consent": True})
    assert status == 201, body
    assert participant.call("POST", "/api/tasks/T1/start")[0] == 201
    for index, text in enumerate(MESSAGES):
        if index % 2:
            events = participant.stream("/api/tasks/T1/messages?stream=1", {"content": text})
            assert events[-1][0] == "reply", events
        else:
            status, body = participant.call("POST", "/api/tasks/T1/messages", {"content": text})
            assert status == 201, body
    return len(MESSAGES)


def _finish_t1(participant: Alternating) -> None:
    deadline = time.time() + 30
    while (status := participant.call("POST", "/api/tasks/T1/finish")[0]) != 200 and time.time() < deadline:
        time.sleep(0.5)  # the minimum of 300 study seconds is 6 real seconds at a timer scale of 0.02
    assert status == 200
    status, body = participant.call("GET", "/api/tasks/T1/questionnaire")
    answers = {item["id"]: answer_for(item) for item in body["items"]}
    assert participant.call("POST", "/api/tasks/T1/questionnaire", {"answers": answers})[0] == 201


def _walk_everyone_through_t1(bases: list[str]) -> int:
    """One request at a time, but the participants' task minimums run side by side: while one chats, those who
    started their task more than the minimum (6 s) ago finish it, instead of every participant waiting alone."""
    sent, waiting = 0, []
    for number in range(PARTICIPANTS):
        participant = Alternating(bases)
        started = time.monotonic()
        sent += _chat_t1(participant, number)
        waiting.append((started, participant))
        while waiting and time.monotonic() - waiting[0][0] > TASK_MINIMUM_REAL_SECONDS:
            _finish_t1(waiting.pop(0)[1])
    for _, participant in waiting:
        _finish_t1(participant)
    return sent


def _wait_for_consolidation(database, expected: int) -> None:
    deadline = time.time() + 90
    while time.time() < deadline:
        with database.Session() as session:
            done = session.scalar(select(func.count()).select_from(TaskSession).where(
                TaskSession.consolidation_status == "done"))
        if done == expected:
            return
        time.sleep(0.5)
    pytest.fail(f"only {done} of {expected} task sessions were consolidated")


def _job_runners(log) -> Counter:
    log.seek(0)
    return Counter(re.findall(r"scheduler job \w+ runs in (\S+)", log.read()))


def test_two_processes_share_one_postgresql(two_servers, database):
    bases = [base for _, base, _ in two_servers]
    sent = _walk_everyone_through_t1(bases)
    _wait_for_consolidation(database, PARTICIPANTS)
    time.sleep(3)  # a few more sweeps: nothing may be consolidated twice
    with database.Session() as session:
        users = select(User.id).where(User.username.like("twoproc%"))
        assert session.scalar(select(func.count()).select_from(Message).where(
            Message.user_id.in_(users), Message.role == "user")) == sent
        replies = Counter(session.scalars(select(Message.reply_to_id).where(Message.role == "assistant")))
        assert len(replies) == sent and set(replies.values()) == {1}
        runs = session.execute(select(ConsolidationRun.task_session_id, ConsolidationRun.status)).all()
        assert Counter(ts for ts, status in runs if status == "succeeded") == Counter(
            session.scalars(select(TaskSession.id)))
        assert all(status == "succeeded" for _, status in runs), runs
        groups = Counter(session.scalars(select(Assignment.memory_group).where(Assignment.user_id.in_(users))))
        assert groups["S1"] == 2
        s1_versions = session.execute(select(ProfileVersion.user_id, ProfileVersion.version).where(
            ProfileVersion.kind == "s1_summary")).all()
        assert s1_versions and len(s1_versions) == len(set(s1_versions))
    runners = [_job_runners(log) for _, _, log in two_servers]
    leaders = [index for index, counts in enumerate(runners) if counts]
    assert len(leaders) == 1, runners
    assert len(runners[leaders[0]]) == 1  # one holder: one process ran every job

    # rate limits are counted in PostgreSQL: ten login attempts per account name and minute in all,
    # not ten per process (with per-process counters the alternating guesser would get twenty)
    guesser = Alternating(bases)
    guesser.token = None
    guesser.call("GET", "/api/auth/csrf")
    statuses = [guesser.call("POST", "/api/auth/login", {"username": "twoproc0", "password": "a-wrong-guess"})[0]
                for _ in range(12)]
    assert statuses == [401] * 10 + [429, 429], statuses

    # the leader dies without a goodbye: the other process takes the jobs over once its lease expires
    proc, _, log = two_servers[leaders[0]]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    survivor = two_servers[1 - leaders[0]][2]
    deadline = time.time() + 60
    while not _job_runners(survivor) and time.time() < deadline:
        time.sleep(1)
    assert _job_runners(survivor), "the surviving process never took over the scheduler"
