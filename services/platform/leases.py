"""Database leases: mutual exclusion that holds across threads, processes and hosts.

Several server processes (``make serve``), or several machines, share one database and
nothing else, so anything that must happen in one place at a time is claimed in the
``leases`` table instead of with an in-process lock:

* ``participant_guard(db, user_id)`` - one memory rewrite at a time per participant (the
  S1 summary after each turn); every process and thread waits on the same row.
* ``SchedulerLeadership`` - the scheduler's jobs run in exactly one process; the others
  stand by and take over when the leader stops renewing (it died or lost the database).

A lease is a row (name, holder, expires_at). Taking it is one atomic UPDATE that succeeds
only when the row is free, expired or already ours, else one INSERT that the primary key
lets only one writer win. That is portable SQL: SQLite serialises the writers, PostgreSQL's
row lock makes a second UPDATE re-check the WHERE clause on the winner's row. Lease times
are the hosts' real UTC clocks (NTP-synchronised), not the study clock: they measure
whether a process is alive, not study days.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from sqlalchemy import delete, insert, or_, update
from sqlalchemy.exc import IntegrityError

from database.db_manager import Database
from database.models import Lease
from services.platform.clock import Clock

log = logging.getLogger(__name__)

PARTICIPANT_TTL_SECONDS = 300.0  # longer than any one rewrite (model timeout x retries)
PARTICIPANT_WAIT_SECONDS = 120.0
POLL_SECONDS = 0.05


# the host's real clock (services.platform.clock.Clock), never a study's ManualClock: leases measure liveness
utc_now = Clock().now


class LeaseBusy(RuntimeError):
    """The lease stayed held by someone else for as long as we were willing to wait."""


def holder_id(kind: str = "") -> str:
    """A holder name unique to this process (and call): host, pid and a random suffix."""
    return f"{socket.gethostname()[:60]}:{os.getpid()}:{kind}{uuid.uuid4().hex[:12]}"


def try_acquire(db: Database, name: str, holder: str, ttl_seconds: float, *,
                now: Callable[[], datetime] = utc_now) -> bool:
    """Take or renew the lease ``name`` for ``ttl_seconds``; False when someone else holds it."""
    at = now()
    values = {"holder": holder, "acquired_at": at, "expires_at": at + timedelta(seconds=ttl_seconds)}
    with db.engine.begin() as conn:
        taken = conn.execute(update(Lease).where(
            Lease.name == name, or_(Lease.holder == holder, Lease.expires_at < at)).values(**values)).rowcount
    if taken == 1:
        return True
    try:
        with db.engine.begin() as conn:
            conn.execute(insert(Lease).values(name=name, **values))
    except IntegrityError:
        return False  # the row exists and is someone else's, unexpired
    return True


def release(db: Database, name: str, holder: str) -> None:
    """Give the lease back (only if we still hold it); a crash skips this and the lease expires."""
    with db.engine.begin() as conn:
        conn.execute(delete(Lease).where(Lease.name == name, Lease.holder == holder))


@contextmanager
def held(db: Database, name: str, *, ttl_seconds: float, wait_seconds: float,
         poll_seconds: float = POLL_SECONDS) -> Iterator[str]:
    """Hold lease ``name`` for the block, waiting up to ``wait_seconds`` for it (LeaseBusy after)."""
    holder = holder_id()
    deadline = time.monotonic() + wait_seconds
    delay = poll_seconds
    while not try_acquire(db, name, holder, ttl_seconds):
        if time.monotonic() >= deadline:
            raise LeaseBusy(f"lease {name} is held elsewhere")
        time.sleep(delay)
        delay = min(delay * 1.5, 1.0)
    try:
        yield holder
    finally:
        release(db, name, holder)


def participant_guard(db: Database, user_id: int, *, ttl_seconds: float = PARTICIPANT_TTL_SECONDS,
                      wait_seconds: float = PARTICIPANT_WAIT_SECONDS):
    """One memory rewrite at a time for this participant, across every process and host."""
    return held(db, f"participant:{user_id}", ttl_seconds=ttl_seconds, wait_seconds=wait_seconds)


class SchedulerLeadership:
    """Which process runs the scheduler's jobs: the one holding the ``scheduler`` lease.

    Every process with a scheduler calls ``renew()`` every ``ttl/3`` seconds; the holder keeps
    it, the others take it once it expires. A job runs only while ``is_leader()``, which also
    stops a leader that could not renew (database unreachable) before its lease runs out."""

    NAME = "scheduler"

    def __init__(self, db: Database, *, ttl_seconds: float = 45.0, now: Callable[[], datetime] = utc_now) -> None:
        self.db = db
        self.ttl_seconds = ttl_seconds
        self.holder = holder_id("scheduler-")
        self._now = now
        self._valid_until = 0.0
        self._lock = threading.Lock()

    @property
    def renew_seconds(self) -> float:
        return self.ttl_seconds / 3

    def renew(self) -> bool:
        started = time.monotonic()
        try:
            leader = try_acquire(self.db, self.NAME, self.holder, self.ttl_seconds, now=self._now)
        except Exception:  # the database is unreachable: stop acting as leader, try again later
            log.exception("scheduler lease could not be renewed")
            leader = False
        with self._lock:
            was = self._valid_until > time.monotonic()
            # keep a margin so the old leader stops before another process may take over
            self._valid_until = started + self.ttl_seconds * 0.8 if leader else 0.0
        if leader != was:
            log.info("scheduler: this process (%s) %s", self.holder,
                     "now runs the jobs" if leader else "stands by; another process runs the jobs")
        return leader

    def is_leader(self) -> bool:
        with self._lock:
            return self._valid_until > time.monotonic()

    def resign(self) -> None:
        with self._lock:
            self._valid_until = 0.0
        try:
            release(self.db, self.NAME, self.holder)
        except Exception:
            log.exception("scheduler lease could not be released; it expires by itself")
