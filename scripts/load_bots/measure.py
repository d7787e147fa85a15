"""What a load run measured: percentiles, the stored messages (nothing lost, nothing answered twice), CPU and
load of the machine, overhead by window and by phase, and the JSON report."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from scripts.load_bots.bots import Results


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


def database_cpu_seconds(db_url: str | None) -> float | None:
    """CPU seconds of the PostgreSQL server on this machine that ``db_url`` names (its postmaster, found by
    its ``-p PORT``, with its backends, live and exited); None for SQLite or a server not found here."""
    if not db_url or not db_url.startswith("postgresql"):
        return None
    port = str(urlsplit(db_url).port or 5432)
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if not argv[0].endswith(b"postgres") or b"-p" not in argv or argv[argv.index(b"-p") + 1] != port.encode():
                continue
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        tick = os.sysconf("SC_CLK_TCK")
        exited = (int(fields[13]) + int(fields[14])) / tick  # cutime, cstime: the backends that have ended
        return process_tree_cpu_seconds(int(entry.name)) + exited
    return None


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


def by_phase(timeline: list[tuple[float, float]], phases: list[tuple[str, float]], model_time: float) -> dict:
    """Overhead p50/p95 of the messages sent in each phase (before the kill, while a host is down, after)."""
    out = {}
    for i, (name, begins) in enumerate(phases):
        ends = phases[i + 1][1] if i + 1 < len(phases) else float("inf")
        values = [latency - model_time for sent, latency in timeline if begins <= sent < ends]
        out[name] = {k: v for k, v in summary(values).items() if k in ("n", "p50", "p95", "max")}
    return out
