"""Questionnaires: items per task from the study definition, validated on the server."""
from __future__ import annotations

import random
import secrets
from collections.abc import Mapping
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from database.models import QuestionnaireResponse, TaskSession
from services.platform.clock import Clock
from services.platform.errors import BadInput, Conflict
from services.study.definition import Study, Task, shown
from services.study.timer_service import localised

# "attention": an instructed-response check, shown as a scale (or as choices when it has options);
# its expected answer stays on the server (services.participants.quality counts the failures)
ITEM_TYPES = {"likert", "ios", "choice", "text", "attention"}


def items_for_task(study: Study, task: Task, language: str,
                   order: list[Any] | None = None) -> list[dict[str, Any]]:
    """The task's items, flattened from its instruments, in the participant's language; in ``order`` (a
    task session's recorded ``questionnaire_order``) when given, else in the study file's order.

    ``instrument_title`` is the heading participants see (the instrument's neutral ``heading``, empty
    without one), never the construct's ``title``: naming the construct ("manipulation check",
    "affective trust") to participants invites demand effects. Exports and the codebook keep the title."""
    items = []
    for name, ordered in _ordered(study, task, order):
        instrument = study.instruments[name]
        for item in ordered:
            kind = item.get("type", "likert")
            items.append({
                "id": item["id"],
                "instrument": name,
                "instrument_title": localised(instrument.heading, language) if instrument.heading else "",
                "type": kind,
                "required": item.get("required", kind != "text"),
                "min": item.get("min", 1 if kind == "attention" else None),
                "max": item.get("max", 7 if kind == "attention" else None),
                "options": [
                    {"value": o["value"], "label": localised(o.get("label"), language)} for o in item.get("options", [])
                ] or None,
                "text": localised(item["text"], language),
                "show_if": dict(item["show_if"]) if item.get("show_if") else None,
                # words for points of the scale (study file: labels); the page's own anchors otherwise
                "labels": {point: localised(text, language) for point, text in (item.get("labels") or {}).items()}
                or None,
            })
    return items


def _ordered(study: Study, task: Task, order: list[Any] | None) -> list[tuple[str, list[Mapping[str, Any]]]]:
    """(instrument, its items) in the recorded order; an order that no longer fits the task is not used."""
    natural = [(name, list(study.instruments[name].items)) for name in task.questionnaire]
    if not order:
        return natural
    by_id = {name: {item["id"]: item for item in items} for name, items in natural}
    try:
        ordered = [(name, [by_id[name][item_id] for item_id in ids]) for name, ids in order]
    except (KeyError, TypeError, ValueError):
        return natural
    if sorted(n for n, _ in ordered) != sorted(by_id) or any(len(i) != len(by_id[n]) for n, i in ordered):
        return natural
    return ordered


def draw_order(study: Study, task: Task, rng: random.Random | None = None) -> list[Any] | None:
    """A random questionnaire order for one participant, where the task or its instruments ask for one:
    [[instrument, [item ids]], ...]; None when everything is shown in the study file's order."""
    randomised = [study.instruments[name].randomise_items for name in task.questionnaire]
    if not task.randomise_instruments and not any(randomised):
        return None
    rng = rng or secrets.SystemRandom()
    order = []
    for name, shuffle in zip(task.questionnaire, randomised, strict=True):
        ids = [item["id"] for item in study.instruments[name].items]
        if shuffle:
            rng.shuffle(ids)
        order.append([name, ids])
    if task.randomise_instruments:
        rng.shuffle(order)
    return order


def items_for_session(study: Study, task: Task, ts: TaskSession | None, language: str) -> list[dict[str, Any]]:
    """The items of a task session's questionnaire, in its own order: drawn once (when the study randomises
    it) and recorded on the session (``questionnaire_order``; the caller commits), so reloading the page or
    submitting shows and checks the same order."""
    if ts is not None and ts.questionnaire_order is None:
        ts.questionnaire_order = draw_order(study, task)
    return items_for_task(study, task, language, order=ts.questionnaire_order if ts is not None else None)


def validate_answers(items: list[dict[str, Any]], answers: Any, max_text_chars: int) -> dict[str, Any]:
    """Return cleaned answers or raise BadInput naming every bad item: ``details.items`` maps an item id to its
    problem's code (``required``, ``out_of_range``, ...; the pages' words are the catalogs' item_problem.<code>)."""
    if not isinstance(answers, dict):
        raise BadInput("answers must be an object of item id -> value", code="invalid_answers")
    by_id = {item["id"]: item for item in items}
    problems: dict[str, str] = {}
    for key in answers:
        if key not in by_id:
            problems[str(key)] = "unknown_item"
    cleaned: dict[str, Any] = {}
    for item_id, item in by_id.items():
        value = answers.get(item_id)
        if not shown(item, cleaned):  # its display condition is not met: it was not shown, so not answered
            if value is not None:
                problems[item_id] = "not_shown"
            continue
        if value is None or (isinstance(value, str) and not value.strip()):
            if item["required"]:
                problems[item_id] = "required"
            continue
        problem = _check(item, value, max_text_chars)
        if problem:
            problems[item_id] = problem
        else:
            cleaned[item_id] = value.strip() if isinstance(value, str) else value
    if problems:
        raise BadInput("invalid answers: " + ", ".join(sorted(problems)), code="invalid_answers",
                       details={"items": problems})
    return cleaned


def _check(item: dict[str, Any], value: Any, max_text_chars: int) -> str | None:
    kind = item["type"]
    if kind == "attention":
        kind = "choice" if item["options"] else "likert"
    if kind in ("likert", "ios"):
        # bool is an int in Python; a checkbox value is not a scale answer
        if isinstance(value, bool) or not isinstance(value, int):
            return "not_whole_number"
        if not item["min"] <= value <= item["max"]:
            return "out_of_range"
    elif kind == "choice":
        allowed = [o["value"] for o in item["options"] or []]
        if value not in allowed:
            return "not_an_option"
    elif kind == "text":
        if not isinstance(value, str):
            return "not_text"
        if len(value) > (item.get("max") or max_text_chars):
            return "too_long"
    return None


def store_answers(session: Session, ts: TaskSession, items: list[dict[str, Any]], cleaned: dict[str, Any],
                  clock: Clock) -> int:
    now = clock.now()
    instruments = {item["id"]: item["instrument"] for item in items}
    for item_id, value in cleaned.items():
        session.add(QuestionnaireResponse(
            user_id=ts.user_id, task_session_id=ts.id, task_id=ts.task_id, instrument=instruments[item_id],
            item_id=item_id, value=value, submitted_at=now,
        ))
    try:
        session.flush()
    except IntegrityError as exc:  # uq_response_item: a simultaneous submission of this questionnaire won
        session.rollback()
        raise Conflict("this questionnaire has already been submitted", code="questionnaire_already_submitted") \
            from exc
    return len(cleaned)
