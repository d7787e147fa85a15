"""Participant API: tasks, chat (JSON or SSE), finish, questionnaire.

Views parse, authorise, call a service and serialise. A participant only ever
reaches their own task sessions and messages: every lookup is by the logged-in
user's id, and nothing here reveals the memory condition.
"""
from __future__ import annotations

import json
import time
from collections.abc import Iterator

from flask import Blueprint, Response, request, stream_with_context
from flask_login import current_user
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from database.models import Message, TaskSession
from routes.access import (
    close_db_session,
    configured_limit,
    current,
    db_session,
    json_body,
    limiter,
    ok,
    participant_required,
    pin_study,
    runtime,
    take_db_session,
)
from services.chat import chat_service
from services.chat.chat_service import serialise_message, task_service
from services.participants.panel_service import completion_for
from services.platform.clock import utc_iso
from services.study.questionnaire_service import items_for_session, store_answers, validate_answers

bp = Blueprint("participant", __name__, url_prefix="/api")
# on every task request once a second study version is published; built once (a statement built per call is
# coerced and given its cache key anew each time: docs/benchmarks.md, "CPU per reply, session 12")
_RUNNING_VERSION = select(TaskSession.study_version).where(
    TaskSession.user_id == bindparam("user_id"), TaskSession.task_id == bindparam("task_id"),
    TaskSession.status == "in_progress")


@bp.before_request
def _running_task_version():
    """A task started under an earlier study version runs to its end under that version."""
    task_id = (request.view_args or {}).get("task_id")
    studies = runtime().studies
    # versions off (no table: every task runs under the file's study) or one version: nothing to look up
    if (task_id is None or studies is None or not studies.enabled or studies.only_version
            or not current_user.is_authenticated):
        return
    # in the request's session, whose transaction the login's read began (one connection for the request)
    version = db_session().scalar(_RUNNING_VERSION, {"user_id": current_user.id, "task_id": task_id})
    if version is not None and version != studies.live_version:
        pin_study(studies.study(version))


def _tasks():
    return task_service(db_session(), runtime())


@bp.get("/tasks")
@participant_required
def list_tasks():
    user = current()
    tasks = _tasks().overview(user)
    # "completed" once every task is done (the account stays active: the debrief, the consent copy)
    finished = user.status == "active" and bool(tasks) and all(t["status"] == "done" for t in tasks)
    return ok({"tasks": tasks, "pilot_mode": runtime().settings.pilot_mode, "now": _now_iso(),
               "participant_status": "completed" if finished else user.status})


@bp.get("/tasks/<task_id>")
@participant_required
def task_detail(task_id: str):
    """The task's status and, once started, its conversation so far (for resuming the page)."""
    user = current()
    tasks = _tasks()
    status = tasks.status_of(user, task_id)
    live = tasks.live_session(user.id, task_id)
    messages = []
    if live is not None and live.status in ("in_progress", "done"):
        messages = [serialise_message(m, participant_view=True) for m in db_session().scalars(
            select(Message).where(Message.task_session_id == live.id).order_by(Message.id))]
    status["messages"] = messages
    status["participant_status"] = user.status  # "withdrawn": the page says so instead of "not yet"
    # whether finishing this task properly earns a completion code (the default study has none): the page
    # then never promises one
    offered = completion_for(runtime().study, task_id, user)
    status["completion_code_offered"] = bool(offered and offered.get("completion_code"))
    if status["status"] == "done":
        status["completion"] = completion_for(runtime().study, task_id, user, incomplete=status["incomplete"])
    return ok({"task": status})


@bp.post("/tasks/<task_id>/start")
@participant_required
def start_task(task_id: str):
    user = current()
    ts = chat_service.start_task(db_session(), runtime(), user, task_id)
    return ok({"task": _tasks().status_of(user, task_id), "task_session_id": ts.id}, 201)


@bp.post("/tasks/<task_id>/heartbeat")
@participant_required
def heartbeat(task_id: str):
    """The page is open and in use: credit active time (idle gaps are not credited). ``last_message_id`` lets
    the page see that another tab added to the conversation, and reload it."""
    user = current()
    tasks = _tasks()
    ts = tasks.running_session(user, task_id, phase="chat")
    tasks.touch(ts)
    tasks.commit()
    return ok({"task": tasks.status_of(user, task_id), "last_message_id": tasks.last_message_id(ts)})


def _wants_stream() -> bool:
    return request.args.get("stream") in ("1", "true") or "text/event-stream" in request.headers.get("Accept", "")


@bp.post("/tasks/<task_id>/messages")
@participant_required
@limiter.limit(configured_limit("messages"))
def post_message(task_id: str):
    """Store the message, then answer it. With an idempotency key (``Idempotency-Key`` header or
    ``idempotency_key`` field) a repeat answers with the message stored first and its reply."""
    rt = runtime()
    data = json_body()
    key = chat_service.idempotency_key(request.headers.get("Idempotency-Key"), data.get("idempotency_key"))
    accepted = chat_service.accept_or_repeat(db_session(), rt, current(), task_id, data.get("content"),
                                             key=key, signals=data)
    return _reply(rt, accepted)


@bp.post("/tasks/<task_id>/messages/<id:message_id>/reply")
@participant_required
def retry_reply(task_id: str, message_id: int):
    """Ask again for the reply to a stored message whose reply failed; the message is not re-sent."""
    rt = runtime()
    session = db_session()
    user = current()
    task_service(session, rt).running_session(user, task_id, phase="chat")
    message = chat_service.unanswered_message(session, user, task_id, message_id)
    # claim the reply before the model is called: simultaneous retries answer 409 at once instead of each
    # asking the model for a reply only one of them can store; the claim ends with this response. The claim
    # takes a connection of its own, so the request's transaction ends first and gives its connection back
    # (a one-connection pool would otherwise wait on itself); the rows read stay loaded.
    session.commit()
    release = chat_service.claim_reply(rt, message.id)
    streaming = False
    try:
        answer = _reply(rt, chat_service.Accepted(message), release=release)
        streaming = _wants_stream()
        return answer
    finally:
        if not streaming:  # a stream gives the claim back when it ends (_sse)
            release()


def _reply(rt, accepted: chat_service.Accepted, *, release=None):
    message = accepted.message
    user_view = serialise_message(message, participant_view=True)
    headers = {"Idempotent-Replayed": "true"} if accepted.repeated else {}
    if accepted.reply is not None:
        close_db_session()
        reply_view = serialise_message(accepted.reply, participant_view=True)
        if _wants_stream():
            return Response([_event("message", user_view), _event("reply", reply_view)],
                            mimetype="text/event-stream", headers={"Cache-Control": "no-cache", **headers})
        return _created(user_view, reply_view, headers)
    # the reply goes on in the request's session, which holds no connection now (none is held while the
    # model answers) and keeps the message, the participant and the task loaded for the prompt
    session = take_db_session()
    # a keyed message answered by a simultaneous repeat first gets that reply, not a conflict
    repeat = message.idempotency_key is not None
    if _wants_stream():
        events = _sse(rt, session, message.id, user_view, repeat=repeat, release=release)
        return Response(stream_with_context(events), mimetype="text/event-stream",
                        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", **headers})
    reply = chat_service.generate_reply(rt, message.id, repeat=repeat, session=session)
    return _created(user_view, serialise_message(reply, participant_view=True), headers)


def _created(user_view: dict, reply_view: dict, headers: dict[str, str]):
    response, status = ok({"message": user_view, "reply": reply_view}, 201)
    response.headers.update(headers)
    return response, status


# A streamed reply's text goes out at most this often: the deltas that arrive meanwhile leave as one event
# (the first at once). A model streams a token every 20-30 ms; one event, one JSON encoding and one socket
# write per token was most of what streaming added to a reply's CPU, and ten updates a second read as smooth.
STREAM_FLUSH_SECONDS = 0.1


def coalesce_deltas(events: Iterator[dict], every: float = STREAM_FLUSH_SECONDS,
                    clock=time.monotonic) -> Iterator[dict]:
    """The same events, with the ``delta`` text that arrives within ``every`` seconds of the last one sent
    joined into one ``delta``. Held text goes out with the next event that arrives after ``every``, and always
    before any other event (``reset``, ``reply``, ``error``), so no text is lost or reordered; a delta waits
    at most until the model's next token."""
    held: list[str] = []
    sent_at = float("-inf")
    for event in events:
        if "delta" in event:
            held.append(event["delta"])
            now = clock()
            if now - sent_at >= every:
                yield {"delta": "".join(held)}
                held, sent_at = [], now
            continue
        if held:
            yield {"delta": "".join(held)}
            held = []
        yield event
    if held:
        yield {"delta": "".join(held)}


def _sse(rt, session: Session, message_id: int, user_view: dict, *, repeat: bool, release=None) -> Iterator[str]:
    try:
        yield _event("message", user_view)
        for event in coalesce_deltas(chat_service.stream_reply(rt, message_id, repeat=repeat, session=session)):
            if "delta" in event:
                yield _event("delta", {"text": event["delta"]})
            elif "reset" in event:
                yield _event("reset", {})
            elif "reply" in event:
                yield _event("reply", event["reply"])
            elif "error" in event:
                yield _event("error", event["error"])
    finally:
        if release is not None:  # a retry's claim on the reply (chat_service.claim_reply)
            release()


def _event(name: str, data: dict) -> str:
    return f"event: {name}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


@bp.post("/tasks/<task_id>/finish")
@participant_required
def finish(task_id: str):
    user = current()
    tasks = _tasks()
    ts = tasks.running_session(user, task_id, phase="chat")
    try:
        tasks.finish_chat(ts)
    finally:
        tasks.commit()  # the activity credited by finish_chat is kept even when it is too early
    return ok({"task": tasks.status_of(user, task_id)})


@bp.get("/tasks/<task_id>/questionnaire")
@participant_required
def get_questionnaire(task_id: str):
    tasks = _tasks()
    definition = tasks.task_definition(task_id)
    user = current()
    items = items_for_session(runtime().study, definition, tasks.live_session(user.id, task_id), user.language)
    db_session().commit()  # the order drawn for this participant, when the study randomises it
    return ok({"task_id": task_id, "items": items})


@bp.post("/tasks/<task_id>/questionnaire")
@participant_required
def post_questionnaire(task_id: str):
    user = current()
    session = db_session()
    rt = runtime()
    tasks = task_service(session, rt)
    definition = tasks.task_definition(task_id)
    ts = tasks.running_session(user, task_id, phase="questionnaire")
    items = items_for_session(rt.study, definition, ts, user.language)
    cleaned = validate_answers(items, json_body().get("answers"), rt.study.limits.max_text_answer_chars)
    stored = store_answers(session, ts, items, cleaned, rt.clock)
    tasks.complete(ts)
    tasks.commit()
    return ok({"stored": stored, "task": tasks.status_of(user, task_id),
               "completion": completion_for(rt.study, task_id, user, incomplete=ts.outcome == "incomplete")}, 201)


def _now_iso() -> str:
    return utc_iso(runtime().clock.now())
