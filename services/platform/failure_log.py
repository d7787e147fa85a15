"""The admin's failure log: every failed provider try becomes a ``ProviderFailure`` row.

A row is written in its own short transaction on its own connection, so it survives
when the caller's reply transaction rolls back (a failed reply changes nothing else).

SQLite allows one writer at a time. If the caller's transaction already holds the write
lock (e.g. recall updates flushed before the model call), waiting for it from the same
request would stall until the caller finishes - which it cannot do while it waits for
us. So the first write waits only briefly; when the database is still locked the row
is handed to a background writer that waits for the lock properly. ``flush()`` waits
for such deferred rows (tests, shutdown). The recorder never raises into the reply path.
"""
from __future__ import annotations

import logging
import queue
import threading
import time
from datetime import datetime
from typing import Any

from sqlalchemy import insert
from sqlalchemy.exc import OperationalError

from database.db_manager import Database
from database.models import ProviderFailure
from database.participant_lock import ParticipantErased, hold_participant
from services.platform.clock import Clock

log = logging.getLogger(__name__)

FIRST_WRITE_LOCK_WAIT_MS = 250
DEFERRED_WRITE_ATTEMPTS = 5


def failure_values(attempt: dict[str, Any], at: datetime) -> dict[str, Any]:
    """Column values for one attempt dict (as ``LLMService`` reports it).

    The try, what followed it and the retry's delay are stored as facts, beside the provider's own error text;
    the admin console puts them into words in the reader's language (``admin.failures.attempt.*``)."""
    status = attempt.get("status_code")
    try_number = attempt.get("try")
    action = attempt.get("action") or ("give_up" if try_number else None)  # a try with nothing after it gave up
    retry_in_s = attempt.get("retry_in_s")
    return {
        "at": at,
        "provider": str(attempt.get("provider") or "unknown")[:64],
        "model": (str(attempt["model"])[:128] if attempt.get("model") else None),
        "purpose": str(attempt.get("purpose") or "reply")[:32],
        "error_class": str(attempt.get("error_class") or "unknown")[:128],
        "status_code": int(status) if status is not None else None,
        "message": attempt.get("error") or "",
        "user_id": attempt.get("user_id"),
        "message_id": attempt.get("message_id"),
        "fallback_provider": (str(attempt["fallback_provider"])[:64] if attempt.get("fallback_provider") else None),
        "try_number": int(try_number) if try_number is not None else None,
        "action": str(action)[:16] if action else None,
        "retry_in_s": float(retry_in_s) if retry_in_s is not None else None,
    }


def _linkable(conn, values: dict[str, Any]) -> dict[str, Any]:
    """The row as it may be written now: the failure of a participant erased meanwhile stays in the log
    without pointing at them (as erasure leaves other failure rows)."""
    if values.get("user_id") is None:
        return values
    try:
        hold_participant(conn, values["user_id"])
    except ParticipantErased:
        return {**values, "user_id": None, "message_id": None}
    return values


def _is_lock_error(exc: OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text


class FailureRecorder:
    """Callable ``recorder(attempt)`` for ``LLMService(on_failure=...)`` and ``build_embedder``."""

    def __init__(self, db: Database, clock: Clock) -> None:
        self.db = db
        self.clock = clock
        self._sqlite = db.url.startswith("sqlite")
        self._deferred: queue.Queue[dict[str, Any]] = queue.Queue()
        self._writer: threading.Thread | None = None
        self._writer_lock = threading.Lock()

    def __call__(self, attempt: dict[str, Any]) -> None:
        try:
            values = failure_values(attempt, self.clock.now())
        except Exception:
            log.exception("could not read a provider failure attempt")
            return
        try:
            self._write(values, lock_wait_ms=FIRST_WRITE_LOCK_WAIT_MS if self._sqlite else None)
        except OperationalError as exc:
            if not _is_lock_error(exc):
                log.exception("could not record a %s failure", values["provider"])
                return
            self._defer(values)
        except Exception:
            log.exception("could not record a %s failure", values["provider"])

    def _write(self, values: dict[str, Any], *, lock_wait_ms: int | None) -> None:
        with self.db.engine.connect() as conn:
            previous = None
            if lock_wait_ms is not None:
                previous = conn.exec_driver_sql("PRAGMA busy_timeout").scalar()
                conn.exec_driver_sql(f"PRAGMA busy_timeout={int(lock_wait_ms)}")
                conn.commit()
            try:
                conn.execute(insert(ProviderFailure).values(**_linkable(conn, values)))
                conn.commit()
            except BaseException:
                conn.rollback()
                raise
            finally:
                if previous is not None:  # the connection goes back to a pool shared with the app
                    conn.exec_driver_sql(f"PRAGMA busy_timeout={int(previous)}")
                    conn.commit()

    def _defer(self, values: dict[str, Any]) -> None:
        self._deferred.put(values)
        with self._writer_lock:
            if self._writer is None or not self._writer.is_alive():
                self._writer = threading.Thread(target=self._drain, name="failure-log-writer", daemon=True)
                self._writer.start()

    def _drain(self) -> None:
        while True:
            try:
                values = self._deferred.get(timeout=1.0)
            except queue.Empty:
                return
            try:
                for attempt_number in range(1, DEFERRED_WRITE_ATTEMPTS + 1):
                    try:
                        self._write(values, lock_wait_ms=None)  # the pool's normal busy timeout
                        break
                    except OperationalError as exc:
                        if not _is_lock_error(exc) or attempt_number == DEFERRED_WRITE_ATTEMPTS:
                            raise
                        time.sleep(0.2 * attempt_number)
            except Exception:
                log.exception("could not record a deferred %s failure at %s", values["provider"], values["at"])
            finally:
                self._deferred.task_done()

    def flush(self, timeout: float = 10.0) -> bool:
        """Wait until deferred rows are written; False if some are still pending after ``timeout``."""
        deadline = time.monotonic() + timeout
        while self._deferred.unfinished_tasks:
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)
        return True


def make_failure_recorder(db: Database, clock: Clock) -> FailureRecorder:
    """One recorder per app: ``LLMService(on_failure=recorder)``, ``build_embedder(settings, recorder)``."""
    return FailureRecorder(db, clock)
