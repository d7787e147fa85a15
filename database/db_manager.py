"""Engine, sessions and migrations.

One ``Database`` per app. Request handlers get a session from ``get_session()``
(closed at request teardown); scripts and scheduler jobs use ``db.session()``
as a context manager. Schema changes are applied only through Alembic.
"""
from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path

from sqlalchemy import create_engine, event, inspect
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session, sessionmaker

from database.participant_lock import guard_flushes

MIGRATIONS_DIR = Path(__file__).resolve().parent / "migrations"
# SQLite's messages, and PostgreSQL's SQLSTATEs, that mean "try again later": lock_not_available,
# read_only_sql_transaction, admin_shutdown, crash_shutdown, cannot_connect_now, too_many_connections,
# and class 08 (connection exception: refused, lost, rejected).
_SQLITE_BUSY = ("database is locked", "database table is locked", "readonly database", "database is busy")
_POSTGRES_BUSY = {"55P03", "25006", "57P01", "57P02", "57P03", "53300"}
# what a driver says when there is no server to talk to (no SQLSTATE: the connection never opened)
_UNREACHABLE = ("connection refused", "could not connect", "server closed the connection",
                "terminating connection", "connection is closed", "connection timeout expired",
                "the database system is shutting down", "the database system is starting up")
# seconds a request waits for a pooled connection before it answers 503 (SQLAlchemy's default is 30)
POOL_TIMEOUT_SECONDS = 10.0
# connections each process keeps for its background work (scheduler jobs, consolidation, memory
# upkeep) apart from the requests' pool, plus one for the scheduler lease's renewal
BACKGROUND_POOL_SIZE = 3
LEASE_POOL_SIZE = 1
# a pooled connection that sat idle longer than this is pinged before it is handed out (see _ping_if_idle)
IDLE_PING_SECONDS = 5.0


def is_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` says the database is locked, read-only, shutting down, unreachable or out of
    connections (this process's pool, or the server's): the statement did not take effect, and the same
    request may succeed a moment later."""
    if isinstance(exc, PoolTimeout):
        return True
    if not isinstance(exc, DBAPIError):
        return False
    sqlstate = getattr(exc.orig, "sqlstate", None) or ""
    if sqlstate in _POSTGRES_BUSY or sqlstate.startswith("08") or exc.connection_invalidated:
        return True
    message = str(exc.orig).lower()
    return any(part in message for part in _SQLITE_BUSY + _UNREACHABLE)


class Database:
    def __init__(self, url: str, *, busy_timeout: float = 10.0, pool_size: int = 10, max_overflow: int = 10,
                 pool_timeout: float = POOL_TIMEOUT_SECONDS, prepared_statements: bool = True,
                 idle_ping_seconds: float = IDLE_PING_SECONDS) -> None:
        """``busy_timeout``: seconds a write waits for another writer's lock before it fails
        (the request then answers 503 "not saved, try again" rather than hanging). ``pool_size`` and
        ``max_overflow``: connections kept per process (every waiting reply is a thread; each holds a
        connection only while it reads or writes, never while it waits for the model or for a second
        connection). ``pool_timeout``: seconds to wait for a free one before a retryable error.
        ``prepared_statements=False``: psycopg never prepares statements on the server (pgbouncer
        before 1.21 in transaction mode hands a client a different server connection per transaction).
        ``idle_ping_seconds``: a server connection that sat in the pool longer than this is pinged before
        use, and replaced silently if the server closed it (``_ping_if_idle``)."""
        self.url = url
        self.busy_timeout = busy_timeout
        self.pool_size = pool_size
        self.max_overflow = max_overflow
        self.prepared_statements = prepared_statements
        self.idle_ping_seconds = idle_ping_seconds
        self._siblings: list[Database] = []
        kwargs: dict = {"future": True}
        if not self.in_memory:
            # every waiting reply is a thread; each holds a connection only while it reads or writes
            kwargs.update(pool_size=pool_size, max_overflow=max_overflow, pool_timeout=pool_timeout)
        if url.startswith("sqlite"):
            # Threads (waitress, the scheduler) share the file; WAL lets readers and a writer coexist.
            kwargs["connect_args"] = {"check_same_thread": False, "timeout": busy_timeout}
            if url.startswith("sqlite:///") and url != "sqlite:///:memory:":
                Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        else:
            if url.startswith("postgresql"):
                # the same bound as SQLite's busy timeout: a row or table lock held longer fails the
                # statement with 55P03, which is_unavailable() turns into a retryable 503, not a hang
                kwargs["connect_args"] = {"options": f"-c lock_timeout={int(busy_timeout * 1000)}"}
                if not prepared_statements:
                    kwargs["connect_args"]["prepare_threshold"] = None
        self.engine: Engine = create_engine(url, **kwargs)
        if url.startswith("sqlite"):
            event.listen(self.engine, "connect", _sqlite_pragmas(int(busy_timeout * 1000)))
        else:
            self._ping_if_idle()
        self.Session = sessionmaker(bind=self.engine, expire_on_commit=False)
        guard_flushes(self.Session)  # a participant's rows are written only while they are not erased

    def _ping_if_idle(self) -> None:
        """Ping a pooled server connection before use only if it sat idle in the pool longer than
        ``idle_ping_seconds``; a ping that fails replaces the connection without the caller seeing an
        error (SQLAlchemy's pessimistic disconnect handling, a checkout event instead of ``pool_pre_ping``).

        ``pool_pre_ping`` pings at every check-out, a ``SELECT 1`` round trip each time (2.8 per reply, ~0.3 ms of
        this process's CPU and ~0.1 ms of the server's: docs/benchmarks.md, "CPU per reply, session 13"). A busy
        pool hands each connection out again within moments, and a connection in use a moment ago is almost
        surely alive; the ping is for
        the connection that sat unused while the server restarted or an idle timeout (a firewall's,
        pgbouncer's, ``idle_session_timeout``) closed it. The trade-off: when the server closes connections
        that were in use less than ``idle_ping_seconds`` ago (a restart under load), the first statement on
        one of them fails; SQLAlchemy then invalidates the whole pool, as for any disconnect, so one request
        per pool answers a retryable 503 (``is_unavailable``) and the next ones reconnect. Under
        ``pool_pre_ping`` that request would have reconnected too."""
        dialect = self.engine.dialect

        @event.listens_for(self.engine, "checkin")
        def on_checkin(dbapi_connection, record) -> None:
            if dbapi_connection is not None:  # None: the connection was invalidated
                record.info["idle_since"] = time.monotonic()

        @event.listens_for(self.engine, "checkout")
        def on_checkout(dbapi_connection, record, _proxy) -> None:
            idle_since = record.info.get("idle_since")  # absent for a new connection: not pinged
            if idle_since is None or time.monotonic() - idle_since <= self.idle_ping_seconds:
                return
            try:
                dialect.do_ping(dbapi_connection)
            except dialect.loaded_dbapi.Error as exc:
                # the pool invalidates this connection and checks out a new one (up to twice more)
                raise DisconnectionError(f"a pooled connection idle {time.monotonic() - idle_since:.0f} s "
                                         f"failed its ping: {exc}") from exc

    @property
    def in_memory(self) -> bool:
        return self.url in ("sqlite://", "sqlite:///:memory:")

    @property
    def connections(self) -> int:
        """The most connections this engine opens at once."""
        return 1 if self.in_memory else self.pool_size + self.max_overflow

    def sibling(self, pool_size: int, *, pool_timeout: float = 60.0) -> Database:
        """The same database through a pool of its own (background work, the scheduler lease), so
        a starved request pool never stops it and it never takes the requests' connections. An
        in-memory SQLite database exists once per engine, so it is shared instead."""
        if self.in_memory:
            return self
        sibling = Database(self.url, busy_timeout=self.busy_timeout, pool_size=pool_size, max_overflow=0,
                           pool_timeout=pool_timeout, prepared_statements=self.prepared_statements,
                           idle_ping_seconds=self.idle_ping_seconds)
        self._siblings.append(sibling)
        return sibling

    def session(self) -> AbstractContextManager[Session]:
        """A session that commits on success and rolls back on any error."""
        return transaction(self.Session)

    def upgrade(self, revision: str = "head") -> None:
        """Apply Alembic migrations up to ``revision``."""
        from alembic import command

        command.upgrade(alembic_config(self.url), revision)

    def current_revision(self) -> str | None:
        from alembic.runtime.migration import MigrationContext

        with self.engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()

    def table_names(self) -> list[str]:
        return inspect(self.engine).get_table_names()

    def dispose(self) -> None:
        """Close every pooled connection, this database's siblings' too."""
        for sibling in self._siblings:
            sibling.dispose()
        self.engine.dispose()


@contextmanager
def transaction(session_factory: Callable[[], Session]) -> Iterator[Session]:
    """Open a session from ``session_factory``; commit on success, roll back on any error, close."""
    session = session_factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def _sqlite_pragmas(busy_timeout_ms: int) -> Callable[..., None]:
    def on_connect(dbapi_connection, _record) -> None:
        cursor = dbapi_connection.cursor()
        cursor.execute(f"PRAGMA busy_timeout={busy_timeout_ms}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # deleted and overwritten rows are zeroed in the file, so erased text does not linger in free space
        cursor.execute("PRAGMA secure_delete=ON")
        _ensure_wal(cursor, busy_timeout_ms / 1000)
        cursor.close()
    return on_connect


def _ensure_wal(cursor, patience: float) -> None:
    """Switch the file to write-ahead logging unless it already is (the mode is stored in the file).
    Reading or switching the mode while another connection opens the same file can answer "database
    is locked" at once, without the busy handler (SQLite takes those locks without waiting), so a
    burst of new connections retries for up to the busy timeout instead of failing a request."""
    deadline = time.monotonic() + patience
    delay = 0.005
    while True:
        try:
            mode = cursor.execute("PRAGMA journal_mode").fetchone()[0]
            if str(mode).lower() != "wal":
                cursor.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() + delay > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.2)
