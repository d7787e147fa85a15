"""Rate-limit counters in the study database: a storage backend for flask-limiter (``limits``).

flask-limiter's in-memory store counts per process, so with several ``make serve`` workers (or
hosts) a client could reach every cap once per process. This store keeps each fixed-window
counter as one row of ``rate_limit_counters`` and bumps it with one atomic upsert, so every
process on the database counts together. Select it with ``RATE_LIMIT_STORAGE=database``
(``make serve`` does); ``make run`` is one process and keeps the in-memory store, which costs no
database write per limited request.

Registered under the URI scheme ``memlab-db://``; the engine comes in the storage options. A key's
row is reused for its next window; rows whose window ended are deleted as the store writes (at most
once per ``SWEEP_SECONDS`` per process), so the table holds only the current windows.

The response's X-RateLimit headers need the window's count and end right after the request's own
increment: ``incr`` returns both (one statement) and keeps them for the rest of the request (in
``flask.g``), so ``get``/``get_expiry`` answer the headers without a second and third round trip.

A signed-in request has already begun its transaction (the login read): the increment joins it
(``request_session``), so a chat message and its count are one transaction on one connection, committed
together. A count must stand even when its request is refused: an increment whose transaction is rolled
back (or closed without a commit) is made again in a transaction of its own by ``recount_lost``, which
the request's teardown calls.

What a key holds: flask-limiter's ``LIMITER/<subject>/<endpoint>/<amount>/<multiples>/<granularity>``,
the subject being an address, ``user:<login cookie id>``, or ``login_subject(name)``: a digest of an
account name, never the name itself. A key that is too long for the column or holds a character the
database cannot store (NUL, an unpaired surrogate) is stored by its digest. ``forget_account`` removes
an erased participant's rows.
"""
from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from flask import g, has_request_context
from limits.storage import Storage
from sqlalchemy import Float, Integer, String, bindparam, delete, event, select, text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from database.db_manager import is_unavailable
from database.models import RateLimitCounter, username_key

log = logging.getLogger(__name__)
SCHEME = "memlab-db"
MAX_KEY = 255
SWEEP_SECONDS = 60.0
_TABLE = RateLimitCounter.__table__
# The count's upsert, the same text for both databases. Written out because SQLAlchemy compiles an
# ``INSERT ... ON CONFLICT`` construct anew for every execution (it has no cache key): a compilation per
# limited request, about as much CPU as the statement's round trip; a text statement is compiled once.
_UPSERT_COUNT = text(
    'INSERT INTO rate_limit_counters ("key", count, expires_at) VALUES (:key, :amount, :ends) '
    'ON CONFLICT ("key") DO UPDATE SET '
    "count = CASE WHEN rate_limit_counters.expires_at <= :now THEN :amount "
    "ELSE rate_limit_counters.count + :amount END, "
    "expires_at = CASE WHEN rate_limit_counters.expires_at <= :now THEN :ends "
    "ELSE rate_limit_counters.expires_at END "
    "RETURNING count, expires_at").bindparams(  # typed once; the values are the execution's parameters
    bindparam("key", type_=String), bindparam("amount", type_=Integer), bindparam("now", type_=Float),
    bindparam("ends", type_=Float))
_PENDING = "rate_limit.pending"  # Session.info: increments made in the session's open transaction
_LOST = "rate_limit.lost"  # Session.info: increments whose transaction ended without a commit


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def stored_key(key: str) -> str:
    """The key as stored: itself when it fits the column and holds printable text only, else its digest."""
    if len(key) <= MAX_KEY and key.isprintable():
        return key
    return "sha256:" + _digest(key)


def login_subject(name: str) -> str:
    """The login limit's subject for an account name, compared as logins compare names (padding, case and
    width do not make a new name); a digest, so the table keeps no account names."""
    return "login:" + _digest(username_key(name))


def forget_account(engine: Engine, *, user_id: int, username: str) -> int:
    """Delete the counters of one account (by its login name and its ``user:<id>.<version>`` cookie ids);
    returns how many rows went."""
    key = _TABLE.c.key
    with engine.begin() as connection:
        return connection.execute(delete(_TABLE).where(
            key.contains(f"/{login_subject(username)}/", autoescape=True)
            | key.contains(f"/user:{user_id}.", autoescape=True))).rowcount or 0


def _remember(key: str, count: int, expires_at: float) -> None:
    """Keep an increment's result for the rest of this request (nothing outside a request)."""
    if has_request_context():
        g.setdefault("_rate_limit_windows", {})[key] = (count, expires_at)


def _seen(key: str) -> tuple[int, float] | None:
    if not has_request_context():
        return None
    return g.get("_rate_limit_windows", {}).get(key)


def _expired(now: float):
    return delete(_TABLE).where(_TABLE.c.expires_at <= now)


def _committed(session: Session) -> None:
    session.info.pop(_PENDING, None)


def _transaction_ended(session: Session, transaction: Any) -> None:
    if transaction.parent is None and session.info.get(_PENDING):  # rolled back, or closed unfinished
        session.info.setdefault(_LOST, []).extend(session.info.pop(_PENDING))


def track_counts(factory: sessionmaker) -> None:
    """Keep track of the increments made in sessions from ``factory`` until their transaction commits."""
    event.listen(factory, "after_commit", _committed)
    event.listen(factory, "after_transaction_end", _transaction_ended)


def recount_lost(session: Session) -> int:
    """Make again, each in a transaction of its own, the increments ``session`` made in a transaction that
    did not commit (a refused request's); call after the session's last transaction ended. Returns how many."""
    lost: list[Callable[[], None]] = session.info.pop(_LOST, [])
    for increment in lost:
        try:
            increment()
        except SQLAlchemyError as exc:
            if not is_unavailable(exc):
                raise
            log.warning("a rate-limit count was not made again, database unavailable: %s", exc)
    return len(lost)


class DatabaseRateLimitStorage(Storage):
    """Fixed-window counters (``incr``/``get``/``get_expiry``) in ``rate_limit_counters``."""

    STORAGE_SCHEME = [SCHEME]

    def __init__(self, uri: str | None = None, wrap_exceptions: bool = False, *, engine: Engine,
                 request_session: Callable[[], Session | None] = lambda: None, **options: Any) -> None:
        """``request_session``: the request's session when it has a transaction under way on ``engine``
        that an increment may join (its commit then commits the count), else None."""
        if engine.dialect.name not in ("sqlite", "postgresql"):
            raise ValueError(f"rate limits in the database need SQLite or PostgreSQL, not {engine.dialect.name}")
        super().__init__(uri, wrap_exceptions=wrap_exceptions)
        self.engine = engine
        self._request_session = request_session
        self._next_sweep = 0.0

    @property
    def base_exceptions(self) -> type[Exception]:
        return SQLAlchemyError

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        """Add ``amount`` to the key's window, starting a new window of ``expiry`` seconds when the
        old one has ended; one statement, so concurrent requests in any process never lose a count.
        The new count and the window's end are kept for this request's headers (``_seen``). In the
        request's transaction when one is under way (``request_session``), else in one of its own."""
        session = self._request_session()
        if session is None:
            return self._incr(key, expiry, amount, None)
        try:
            count = self._incr(key, expiry, amount, session)
        except SQLAlchemyError:
            session.rollback()  # the request goes on in a new transaction; the limiter logs this one
            raise
        session.info.setdefault(_PENDING, []).append(lambda: self._incr(key, expiry, amount, None))
        return count

    def _incr(self, key: str, expiry: int, amount: int, session: Session | None) -> int:
        now = time.time()
        values = {"key": stored_key(key), "amount": amount, "now": now, "ends": now + expiry}
        sweep = now >= self._next_sweep
        if sweep:
            self._next_sweep = now + SWEEP_SECONDS
        if session is not None:  # the sweep too: the request's connection is the one it holds
            row = session.execute(_UPSERT_COUNT, values).one()
            if sweep:
                session.execute(_expired(now))
        else:
            with self.engine.begin() as connection:
                row = connection.execute(_UPSERT_COUNT, values).one()
                if sweep:
                    connection.execute(_expired(now))
        count = int(row.count)
        _remember(key, count, float(row.expires_at))
        return count

    def delete_expired(self, now: float | None = None) -> int:
        """Delete the rows whose window has ended (an ended window counts as no row); returns how many."""
        with self.engine.begin() as connection:
            return connection.execute(_expired(time.time() if now is None else now)).rowcount or 0

    def _row(self, key: str) -> tuple[int, float] | None:
        """The key's current window; None (no count known) also when the database cannot answer now:
        these reads fill the response's X-RateLimit headers, which must not fail a request already served.
        After this request's own ``incr`` of the key, what that returned (no database read)."""
        seen = _seen(key)
        if seen is not None:
            return seen if seen[1] > time.time() else None
        try:
            with self.engine.connect() as connection:
                row = connection.execute(select(_TABLE.c.count, _TABLE.c.expires_at)
                                         .where(_TABLE.c.key == stored_key(key))).first()
        except SQLAlchemyError as exc:
            if not is_unavailable(exc):
                raise
            log.warning("rate-limit window of %s not read, database unavailable: %s", key, exc)
            return None
        if row is None or row.expires_at <= time.time():
            return None
        return int(row.count), float(row.expires_at)

    def get(self, key: str) -> int:
        row = self._row(key)
        return row[0] if row else 0

    def get_expiry(self, key: str) -> float:
        row = self._row(key)
        return row[1] if row else time.time()

    def check(self) -> bool:
        try:
            with self.engine.connect() as connection:
                connection.execute(select(1))
            return True
        except SQLAlchemyError:
            return False

    def reset(self) -> int | None:
        with self.engine.begin() as connection:
            return connection.execute(delete(_TABLE)).rowcount

    def clear(self, key: str) -> None:
        with self.engine.begin() as connection:
            connection.execute(delete(_TABLE).where(_TABLE.c.key == stored_key(key)))
