"""R1: recursively summarised long-term memory (seeds 002 and 004, "LLM-Rsum").

Two steps, as in the paper:

1. *memory iteration* - at the end of each task, old memory + the task's
   dialogue → new memory (``consolidate_task``, called by the consolidation
   service for participants in group R1);
2. *memory-grounded reply* - every reply of a later task gets the latest memory
   in its context (``build_context``).

The memory is dual-track: ``memory_summary`` items ``{id, summary}`` and
``raw_memory_entries`` ``{id, user_question, assistant_answer, notes}``, one
entry per summary item under the same id. An LLM's new memory is validated
(JSON schema, id sync, non-empty, the participant's language) with one repair
retry; an update that stays invalid keeps the previous memory. With the offline
template responder (not an LLM) a deterministic rule-based iteration builds the
memory instead, labelled ``offline-rules``. Every iteration is a new
``ProfileVersion(kind="r1_memory")``; old versions stay.
"""
from __future__ import annotations

import copy
import json
import logging
import re
from collections.abc import Sequence
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import ConsolidationRun, Message, ProfileVersion, TaskSession, User
from services.memory import versioned_json as vj
from services.memory.base import BuildRequest, ConsolidationStep, ManipulationCheck, MemoryCondition, Upkeep
from services.memory.context import MemoryContext, earlier_done_sessions, latest_version_within, note, pair_turns
from services.platform.clock import Clock
from services.study.definition import Study, thaw
from services.text.clipping import PUNCTUATION, clip
from services.text.keywords import keyword_jaccard, keyword_set, shared_keywords, split_sentences
from services.text.languages import detect, prompt_language

log = logging.getLogger(__name__)

KIND = "r1_memory"
MAX_ITEMS = 200

_ID = {"type": "string", "minLength": 1, "maxLength": 64}
MEMORY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "R1 recursive memory",
    "type": "object",
    "properties": {
        "memory_summary": {
            "type": "array",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {"id": _ID, "summary": {"type": "string", "minLength": 1, "maxLength": 500}},
                "required": ["id", "summary"],
                "additionalProperties": False,
            },
        },
        "raw_memory_entries": {
            "type": "array",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {
                    "id": _ID,
                    "user_question": {"type": "string", "maxLength": 4000},
                    "assistant_answer": {"type": "string", "maxLength": 8000},
                    "notes": {"type": "string", "maxLength": 1000},
                },
                "required": ["id", "user_question", "assistant_answer", "notes"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["memory_summary", "raw_memory_entries"],
    "additionalProperties": False,
}

LABELS = {
    "asked": {"zh": "用户问", "en": "The participant asked"},
    "said": {"zh": "用户说", "en": "The participant said"},
    "answered": {"zh": "助手答", "en": "the assistant answered"},
    "raw": {"zh": "原始问答", "en": "Verbatim exchanges"},
    "q": {"zh": "问", "en": "Q"},
    "a": {"zh": "答", "en": "A"},
    "notes": {"zh": "备注", "en": "notes"},
    "updated": {"zh": "{task} 更新，此前：{old}", "en": "updated in {task}; before: {old}"},
}
_QUESTION = re.compile(r"[?？]\s*$|(吗|呢)\s*[。.!！]?\s*$", re.IGNORECASE)
_CUE = re.compile(r"我|\b(i|i'm|my|me)\b|过敏|喜欢|讨厌|担心|害怕|计划|打算|希望|想|allerg|like|love|hate|worr|"
                  r"afraid|plan|hope|want", re.IGNORECASE)


def r1_settings(study: Study) -> dict[str, Any]:
    """The study's R1 parameters (``memory.r1``: rendered size, offline merge rule, token budget)."""
    return thaw(study.memory.r1)


def empty_memory() -> dict[str, Any]:
    return {"memory_summary": [], "raw_memory_entries": []}


def memory_part(content: dict[str, Any] | None) -> dict[str, Any]:
    """The two tracks of a stored version (without its bookkeeping)."""
    if not content:
        return empty_memory()
    return {"memory_summary": copy.deepcopy(content.get("memory_summary") or []),
            "raw_memory_entries": copy.deepcopy(content.get("raw_memory_entries") or [])}


# ---------------------------------------------------------------------------
# Validation
# ---------------------------------------------------------------------------


def id_sync_errors(memory: dict[str, Any]) -> list[str]:
    """Problems with the id pairing of the two tracks: duplicates, or an id in one track only."""
    errors: list[str] = []
    summary_ids = [item["id"] for item in memory["memory_summary"]]
    raw_ids = [entry["id"] for entry in memory["raw_memory_entries"]]
    for track, ids in (("memory_summary", summary_ids), ("raw_memory_entries", raw_ids)):
        duplicates = sorted({i for i in ids if ids.count(i) > 1})
        if duplicates:
            errors.append(f"{track} repeats ids {duplicates}")
    only_summary = sorted(set(summary_ids) - set(raw_ids))
    only_raw = sorted(set(raw_ids) - set(summary_ids))
    if only_summary:
        errors.append(f"ids {only_summary} have a summary item but no raw entry")
    if only_raw:
        errors.append(f"ids {only_raw} have a raw entry but no summary item")
    return errors


def validate_memory(obj: Any, *, language: str | None = None,
                    previous: dict[str, Any] | None = None) -> list[str]:
    """Every reason ``obj`` cannot become the new memory (empty list: it can).

    Schema, then id sync; with ``language``, summaries must be in it; with a non-empty
    ``previous``, an update may not come back empty (that would wipe the memory)."""
    errors = vj.schema_errors(obj, MEMORY_SCHEMA)
    if errors:
        return errors
    errors = id_sync_errors(obj)
    if language and not vj.language_matches([i["summary"] for i in obj["memory_summary"]], language):
        errors.append(f"summaries must be written in {vj.LANGUAGE_NAMES[language]}, the participant's language")
    if previous and previous["memory_summary"] and not obj["memory_summary"]:
        errors.append("the new memory is empty although the previous one was not")
    return errors


# ---------------------------------------------------------------------------
# Rendering (the memory block of a reply's context)
# ---------------------------------------------------------------------------


def render_memory(memory: dict[str, Any], language: str, max_chars: int = 3000) -> str:
    """Summary lines (all of them if they fit), then verbatim entries while room remains."""
    lang = prompt_language(language)
    lines = [f"[{item['id']}] {item['summary']}" for item in memory["memory_summary"]]
    text = "\n".join(lines)
    if len(text) > max_chars:
        return clip(text, max_chars, rstrip=True)
    raw_lines: list[str] = []
    budget = max_chars - len(text) - len(LABELS["raw"][lang]) - 3
    for entry in memory["raw_memory_entries"]:
        line = (f"[{entry['id']}] {LABELS['q'][lang]}: {entry['user_question']} | "
                f"{LABELS['a'][lang]}: {entry['assistant_answer']}")
        if entry.get("notes"):
            line += f" | {LABELS['notes'][lang]}: {entry['notes']}"
        if len(line) + 1 > budget:
            break
        raw_lines.append(line)
        budget -= len(line) + 1
    if raw_lines:
        text += f"\n{LABELS['raw'][lang]}:\n" + "\n".join(raw_lines)
    return text


# ---------------------------------------------------------------------------
# Offline: deterministic rule-based memory iteration
# ---------------------------------------------------------------------------


def _clip(text: str, limit: int) -> str:
    return clip(text, limit, trim=PUNCTUATION)


def summarise_exchange(user_text: str, assistant_text: str, *, assistant_is_llm: bool, task_id: str,
                       language: str) -> str:
    """One sentence for an exchange: the participant's most informative sentence(s), plus the
    assistant's first sentence when a real LLM wrote it, tagged with the task."""
    lang = prompt_language(language)
    sentences = split_sentences(user_text) or [user_text]
    ranked = sorted(sentences, key=lambda s: -(len(keyword_set(s)) + (2 if _CUE.search(s) else 0)))
    chosen = [ranked[0]]
    if len(ranked) > 1 and len(ranked[0]) + len(ranked[1]) <= 80 and keyword_set(ranked[1]):
        chosen.append(ranked[1])
    chosen.sort(key=sentences.index)  # keep the participant's order
    joiner = "，" if lang == "zh" else "; "
    core = joiner.join(_clip(s, 80) for s in chosen)
    asked = bool(_QUESTION.search(chosen[-1]))
    sep = "：" if lang == "zh" else ": "
    text = f"{LABELS['asked' if asked else 'said'][lang]}{sep}{core}"
    if assistant_is_llm and assistant_text:
        first = next(iter(split_sentences(assistant_text)), "")
        if first:
            text += f"{'；' if lang == 'zh' else '; '}{LABELS['answered'][lang]}{sep}{_clip(first, 60)}"
    return f"{text} [{task_id}]"


def _new_id(task_id: str, taken: set[str]) -> str:
    n = 1
    while f"m-{task_id}-{n:02d}" in taken:
        n += 1
    return f"m-{task_id}-{n:02d}"


def rule_based_iteration(previous: dict[str, Any] | None, turns: Sequence[dict[str, Any]], *, task_id: str,
                         language: str, merge_overlap: float = 0.25, merge_min_shared: int = 2) -> dict[str, Any]:
    """Old memory + one task's exchanges → new memory, deterministically.

    Each exchange with content words becomes an item. When it shares at least
    ``merge_min_shared`` keywords and a keyword Jaccard of at least ``merge_overlap`` with an
    existing item's question (the best such item), that item is updated in place - same id,
    newer wording, the old summary kept in ``notes``; otherwise a new id ``m-<task>-<nn>`` is
    added. Small talk without content words is not remembered.
    ``turns``: ``{"user", "assistant", "assistant_is_llm"}``, oldest first."""
    lang = prompt_language(language)
    memory = memory_part(previous)
    summaries = {item["id"]: item for item in memory["memory_summary"]}
    entries = {entry["id"]: entry for entry in memory["raw_memory_entries"]}
    for turn in turns:
        user_text = (turn.get("user") or "").strip()
        keys = keyword_set(user_text)
        if not keys:
            continue
        assistant_text = (turn.get("assistant") or "").strip()
        summary = summarise_exchange(user_text, assistant_text, assistant_is_llm=bool(turn.get("assistant_is_llm")),
                                     task_id=task_id, language=lang)
        best_id, best = None, 0.0
        for entry_id, entry in entries.items():
            other = keyword_set(entry["user_question"])
            overlap = keyword_jaccard(keys, other)
            if overlap > best and overlap >= merge_overlap and shared_keywords(keys, other) >= merge_min_shared:
                best_id, best = entry_id, overlap
        if best_id is not None:
            old = vj.strip_tag(summaries[best_id]["summary"])
            summaries[best_id]["summary"] = summary
            entries[best_id].update(
                user_question=user_text, assistant_answer=assistant_text,
                notes=_clip(LABELS["updated"][lang].format(task=task_id, old=old), 300))
            continue
        new_id = _new_id(task_id, set(summaries))
        item = {"id": new_id, "summary": summary}
        entry = {"id": new_id, "user_question": user_text, "assistant_answer": assistant_text, "notes": ""}
        memory["memory_summary"].append(item)
        memory["raw_memory_entries"].append(entry)
        summaries[new_id], entries[new_id] = item, entry
    return memory


# ---------------------------------------------------------------------------
# The LLM iteration
# ---------------------------------------------------------------------------

ITERATION_SYSTEM_PROMPT = """You curate the long-term memory an AI assistant keeps about one participant of a \
study. The memory has two tracks that share ids:
- "memory_summary": items {{"id", "summary"}}; each summary is one sentence saying what the participant said or \
asked and what the assistant concluded;
- "raw_memory_entries": items {{"id", "user_question", "assistant_answer", "notes"}}; the participant's words and \
the assistant's answer copied verbatim, "notes" for extra context or "".
You receive the previous memory and the whole conversation of the task that has just ended ({task}). Build the \
new memory step by step:
1. keep every previous item that is still true, under its existing id;
2. when the new conversation updates or corrects an item, rewrite it under the same id and say what changed in \
its notes;
3. add an item for each new thing worth remembering (facts about the participant, preferences, plans, feelings, \
decisions, answers given), with new ids of the form "m-{task}-01", "m-{task}-02", ...; merge repetitions;
4. leave out greetings and small talk;
5. every id must appear exactly once in memory_summary and exactly once in raw_memory_entries.
Write summaries and notes in {language}. Answer with only a JSON object of the form \
{{"memory_summary": [...], "raw_memory_entries": [...]}}."""


def iteration_prompt(previous: dict[str, Any], turns: Sequence[dict[str, Any]], *, task_id: str,
                     language: str) -> list[dict[str, str]]:
    dialogue = [{"user_question": t["user"], "assistant_answer": t.get("assistant") or ""} for t in turns]
    system = ITERATION_SYSTEM_PROMPT.format(task=task_id, language=vj.LANGUAGE_NAMES[language])
    user = ("Previous memory:\n" + json.dumps(previous, ensure_ascii=False, indent=1)
            + f"\n\nConversation of task {task_id}, in order:\n" + json.dumps(dialogue, ensure_ascii=False, indent=1))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------------------
# Database
# ---------------------------------------------------------------------------


def _versions(session: Session, user_id: int) -> list[ProfileVersion]:
    """The participant's R1 memory versions, newest first."""
    return list(session.scalars(
        select(ProfileVersion).where(ProfileVersion.user_id == user_id, ProfileVersion.kind == KIND)
        .order_by(ProfileVersion.version.desc())
    ).all())


def _basis_session(row: ProfileVersion) -> int | None:
    return ((row.content or {}).get("basis") or {}).get("task_session_id")


def consolidate_task(session: Session, *, llm: vj.ModelChain, user: User, task_session: TaskSession,
                     run: ConsolidationRun | None, clock: Clock, study: Study) -> dict[str, Any]:
    """Memory iteration for one finished task; returns what it did (for ``run.steps``).

    ``status``: ``created`` (a new version), ``exists`` (this task is already in the memory:
    a rerun is a no-op), ``no_dialogue`` (nothing to remember), or ``kept_previous`` (no
    provider answered, or the model's output stayed invalid after one repair retry; the
    failure is logged and the previous memory stays current - the caller may mark its run
    failed so a later run retries). The caller commits."""
    versions = _versions(session, user.id)
    done = next((row for row in versions if _basis_session(row) == task_session.id), None)
    if done is not None:
        return {"status": "exists", "version": done.version, "source": done.source}
    cfg = r1_settings(study)
    messages = session.scalars(
        select(Message).where(Message.task_session_id == task_session.id).order_by(Message.id)).all()
    providers = {m.id: m.provider for m in messages if m.role == "assistant"}
    turns = pair_turns(list(messages))
    for turn in turns:
        turn["assistant_is_llm"] = providers.get(turn["assistant_message_id"]) not in (None, "offline")
    turns = [t for t in turns if t["user"] and t["user"].strip()]
    if not turns:
        return {"status": "no_dialogue", "version": None, "source": None}
    # The newest memory, whichever task it came from: a task consolidated late (after a failed
    # run) must still build on everything remembered since, or later memories would be lost.
    previous_row = versions[0] if versions else None
    previous = memory_part(previous_row.content if previous_row else None)
    language = detect([t["user"] for t in turns], default=user.language or "zh")
    task_id = task_session.task_id

    answer = None
    if not vj.chain_is_offline(llm):
        answer = vj.ask_for_json(
            llm, iteration_prompt(previous, turns, task_id=task_id, language=language),
            check=lambda obj: validate_memory(obj, language=language, previous=previous),
            purpose="consolidation", language=language, user_id=user.id, max_tokens=cfg["max_tokens"])
        if answer.obj is None and not answer.offline:
            vj.record_invalid_output(session, answer=answer, purpose="r1_memory", user_id=user.id, at=clock.now())
            log.warning("R1 memory iteration for user %s, %s kept the previous memory: %s",
                        user.id, task_id, answer.errors)
            return {"status": "kept_previous", "version": previous_row.version if previous_row else None,
                    "source": None, "error": "; ".join(answer.errors)[:500], "model_calls": answer.calls}
    if answer is None or answer.offline:
        memory = rule_based_iteration(previous, turns, task_id=task_id, language=language,
                                      merge_overlap=cfg["merge_overlap"], merge_min_shared=cfg["merge_min_shared"])
        source = vj.OFFLINE_SOURCE
    else:
        memory, source = answer.obj, vj.model_source(answer.result)

    # The rule-based path cannot break these invariants; checking anyway guards the stored data.
    problems = validate_memory(memory)
    if problems:
        raise ValueError(f"R1 memory failed validation: {problems}")
    previous_ids = {i["id"] for i in previous["memory_summary"]}
    new_ids = {i["id"] for i in memory["memory_summary"]}
    row = ProfileVersion(
        user_id=user.id, kind=KIND, version=vj.next_version(session, user.id, KIND), task_id=task_id,
        content={**memory, "basis": {"task_session_id": task_session.id, "language": language,
                                     "previous_version": previous_row.version if previous_row else None}},
        rendered=render_memory(memory, language, cfg["max_chars"]), source=source,
        consolidation_run_id=run.id if run is not None else None, created_at=clock.now(),
    )
    session.add(row)
    session.flush()
    return {"status": "created", "version": row.version, "source": source, "items": len(new_ids),
            "added": len(new_ids - previous_ids), "dropped": len(previous_ids - new_ids), "turns": len(turns)}


def build_context(session: Session, *, context: MemoryContext, user_id: int, task_session: TaskSession,
                  query: Message | None, study: Study) -> None:
    """Add the ``r1_memory`` section: the latest memory built from earlier completed tasks (step 2
    grounds the reply in it). The whole memory is given; ``query`` does not select from it."""
    earlier = set(session.scalars(earlier_done_sessions(user_id, task_session)).all())
    row = latest_version_within(session, user_id, KIND, earlier)
    if row is None:
        context.notes.append(note("r1_empty"))
        context.add_section("r1_memory", None)
        return
    memory = memory_part(row.content)
    block = {
        "version": row.version, "task_id": row.task_id, "source": row.source,
        "text": render_memory(memory, context.language, r1_settings(study)["max_chars"]),
        "content": memory,
    }
    context.add_section("r1_memory", block, block["text"])


class RecursiveSummaryCondition(MemoryCondition):
    """R1: the recursively updated memory (summary items + verbatim entries), iterated at each task's end."""

    id = "R1"
    name = "recursive_summary"
    manipulation_check = ManipulationCheck(
        "the latest recursive memory built from earlier completed tasks, the allergy at T2",
        holds_facts_at=(("T2", ("allergy",)),))

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        build_context(request.session, context=context, user_id=request.user_id, task_session=request.task_session,
                      query=request.query, study=request.study)

    def consolidate(self, session: Session, upkeep: Upkeep, *, user: User, task_session: TaskSession,
                    run: ConsolidationRun | None) -> ConsolidationStep:
        result = consolidate_task(session, llm=upkeep.llm, user=user, task_session=task_session, run=run,
                                  clock=upkeep.clock, study=upkeep.study)
        if result.get("status") != "kept_previous":
            return ConsolidationStep("r1", result)
        # The run fails so the sweep retries it; the failure row is written with the run's failure.
        return ConsolidationStep("r1", result, failure=str(result.get("error") or "")[:500],
                                 failure_class="InvalidR1Memory",
                                 failure_message=f"R1 memory update kept the previous memory: {result.get('error')}")
