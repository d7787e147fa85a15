"""Chat: store the participant's message first, then build the reply from memory.

Order matters for a study whose data are irreplaceable:
1. the participant's message is validated and committed before any model call;
2. the memory context, the prompt and the reply are built and stored in one
   transaction, so a failed reply changes nothing but the failure log (recall
   updates of a failed reply roll back with it);
3. when every provider fails the caller gets ``Unavailable`` (503) and the
   message stays stored; ``reply_to`` answers it later without re-sending.
"""
from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import wait
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError, SQLAlchemyError
from sqlalchemy.orm import Session, aliased

from database.db_manager import is_unavailable
from database.models import AuditLog, Message, TaskSession, User
from database.participant_lock import ParticipantErased, attach, generated_columns, hold_active_participant, insert_held
from services.chat.pacing import PacingPlan, ReplyTiming, plan_for
from services.hosting.runtime import Runtime
from services.llm.types import AllProvidersFailed, ChatRequest, ChatResult
from services.memory import registry
from services.memory.base import Upkeep
from services.memory.consolidation_service import ConsolidationService
from services.memory.context import MemoryContext, memory_exposure, read_task_and_earlier_turns, with_coded_notes
from services.memory.engine import MemoryEngine
from services.participants.quality import clamp_pasted, content_flags, parse_signals
from services.platform.backpressure import retry_after
from services.platform.clock import utc_iso
from services.platform.errors import BadInput, Conflict, Gone, NotFound, TooLarge, Unavailable
from services.platform.leases import LeaseBusy, holder_id, participant_guard, try_acquire
from services.platform.leases import release as release_lease
from services.study.definition import Study
from services.study.timer_service import TaskService
from services.text.languages import prompt_language

log = logging.getLogger(__name__)
ERASED = "this participant's data has been erased"

# a client-generated key naming one message (a UUID fits), so a resent message is stored once
IDEMPOTENCY_KEY = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_REPLY_ROWS = "chat.reply_rows"  # Session.info: the rows accept_message loaded, for the reply's prompt
_MESSAGES = Message.__table__
# The message path's statements, built once: a statement built per call is coerced and given its cache key anew
# every time, as much CPU as sending it (docs/benchmarks.md, "CPU per reply, session 12").
_TASK_SO_FAR = (select(Message.role, Message.content).where(Message.task_session_id == bindparam("task_session_id"))
                .order_by(Message.id))
_INSERT_MESSAGE = insert(_MESSAGES).returning(*generated_columns(_MESSAGES))
# the scheduler answers a stored message left without a reply this long (the page and the bots ask again sooner)
ANSWER_GRACE_SECONDS = 60.0


@dataclass
class Accepted:
    """A message ``accept_or_repeat`` stored now, or found stored under its idempotency key (with
    its reply once there is one)."""

    message: Message
    reply: Message | None = None
    repeated: bool = False


@dataclass
class PreparedReply:
    """Everything the model is given for one reply, built inside the reply's transaction."""

    context: MemoryContext
    request: ChatRequest
    user_message: Message
    memory_group: str
    received_at: datetime  # when the participant's message was stored (pacing counts from it)
    prepare_clock: datetime  # the study clock when preparing began
    prepare_started: float  # time.monotonic() then: context building is timed in real time
    pacing: PacingPlan
    exposure: dict[str, Any] | None  # memory_exposure; None in the study's first task (nothing earlier)

    def timing(self) -> ReplyTiming:
        """Start timing the reply: called just before the model is asked."""
        return ReplyTiming.start(self.pacing, received_at=self.received_at, now=self.prepare_clock,
                                 prepared_since=self.prepare_started)


def task_service(session: Session, runtime: Runtime) -> TaskService:
    return TaskService(session, runtime.study, time_scale=runtime.settings.time_scale,
                       timer_scale=runtime.settings.timer_scale, clock=runtime.clock,
                       on_chat_ended=lambda task_session_id: on_chat_ended(runtime, task_session_id))


def idempotency_key(header: str | None, field: Any) -> str | None:
    """The message's key from the ``Idempotency-Key`` header or the ``idempotency_key`` field (either;
    both must agree), or None when the client sent none."""
    if header is not None and field is not None and header != field:
        raise BadInput("the Idempotency-Key header and the idempotency_key field differ",
                       code="invalid_idempotency_key")
    key = header if header is not None else field
    if key is None:
        return None
    if not isinstance(key, str) or not IDEMPOTENCY_KEY.fullmatch(key):
        raise BadInput("an idempotency key is 1 to 128 letters, digits and . _ : - (a UUID, for example)",
                       code="invalid_idempotency_key")
    return key


def accept_or_repeat(session: Session, runtime: Runtime, user: User, task_id: str, content: Any, *,
                     key: str | None, signals: dict[str, Any] | None = None) -> Accepted:
    """``accept_message``, once per idempotency ``key``: a repeat (a client retrying after a lost
    answer, or the same post sent several times at once) gets the message stored first, and its
    reply when there is one, instead of a second row. The unique (user, key) constraint decides
    between simultaneous repeats: the message is inserted unless the key is taken (no look-up first),
    and a repeat's transaction is rolled back, so it changes nothing."""
    if key is None:
        return Accepted(accept_message(session, runtime, user, task_id, content, signals=signals))
    try:
        return Accepted(accept_message(session, runtime, user, task_id, content, signals=signals, key=key))
    except KeyTaken as taken:
        session.rollback()
        stored = _by_key(session, user.id, key)
        if stored is None:  # the insert failed on another constraint
            raise taken.error from None
    except Conflict as exc:  # the time ran out: a message stored under this key before still gets its reply
        stored = _by_key(session, user.id, key) if exc.code == "time_up" else None
        if stored is None:
            raise
    if stored.task_id != task_id or not isinstance(content, str) or stored.content != content.strip():
        raise Conflict("this idempotency key was used for another message", code="idempotency_key_reused",
                       details={"message_id": stored.id})
    # a repeat is answered only where a new message would be: an active participant, the task's chat open
    task_service(session, runtime).running_session(user, task_id, phase="chat")
    return Accepted(stored, _reply_of(session, stored.id), repeated=True)


class KeyTaken(Exception):
    """The message's insert broke a constraint, most likely because a message with its idempotency key is
    stored already (``accept_message`` stored nothing; ``error`` is the database's refusal)."""

    def __init__(self, key: str, error: IntegrityError) -> None:
        super().__init__(key)
        self.error = error


def _by_key(session: Session, user_id: int, key: str) -> Message | None:
    return session.scalar(select(Message).where(Message.user_id == user_id, Message.idempotency_key == key))


def _reply_of(session: Session, message_id: int) -> Message | None:
    return session.scalar(select(Message).where(Message.reply_to_id == message_id))


@dataclass
class _Loaded:
    """What storing a message loaded, kept for its reply (in ``Session.info``): a session holds its rows
    weakly, so without this a reply going on in the same session would read them again."""

    message: Message
    user: User
    task_session: TaskSession
    history: list[dict[str, str]]  # the task's messages before this one, as chat history


def accept_message(session: Session, runtime: Runtime, user: User, task_id: str, content: Any,
                   signals: dict[str, Any] | None = None, key: str | None = None) -> Message:
    """Validate and commit the participant's message. Nothing is stored if it is refused; ``KeyTaken``
    when the insert is refused, ``key`` naming a message stored before (the caller rolls back).

    ``signals`` holds the optional data-quality fields the page sends (services.participants.quality)."""
    quality = parse_signals(signals or {})
    if not isinstance(content, str) or not content.strip():
        raise BadInput("the message is empty", code="empty_message")
    limit = runtime.study.limits.max_message_chars
    if len(content) > limit:
        raise TooLarge(f"the message is longer than {limit} characters", code="message_too_long",
                       details={"limit": limit})
    tasks = task_service(session, runtime)
    ts = tasks.running_session(user, task_id, phase="chat")
    tasks.touch(ts)
    if ts.phase != "chat":
        tasks.commit()  # keep the closed timer; the message itself is not part of the task
        raise Conflict("the time for this task is up", code="time_up")
    now = runtime.clock.now()
    hold_active_participant(session, user.id, now)  # before the task's row is written (the flush below)
    text = content.strip()
    # the task so far, read once: the near-duplicate check looks at the participant's earlier messages,
    # the reply's prompt at all of them (the participant's writes take turns on the lock just taken, so
    # none of theirs is stored between this read and the insert)
    if _keeps_earlier_turns(runtime.study, user.memory_group):
        # with the earlier tasks' turns the reply's context shows (memory.context.earlier_turns), in this statement
        so_far = read_task_and_earlier_turns(session, user.id, ts)
    else:
        so_far = session.execute(_TASK_SO_FAR, {"task_session_id": ts.id}).all()
    history = [{"role": role, "content": earlier} for role, earlier in so_far]
    earlier = [m["content"] for m in history if m["role"] == "user"]
    flags = content_flags(text, earlier, runtime.study.timing) + clamp_pasted(quality, len(text))
    values = dict(user_id=user.id, task_session_id=ts.id, task_id=ts.task_id, role="user", content=text,
                  created_at=now, idempotency_key=key, content_flags=flags or None, **quality)
    # no look-up of the key first: the unique (user, key) constraint decides (a Core insert, whose compiled
    # form is cached: database.participant_lock.attach; the values are parameters of the one statement)
    try:
        row = session.execute(_INSERT_MESSAGE, values).one()
    except IntegrityError as error:
        if key is None:
            raise
        raise KeyTaken(key, error) from error
    message = attach(session, Message, values, row)
    session.commit()
    session.info[_REPLY_ROWS] = _Loaded(message, user, ts, history)
    return message


def _keeps_earlier_turns(study: Study, group: str | None) -> bool:
    """Whether a reply in ``group`` shows turns of earlier tasks, so storing the message reads them too (a group
    the study or the registry does not know is left to the reply, which reads what it needs)."""
    if group is None or group not in registry.ids() or group not in study.conditions:
        return False
    condition = registry.get(group)
    return condition.reads_earlier_turns and condition.recent_turns(study) > 0


def unanswered_message(session: Session, user: User, task_id: str, message_id: int) -> Message:
    """A participant's own message in a running task that has no reply yet (for a retry)."""
    message = session.get(Message, message_id)
    if message is None or message.user_id != user.id or message.task_id != task_id or message.role != "user":
        raise NotFound("no such message", code="unknown_message")
    answered = session.scalar(select(Message.id).where(Message.reply_to_id == message.id))
    if answered:
        raise Conflict("this message already has a reply", code="already_answered")
    return message


REPLY_CLAIM_SECONDS = 300.0  # a retry that died holds its claim this long at most


def claim_reply(runtime: Runtime, message_id: int) -> Callable[[], None]:
    """Claim the reply to a stored message for one retry (a lease ``reply:<id>``); returns the release.
    409 ``reply_in_progress`` when another retry holds it (that one calls the model, not this one), and
    ``already_answered`` when one stored the reply before this claim."""
    name, holder = f"reply:{message_id}", holder_id("reply-")
    if not try_acquire(runtime.db, name, holder, REPLY_CLAIM_SECONDS):
        raise Conflict("a reply to this message is being made right now", code="reply_in_progress",
                       details={"message_id": message_id})
    done = {"released": False}
    with runtime.db.Session() as session:  # read after the claim: a retry that finished before it answered
        answered = _reply_of(session, message_id) is not None
    if answered:
        release_lease(runtime.db, name, holder)
        raise Conflict("this message already has a reply", code="already_answered",
                       details={"message_id": message_id})

    def release() -> None:
        if not done["released"]:
            done["released"] = True
            try:
                release_lease(runtime.db, name, holder)
            except SQLAlchemyError:  # the claim then expires by itself
                log.warning("reply claim %s not released", name, exc_info=True)

    return release


def _prepare(session: Session, runtime: Runtime, user_message_id: int) -> PreparedReply:
    prepare_started, prepare_clock = time.monotonic(), runtime.clock.now()
    message = session.get(Message, user_message_id)
    if message is None:  # the participant was erased since the message was stored
        raise Gone(ERASED, code="participant_erased")
    user = session.get(User, message.user_id)
    ts = session.get(TaskSession, message.task_session_id)
    group = user.memory_group
    language = user.language
    study = runtime.study_for(ts.study_version)  # the version the task started under, also off the request path
    engine = MemoryEngine(session, study, embedder=runtime.embedder, clock=runtime.clock,
                          day_seconds=runtime.settings.day_seconds, defer_writes=True)
    context = engine.build_context(user_id=user.id, memory_group=group, task_session=ts, query=message,
                                   language=language)
    loaded = session.info.get(_REPLY_ROWS)
    earlier = loaded.history if loaded is not None and loaded.message is message else None
    history = _task_history(session, ts, before_id=message.id, group=group, study=study, loaded=earlier)
    messages = [{"role": "system", "content": system_prompt(study, group, language, context)}]
    messages += history
    messages.append({"role": "user", "content": message.content})
    stored_context = context.to_dict()
    request = ChatRequest(
        messages=messages, temperature=runtime.settings.llm_temperature, max_tokens=runtime.settings.llm_max_tokens,
        purpose="reply", language=language, memory_context=stored_context, user_id=user.id,
        message_id=message.id,
    )
    study = runtime.study
    exposure = memory_exposure(stored_context, ts.task_id) if ts.task_id != study.task_ids[0] else None
    pacing = plan_for(session, study.chat.reply_pacing, group, study.enabled_conditions)
    received_at = message.created_at
    # Commit what building the context wrote (S1's embedding cache) so no write lock is held while the
    # model answers; what the build deferred (L4's recall) is written with the reply in _store_reply.
    session.commit()
    return PreparedReply(context=context, request=request, user_message=message, memory_group=group,
                         received_at=received_at, prepare_clock=prepare_clock, prepare_started=prepare_started,
                         pacing=pacing, exposure=exposure)


def system_prompt(study: Study, group: str, language: str, context: MemoryContext) -> str:
    prompts = study.system_prompts
    lang = prompt_language(language, study.default_language)
    key = registry.get(group).prompt_key
    return "\n\n".join([prompts["base"][lang], prompts[key][lang], context.render()])


def _task_history(session: Session, ts: TaskSession, *, before_id: int, group: str, study: Study,
                  loaded: list[dict[str, str]] | None = None) -> list[dict[str, str]]:
    """The task in progress as ordinary chat history (the same for every condition by default); ``loaded``:
    the history as storing the message read it, in this request."""
    if loaded is not None:
        history = list(loaded)
    else:
        # the two columns only: whole rows would decode every earlier reply's stored prompt and context
        # (JSON that grows with the conversation) for each new reply
        history = [{"role": role, "content": content} for role, content in session.execute(
            select(Message.role, Message.content).where(Message.task_session_id == ts.id, Message.id < before_id)
            .order_by(Message.id))]
    if not study.within_task_window_manipulated:
        return history
    # the switch makes the task in progress part of the manipulation: keep the condition's window only
    turns = registry.get(group).recent_turns(study)
    if turns <= 0:
        return []
    turn_starts = [i for i, m in enumerate(history) if m["role"] == "user"]
    return history[turn_starts[-turns]:] if len(turn_starts) > turns else history


def _store_reply(session: Session, runtime: Runtime, prepared: PreparedReply, result: ChatResult,
                 timing: ReplyTiming, *, repeat: bool = False) -> Message:
    """Store the reply; when a simultaneous request stored one first, a ``repeat`` (the same message
    sent again under its idempotency key) answers with that one, anything else is a conflict."""
    message = prepared.user_message
    for write in prepared.context.deferred:
        write.write(session)
    values = dict(
        user_id=message.user_id, task_session_id=message.task_session_id, task_id=message.task_id,
        role="assistant", content=result.text, created_at=runtime.clock.now(), reply_to_id=message.id,
        memory_group=prepared.memory_group, memory_context=prepared.context.to_dict(),
        prompt=prepared.request.messages, provider=result.provider, model=result.model,
        params={"temperature": prepared.request.temperature, "max_tokens": prepared.request.max_tokens,
                **result.params, "pacing": timing.audit()},
        prompt_tokens=result.prompt_tokens, completion_tokens=result.completion_tokens,
        latency_ms=result.latency_ms, attempts=result.attempts, memory_exposure=prepared.exposure,
        **timing.columns(),
    )
    try:
        session.flush()  # the deferred writes (L4's recall), which take the participant's lock first
        # the reply and the participant's lock in one statement (database.participant_lock.insert_held)
        reply = insert_held(session, Message, values, message.user_id)
        session.commit()
    except IntegrityError as exc:  # the unique reply_to_id: a simultaneous retry stored its reply first
        session.rollback()
        stored = _reply_of(session, message.id) if repeat else None
        if stored is not None:
            return stored
        raise Conflict("this message already has a reply", code="already_answered",
                       details={"message_id": message.id}) from exc
    if not registry.get(prepared.memory_group).has_turn_upkeep:
        return reply  # no upkeep to queue: no need to read the reply back
    try:
        after_reply(runtime, reply.id)
    except SQLAlchemyError as exc:  # the reply is stored; the sweep catches up its memory upkeep
        if not is_unavailable(exc):
            raise
        log.warning("memory upkeep after reply %s not queued, database unavailable: %s", reply.id, exc)
    return reply


def _reply_not_stored(exc: SQLAlchemyError, message_id: int) -> Unavailable:
    """The database was busy, shut down, unreachable or out of connections while the reply was built
    or stored: the message itself is saved."""
    log.warning("reply to message %s not stored, database unavailable: %s", message_id, getattr(exc, "orig", exc))
    return Unavailable("the database is busy, so the reply was not stored; your message is saved, "
                       "please ask again", code="reply_not_saved", details={"message_id": message_id})


def generate_reply(runtime: Runtime, user_message_id: int, *, repeat: bool = False,
                   session: Session | None = None) -> Message:
    """Build context and prompt, ask the provider chain, store the reply. 503 if every provider fails
    or the database cannot be reached. No connection is held while the model answers (``_prepare``
    commits first). ``session``: one to go on in and close (the request's, whose loaded message,
    participant and task are not read again); it must hold no connection (no transaction open)."""
    with session or runtime.db.Session() as session:
        try:
            prepared = _prepare(session, runtime, user_message_id)
            timing = prepared.timing()
            try:
                result = runtime.llm.complete(prepared.request)
            except AllProvidersFailed as exc:
                session.rollback()
                raise Unavailable("the assistant cannot answer right now; your message is saved",
                                  code="provider_unavailable",
                                  details={"message_id": user_message_id, "attempts": len(exc.attempts)}) from exc
            timing.blocking(timing.monotonic())  # held back here (chat.reply_pacing), before it is stored
            return _store_reply(session, runtime, prepared, result, timing, repeat=repeat)
        except SQLAlchemyError as exc:
            _forget(session)
            if is_unavailable(exc):
                raise _reply_not_stored(exc, user_message_id) from exc
            raise


def _forget(session: Session) -> None:
    """Roll back what the reply's session began; a connection that is already gone has nothing to undo."""
    try:
        session.rollback()
    except SQLAlchemyError:
        log.warning("rollback after a database error failed; the connection is discarded", exc_info=True)


def stream_reply(runtime: Runtime, user_message_id: int, *, repeat: bool = False,
                 session: Session | None = None) -> Iterator[dict[str, Any]]:
    """Like ``generate_reply`` but yields ``delta``/``reset`` events, then ``reply`` or ``error``: every
    stream ends with one of them, also when the database fails half-way. Until the first ``delta`` the
    page shows its typing indicator, also while pacing holds the reply back."""
    with session or runtime.db.Session() as session:
        try:
            prepared = _prepare(session, runtime, user_message_id)
            timing = prepared.timing()
            # held back before the first token (chat.reply_pacing), then every token at the model's pace
            for event in timing.stream(runtime.llm.stream(prepared.request)):
                if "result" in event:
                    reply = _store_reply(session, runtime, prepared, event["result"], timing, repeat=repeat)
                    yield {"reply": serialise_message(reply, participant_view=True)}
                else:
                    yield event
        except AllProvidersFailed:
            session.rollback()
            yield {"error": {"error": "provider_unavailable",
                             "message": "the assistant cannot answer right now; your message is saved",
                             "message_id": user_message_id, "retryable": True, "retry_after_seconds": retry_after()}}
        except Conflict as exc:
            yield {"error": {"error": exc.code, "message": exc.message, "message_id": user_message_id}}
        except (Gone, ParticipantErased):
            _forget(session)
            yield {"error": {"error": "participant_erased", "message": ERASED, "message_id": user_message_id}}
        except SQLAlchemyError as exc:
            _forget(session)
            if not is_unavailable(exc):
                log.exception("reply to message %s failed", user_message_id)
                yield {"error": {"error": "internal_error", "message_id": user_message_id,
                                 "message": "something went wrong on the server; your message is saved"}}
                return
            error = _reply_not_stored(exc, user_message_id)
            yield {"error": {"error": error.code, "message": error.message, "message_id": user_message_id,
                             "retryable": True, "retry_after_seconds": retry_after()}}


def unanswered_messages(session: Session, *, before: datetime, limit: int) -> list[int]:
    """Participant messages stored before ``before`` that still have no reply, in a chat that is still
    open, of a participant still active; oldest first."""
    reply = aliased(Message)
    return list(session.scalars(
        select(Message.id).join(TaskSession, TaskSession.id == Message.task_session_id)
        .join(User, User.id == Message.user_id)
        .where(Message.role == "user", Message.created_at <= before, TaskSession.status == "in_progress",
               TaskSession.phase == "chat", User.status == "active",
               ~select(reply.id).where(reply.reply_to_id == Message.id).exists())
        .order_by(Message.id).limit(limit)))


def answer_unanswered(runtime: Runtime, *, grace_seconds: float = ANSWER_GRACE_SECONDS, limit: int = 50,
                      budget_seconds: float = 60.0) -> dict[str, Any]:
    """Answer the messages that were stored and acknowledged but whose reply never came (the scheduler's
    job ``answer_unanswered``): an overloaded server answered their reply with a 503, or the client went
    away before asking again. The participant's page shows the reply at its next heartbeat.

    Only messages ``grace_seconds`` old (the page and the bots ask again before that) in a chat still open.
    A reply the client stored meanwhile wins (the unique ``reply_to_id``; this one is dropped). The run stops
    at the first 503 (the database or every provider is still unavailable: the next run tries again) and
    after ``budget_seconds``; an unexpected error is logged and the run goes on with the next message."""
    before = runtime.clock.now() - timedelta(seconds=grace_seconds)
    with runtime.db.Session() as session:
        pending = unanswered_messages(session, before=before, limit=limit)
    answered: list[int] = []
    outcome = {"pending": len(pending), "answered": answered, "already_answered": 0, "failed": 0, "stopped": None}
    started = time.monotonic()
    for message_id in pending:
        if time.monotonic() - started > budget_seconds:
            outcome["stopped"] = "time budget"
            break
        try:
            with runtime.db.Session() as session:
                replied = _reply_of(session, message_id) is not None
            if replied:  # the participant's own retry was quicker
                outcome["already_answered"] += 1
                continue
            reply = generate_reply(runtime, message_id, session=runtime.db.Session())
            answered.append(message_id)
            _note_late_reply(runtime, reply)
        except Conflict:  # the participant's own retry stored a reply first
            outcome["already_answered"] += 1
        except (Gone, ParticipantErased):  # erased since
            continue
        except Unavailable as exc:
            outcome["stopped"] = exc.code
            break
        except Exception:  # noqa: BLE001 - one message's failure must not stop the others
            outcome["failed"] += 1
            log.exception("answering the unanswered message %s failed", message_id)
    if pending:
        log.warning("answered %d of %d acknowledged message(s) left without a reply: %s", len(answered),
                    len(pending), outcome)
    return outcome


def _note_late_reply(runtime: Runtime, reply: Message) -> None:
    """The admin's audit log says which replies the scheduler gave, and how long after the message."""
    with runtime.db.session() as session:
        asked = session.get(Message, reply.reply_to_id)
        waited = (reply.created_at - asked.created_at).total_seconds() if asked is not None else None
        session.add(AuditLog(at=runtime.clock.now(), actor_user_id=None, action="late_reply",
                             target_user_id=reply.user_id,
                             details={"message_id": reply.reply_to_id, "reply_id": reply.id, "task_id": reply.task_id,
                                      "waited_seconds": None if waited is None else round(waited, 1)}))


def after_reply(runtime: Runtime, reply_id: int) -> None:
    """Per-turn memory upkeep off the request path (S1 rewrites its summary after every turn)."""
    with runtime.db.Session() as session:
        reply = session.get(Message, reply_id)
        if reply is None or not registry.get(reply.memory_group).has_turn_upkeep:  # None: erased since
            return
    runtime.background.submit(_turn_upkeep, runtime, reply_id)


def _turn_upkeep(runtime: Runtime, reply_id: int) -> None:
    db = runtime.background_db  # background work's own connections, never the requests'
    with db.Session() as session:
        reply = session.get(Message, reply_id)
        if reply is None:  # the participant was erased since
            return
        user_id = reply.user_id
    # One upkeep at a time per participant, across every process: two would race for the memory's
    # next version number. The guard is a database lease (services.platform.leases), not an in-process lock.
    try:
        with participant_guard(db, user_id), db.session() as session:
            reply = session.get(Message, reply_id)
            if reply is None:
                return
            upkeep = Upkeep(llm=runtime.consolidation_llm, clock=runtime.clock, study=runtime.study)
            registry.get(reply.memory_group).after_turn(session, upkeep, reply=reply)
    except ParticipantErased:
        log.info("memory upkeep of reply %s dropped: participant %s was erased", reply_id, user_id)
    except LeaseBusy:
        log.warning("memory upkeep of participant %s stayed busy; the sweep catches up reply %s", user_id, reply_id)


def catch_up_turn_upkeep(runtime: Runtime, *, grace_seconds: float = 60.0) -> list[int]:
    """Run the per-turn upkeep still missing ``grace_seconds`` after its reply (the scheduler's sweep):
    work a dead worker had queued, or given up while the guard stayed busy."""
    before = runtime.clock.now() - timedelta(seconds=grace_seconds)
    with runtime.background_db.Session() as session:
        pending = [reply_id for condition in registry.all_conditions() if condition.has_turn_upkeep
                   for reply_id in condition.turns_behind(session, before=before)]
    for reply_id in pending:
        _turn_upkeep(runtime, reply_id)
    return pending


def on_chat_ended(runtime: Runtime, task_session_id: int) -> None:
    """A task's chat closed (finished, time up, or abandoned): consolidate it off the request path."""
    runtime.background.submit(consolidate_session, runtime, task_session_id, "task_end")


def _consolidation(runtime: Runtime) -> ConsolidationService:
    # background work's own connections, never the requests'
    return ConsolidationService(runtime.background_db, runtime.settings, llm=runtime.consolidation_llm,
                                embedder=runtime.embedder, clock=runtime.clock)


def consolidate_session(runtime: Runtime, task_session_id: int, trigger: str) -> None:
    _consolidation(runtime).consolidate_task_session(task_session_id, trigger=trigger)


def consolidate_participant(runtime: Runtime, user_id: int, trigger: str) -> None:
    _consolidation(runtime).consolidate_all_pending(user_id=user_id, trigger=trigger)


def start_task(session: Session, runtime: Runtime, user: User, task_id: str) -> TaskSession:
    """Open a task, or resume its open attempt. Opening a new one first settles the memory of the earlier
    tasks (``settle_memory``), so the condition builds its context from consolidated memory."""
    tasks = task_service(session, runtime)
    if tasks.live_session(user.id, task_id) is None:  # not a resumed attempt
        user_id = user.id
        session.commit()  # no transaction stays open while the consolidation writes
        settle_memory(runtime, user_id, task_id)
    ts = tasks.start(user, task_id)
    tasks.commit()
    return ts


def settle_memory(runtime: Runtime, user_id: int, task_id: str, *, poll_seconds: float = 0.1) -> list[dict[str, Any]]:
    """Before ``task_id`` opens: consolidate the participant's closed, unconsolidated tasks now (in the
    background runner) and wait for them, or for a run another process holds, at most
    ``TASK_START_CONSOLIDATION_WAIT_SECONDS``. In pilot mode a task can open seconds after the previous one
    closed, and a context built before its consolidation would test an unconsolidated memory. What is still
    unconsolidated when the wait ends is returned, logged and noted in the audit log (``task_start_unconsolidated``)."""
    service = _consolidation(runtime)
    left = service.unconsolidated(user_id)
    if not left:
        return []
    bound = runtime.settings.task_start_consolidation_wait_seconds
    started = time.monotonic()
    if bound > 0:
        future = runtime.background.submit(consolidate_participant, runtime, user_id, "task_start")
        if future is not None:
            wait([future], timeout=bound)
        left = service.unconsolidated(user_id)
        while any("lease_until" in task for task in left) and time.monotonic() - started < bound:
            time.sleep(poll_seconds)
            left = service.unconsolidated(user_id)
    if left:
        _note_unconsolidated(runtime, user_id, task_id, left, time.monotonic() - started)
    return left


def _note_unconsolidated(runtime: Runtime, user_id: int, task_id: str, left: list[dict[str, Any]],
                         waited: float) -> None:
    tasks = [{**task, **{k: utc_iso(task[k]) for k in ("running_since", "lease_until") if k in task}}
             for task in left]
    log.warning("participant %s opens %s with unconsolidated memory after %.1f s: %s", user_id, task_id, waited, tasks)
    with runtime.db.session() as session:
        session.add(AuditLog(at=runtime.clock.now(), actor_user_id=None, action="task_start_unconsolidated",
                             target_user_id=user_id,
                             details={"task_id": task_id, "waited_seconds": round(waited, 2), "unconsolidated": tasks}))


def serialise_message(message: Message, *, participant_view: bool) -> dict[str, Any]:
    data = {
        "id": message.id,
        "task_id": message.task_id,
        "role": message.role,
        "content": message.content,
        "created_at": utc_iso(message.created_at),
        "reply_to_id": message.reply_to_id,
    }
    if not participant_view:
        data.update(
            memory_group=message.memory_group, memory_context=with_coded_notes(message.memory_context),
            prompt=message.prompt,
            provider=message.provider, model=message.model, params=message.params,
            prompt_tokens=message.prompt_tokens, completion_tokens=message.completion_tokens,
            latency_ms=message.latency_ms, attempts=message.attempts,
            model_first_token_ms=message.model_first_token_ms, model_total_ms=message.model_total_ms,
            pacing_delay_ms=message.pacing_delay_ms, visible_first_token_ms=message.visible_first_token_ms,
            memory_exposure=message.memory_exposure,
            emotional_salience=message.emotional_salience, consolidation_g=message.consolidation_g,
            recall_count=message.recall_count, typing_ms=message.typing_ms, keystrokes=message.keystrokes,
            pasted_chars=message.pasted_chars, focus_losses=message.focus_losses, input_events=message.input_events,
            composition_events=message.composition_events, input_kind=message.input_kind,
            last_recall_at=utc_iso(message.last_recall_at),
        )
    return data
