"""Versioned JSON memories written by a model: ask for JSON (one repair retry), validate, version.

S1's structured summary and R1's recursive memory are both JSON documents a model
rewrites; each rewrite becomes a new ``ProfileVersion`` of its kind and old versions
stay. Parsing and schema checks come from ``services.text.structured_output``.
"""
from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import ProfileVersion, ProviderFailure
from services.llm.chain import LLMService
from services.llm.types import AllProvidersFailed, ChatProvider, ChatRequest, ChatResult, ProviderError
from services.text.languages import detect
from services.text.structured_output import StructuredOutputError, parse_json_object, validate

OFFLINE_SOURCE = "offline-rules"
ModelChain = LLMService | ChatProvider  # a provider chain, or one provider on its own (tests, tools)
LANGUAGE_NAMES = {"zh": "Simplified Chinese (简体中文)", "en": "English"}




def schema_errors(obj: Any, schema: dict[str, Any]) -> list[str]:
    """The schema violation of ``obj`` (as a one-item list), or [] when it conforms."""
    try:
        validate(obj, schema)
    except StructuredOutputError as exc:
        return [str(exc)]
    return []


def language_matches(texts: Iterable[str], language: str) -> bool:
    """True when the written values are in ``language`` (or there is nothing to judge)."""
    joined = " ".join(t for t in texts if t)
    if not re.search(r"[A-Za-z\u3400-\u4dbf\u4e00-\u9fff]", joined):
        return True
    return detect(joined, default=language) == language


def chain_is_offline(llm: ModelChain) -> bool:
    """True when every provider of the chain is the offline template responder (not an LLM)."""
    providers = getattr(llm, "providers", None) or [llm]
    return all(getattr(p, "name", None) == "offline" for p in providers)


@dataclass
class JsonAnswer:
    """Outcome of asking a model for JSON: the valid object, or why there is none."""

    obj: dict[str, Any] | None = None
    result: ChatResult | None = None
    offline: bool = False  # the chain fell back to the offline responder: use the rules instead
    errors: list[str] = field(default_factory=list)
    calls: int = 0


def ask_for_json(llm: ModelChain, messages: list[dict[str, str]], *, check: Callable[[dict[str, Any]], list[str]],
                 purpose: str, language: str, user_id: int | None, max_tokens: int) -> JsonAnswer:
    """Ask for a JSON object; on an invalid answer ask once more with the errors, then give up.

    ``check`` returns the problems of a parsed object (schema, id sync, language ...)."""
    answer = JsonAnswer()
    conversation = list(messages)
    for attempt in range(2):
        request = ChatRequest(messages=conversation, temperature=0.2, max_tokens=max_tokens, json_mode=True,
                              purpose=purpose, language=language, user_id=user_id)
        try:
            result = llm.complete(request)
        except (AllProvidersFailed, ProviderError) as exc:
            answer.errors.append(f"no provider answered: {str(exc)[:300]}")
            return answer
        answer.calls += 1
        answer.result = result
        if result.provider == "offline":
            answer.offline = True
            return answer
        try:
            obj = parse_json_object(result.text)
            problems = check(obj)
        except ValueError as exc:
            obj, problems = None, [str(exc)]
        if not problems:
            answer.obj = obj
            answer.errors = []
            return answer
        answer.errors = problems
        if attempt == 0:
            conversation = conversation + [
                {"role": "assistant", "content": result.text[:6000]},
                {"role": "user", "content": (
                    "That output cannot be used: " + "; ".join(problems)
                    + ". Reply again with only the corrected JSON object, no other text.")},
            ]
    return answer


def record_invalid_output(session: Session, *, answer: JsonAnswer, purpose: str, user_id: int,
                          at: datetime) -> None:
    """Log a model's unusable output in the provider failure log (the admin's failure view)."""
    result = answer.result
    session.add(ProviderFailure(
        at=at, provider=result.provider if result else "unknown", model=result.model if result else None,
        purpose=purpose, error_class="InvalidModelOutput" if result else "NoProvider",
        message="; ".join(answer.errors)[:2000], user_id=user_id,
    ))


def next_version(session: Session, user_id: int, kind: str) -> int:
    latest = session.scalar(select(func.max(ProfileVersion.version)).where(
        ProfileVersion.user_id == user_id, ProfileVersion.kind == kind))
    return (latest or 0) + 1


def model_source(result: ChatResult) -> str:
    return f"{result.provider}:{result.model}"[:64]


def strip_tag(text: str) -> str:
    return re.sub(r"\s*\[T[^\]]*\]\s*$", "", text)
