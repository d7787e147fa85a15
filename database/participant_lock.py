"""The row lock that keeps a participant's own writes and the erasure of that participant apart.

Every transaction that writes a row belonging to a participant (a table with ``user_id`` other than
the tombstone's own ``users``, ``assignments`` and ``audit_log``) first takes the participant's
``users`` row in a shared mode and reads its status there; erasure takes the same row exclusively and
re-reads the status inside its own transaction. So an erasure waits for the writes already under way
and deletes what they wrote, a write that comes after it finds the participant erased and is refused
with ``ParticipantErased`` (the API answers 410), and two erasures of one participant run one after
the other, the second seeing the first's result. Nothing is left behind, and no write fails on a
foreign key to a row the erasure deleted.

* PostgreSQL: ``FOR KEY SHARE`` (what a foreign-key insert takes anyway, so a participant's own
  requests never wait for each other) against erasure's ``FOR UPDATE``.
* SQLite: one writer at a time, so holding the database's write lock is enough; a no-op UPDATE of the
  row takes it and reads the status under it.

Where the lock can ride on a statement the transaction sends anyway, it does: ``hold_active_participant``
takes it as the update of ``last_active_at`` (a stored message), ``insert_held`` in the row's own
``INSERT ... SELECT ... FROM users`` (a reply); each marks the participant held for the transaction.

ORM writes are covered by ``guard_flushes(sessionmaker)``: before the first flush of a transaction that
writes a participant's rows, the lock is taken for each participant concerned. Code that writes with a
Core statement (``session.execute(update(...))``) calls ``hold_participant`` itself, before its first
write in the transaction: taking the lock after another row lock could deadlock with an erasure.
"""
from __future__ import annotations

from datetime import datetime
from itertools import chain
from typing import Any

from sqlalchemy import bindparam, event, insert, select, update
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Session, make_transient_to_detached, sessionmaker
from sqlalchemy.orm.attributes import set_committed_value
from sqlalchemy.orm.util import identity_key

from database.models import Base, User

# the tombstone: what erasure keeps, and the only participant tables written without this lock
TOMBSTONE_TABLES = frozenset({"users", "assignments", "audit_log"})
PARTICIPANT_TABLES = frozenset(table.name for table in Base.metadata.sorted_tables
                               if "user_id" in table.c and table.name not in TOMBSTONE_TABLES)
_USERS = User.__table__
_HELD = "participant_lock.held"  # Session.info: the participants locked in the current transaction
# a stored message's lock and activity in one statement (``hold_active_participant``), built once
_ACTIVE_AT = (update(_USERS).where(_USERS.c.id == bindparam("user_id")).values(last_active_at=bindparam("active_at"))
              .returning(_USERS.c.status))


class ParticipantErased(Exception):
    """A write for a participant whose data has been erased (or is being erased right now)."""

    def __init__(self, user_id: int) -> None:
        super().__init__(f"participant {user_id} has been erased")
        self.user_id = user_id


def _status(connection: Connection, user_id: int, *, exclusive: bool) -> str | None:
    if connection.dialect.name == "sqlite":
        return connection.execute(update(_USERS).where(_USERS.c.id == user_id)
                                  .values(status=_USERS.c.status).returning(_USERS.c.status)).scalar()
    lock = {} if exclusive else {"read": True, "key_share": True}
    return connection.execute(select(_USERS.c.status).where(_USERS.c.id == user_id)
                              .with_for_update(**lock)).scalar()


def hold_participant(target: Session | Connection, user_id: int) -> None:
    """Share-lock the participant for the rest of the transaction of ``target`` (a session, which takes
    the lock once per transaction, or a connection); ParticipantErased if they are erased. A participant
    who does not exist (yet) is left to the foreign keys."""
    if isinstance(target, Session):
        held: set[int] = target.info.setdefault(_HELD, set())
        if user_id not in held:
            hold_participant(target.connection(), user_id)
            held.add(user_id)
        return
    if _status(target, user_id, exclusive=False) == "erased":
        raise ParticipantErased(user_id)


def hold_active_participant(session: Session, user_id: int, active_at: datetime) -> None:
    """``hold_participant`` and set the participant's ``last_active_at`` in one statement (a stored message
    does both). The update's row lock is stronger than the share lock (on PostgreSQL a participant's
    own writes then take turns on the row), which the update of ``last_active_at`` would take anyway in
    the same transaction; the ORM's copy of the row is updated as loaded, so no flush writes it again."""
    with session.no_autoflush:  # the lock comes before the transaction's other writes
        status = session.execute(_ACTIVE_AT, {"user_id": user_id, "active_at": active_at}).scalar()
    if status == "erased":
        raise ParticipantErased(user_id)
    session.info.setdefault(_HELD, set()).add(user_id)
    user = session.identity_map.get(identity_key(User, user_id))
    if user is not None:
        set_committed_value(user, "last_active_at", active_at)


def insert_held(session: Session, model: type[Base], values: dict[str, Any], user_id: int) -> Any:
    """Insert one row of ``model`` (a participant table) for ``user_id`` and take the participant's lock in the
    same statement: ``INSERT ... SELECT <values> FROM users WHERE`` the participant is not erased (share-locked
    on PostgreSQL, under SQLite's write lock), so the lock costs no statement of its own. Returns the row as
    stored (``attach``: built from the values sent and the generated columns the insert returned);
    ParticipantErased when nothing was inserted (erased, or no such user)."""
    table = model.__table__
    names = tuple(name for name, value in values.items() if value is not None)
    postgresql = session.get_bind().dialect.name == "postgresql"
    statement = _held_inserts.get((table, names, postgresql))
    if statement is None:
        statement = _held_inserts[table, names, postgresql] = _held_insert(table, names, postgresql)
    given = {name: values[name] for name in names}
    row = session.execute(statement, {"held_user_id": user_id, **{f"held_{name}": given[name] for name in names}}
                          ).first()
    if row is None:
        raise ParticipantErased(user_id)
    session.info.setdefault(_HELD, set()).add(user_id)
    return attach(session, model, given, row)


# The statements of ``insert_held``, one per table, set of columns given and dialect (a handful in all), built once:
# a statement built per call has its ~40 parameters coerced and its cache key made anew every time, more CPU than
# sending it (docs/benchmarks.md, "CPU per reply, session 12").
_held_inserts: dict[tuple[Any, tuple[str, ...], bool], Any] = {}


def _held_insert(table: Any, names: tuple[str, ...], postgresql: bool) -> Any:
    # each value typed by its column (psycopg's dialect casts each parameter to it: PostgreSQL would otherwise
    # take a SELECT list's JSON document for text)
    source = select(*[bindparam(f"held_{name}", type_=table.c[name].type) for name in names]).where(
        _USERS.c.id == bindparam("held_user_id"), _USERS.c.status != "erased")
    if postgresql:
        source = source.with_for_update(read=True, key_share=True)
    return insert(table).from_select(list(names), source).returning(*generated_columns(table))


def generated_columns(table: Any) -> list[Any]:
    """The columns of ``table`` whose stored value an INSERT decides and its caller does not know: the primary key,
    server defaults, and defaults that are functions or SQL. What an insert returns (``RETURNING``), instead of
    every column: a reply's row sent back whole carried its prompt and memory context back from the server, to be
    decoded again (docs/benchmarks.md, "CPU per reply, session 13")."""
    return [column for column in table.c if column.primary_key or column.server_default is not None
            or (column.default is not None and not column.default.is_scalar)]


_unset_columns: dict[Any, dict[str, Any]] = {}  # per table: what a column not given holds once inserted


def attach(session: Session, model: type[Base], values: dict[str, Any], row: Any) -> Any:
    """The row inserted by a Core ``INSERT`` of ``values`` (a column given as None is stored as NULL; one not
    given holds its scalar default, or NULL), whose ``RETURNING`` of ``generated_columns`` gave ``row``, as a
    loaded, unchanged instance of ``model`` in ``session``, without reading the row back. ``values`` must be what
    the database gives back: JSON documents of dicts with string keys, lists, strings, numbers, booleans and None
    (tests/database/test_participant_lock.py compares each column with a fresh read). The insert is a Core
    statement: SQLAlchemy compiles an ORM-enabled INSERT anew every time (no cache key), which cost more CPU than
    the statement it saves."""
    table = model.__table__
    unset = _unset_columns.get(table)
    if unset is None:
        unset = _unset_columns[table] = {
            column.key: column.default.arg if column.default is not None and column.default.is_scalar else None
            for column in table.c}
    instance = model(**{**unset, **values, **row._mapping})
    make_transient_to_detached(instance)
    session.add(instance)
    return instance


def lock_for_erasure(connection: Connection, user_id: int) -> str | None:
    """Take the participant exclusively for the rest of this transaction, once every write under way for
    them has ended; returns their status as it stands now (None: no such user)."""
    return _status(connection, user_id, exclusive=True)


def _owner(instance: Any) -> int | None:
    table = getattr(instance, "__table__", None)
    if table is None or table.name not in PARTICIPANT_TABLES:
        return None
    return getattr(instance, "user_id", None)


def _before_flush(session: Session, _context: Any, _instances: Any) -> None:
    owners = {owner for instance in chain(session.new, session.dirty, session.deleted)
              if (owner := _owner(instance)) is not None}
    for user_id in sorted(owners):
        hold_participant(session, user_id)


def _after_transaction_end(session: Session, transaction: Any) -> None:
    if transaction.parent is None:  # the database transaction ended: its locks are gone
        session.info.pop(_HELD, None)


def guard_flushes(factory: sessionmaker) -> None:
    """Take the participant lock before every flush that writes a participant's rows, for sessions from
    ``factory``."""
    event.listen(factory, "before_flush", _before_flush)
    event.listen(factory, "after_transaction_end", _after_transaction_end)
