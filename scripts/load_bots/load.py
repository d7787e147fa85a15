"""The load test's harness: one run of a class of bots against the platform (``scripts/load_test.py`` is the
entry point, with the usage; the bots, their client, the processes and the measures are the package's other
modules).

It imports nothing from the platform: the bots speak HTTP only, the loopback model is tests/wire_servers.py
in its own process, and the platform is a subprocess started as `make run` or `make serve` starts it.
"""
from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from scripts.load_bots.bots import Bot, Results
from scripts.load_bots.measure import (
    LoadSampler,
    by_phase,
    database_cpu_seconds,
    process_tree_cpu_seconds,
    report,
    settle,
    stored_counts,
)
from scripts.load_bots.servers import ModelServer, start_platform

MAX_PARTICIPANTS = 1000
MAX_MESSAGES = 20


def model_latency(args) -> dict[str, float]:
    return {"first_token": args.first_token, "tokens": args.tokens, "tokens_per_second": args.tokens_per_second}


def run(args, model: ModelServer | None = None, during_chat: Any = None) -> dict[str, Any]:
    """The load run. ``model``: the loopback model when the caller started it (scripts/two_hosts.py, whose hosts
    need its address first); ``during_chat``: called in a thread of its own when the chat phase begins (the
    two-host run kills and restarts a host there), returning ``[(phase name, monotonic start), ...]`` by which
    the report splits the overhead."""
    model = model or ModelServer(model_latency(args))
    proc = None
    pinned: dict[str, Any] = {}
    chaos = Chaos(during_chat)
    workdir = Path(tempfile.mkdtemp(prefix="memory-lab-load-"))
    try:
        if args.base_url:
            base, db_url = args.base_url, args.database_url
            print(f"target {base}; the server must use the model at {model.url} (LLM_PROVIDERS=openai_compatible)")
        else:
            proc, base, db_url = start_platform(args, model.url, workdir)
            # the CPUs the platform may run on, read back from the kernel (--platform-cpus pins them)
            pinned["platform_cpus"] = sorted(os.sched_getaffinity(proc.pid))
        prefix = f"lt{secrets.token_hex(3)}x"
        results = Results()
        started = time.monotonic()
        deadline = started + args.max_seconds
        marks: dict[str, float] = {}

        def class_ready() -> None:  # the last bot registered: the chat phase starts
            marks["chat_started"] = time.monotonic()
            if proc is not None:
                marks["cpu_at_chat"] = process_tree_cpu_seconds(proc.pid)
            database = database_cpu_seconds(db_url)
            if database is not None:
                marks["database_cpu_at_chat"] = database
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
        database = database_cpu_seconds(db_url)
        if cpu is not None and database is not None and "database_cpu_at_chat" in marks:
            # PostgreSQL on this machine shares the cores: its backends' CPU in the chat phase, per reply
            cpu["database_chat_phase"] = round(database - marks["database_cpu_at_chat"], 1)
            cpu["database_per_reply_ms"] = round(1000 * cpu["database_chat_phase"] / max(1, results.replies), 1)
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
    return report(args, results, model_seconds, stored, load, wall, cpu) | pinned | chaos.report(
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
