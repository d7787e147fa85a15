"""What a memory condition is: the interface every condition module implements.

A condition declares
* how it builds the memory context of a reply (``build``),
* what it does after each stored turn (``after_turn``; off the request path),
* what it does when a task is consolidated (``consolidates_profile``: the gist
  profile is merged; ``consolidate``: its own long-term memory, in the run's transaction),
* its system-prompt paragraph (``prompt_key`` into the study's ``system_prompts``),
* how many turns of the task in progress it keeps when the within-task window is
  part of the manipulation (``recent_turns``, from the study's ``conditions``),
* what the manipulation check expects of it (``manipulation_check``).
Conditions register in ``services.memory.registry``; nobody else switches on their ids.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar

from sqlalchemy.orm import Session

from database.models import ConsolidationRun, Message, TaskSession, User
from services.llm.chain import LLMService
from services.llm.embedding_service import EmbeddingProvider
from services.memory.context import MemoryContext
from services.platform.clock import Clock
from services.recall.parameters import RecallParams
from services.study.definition import Study


@dataclass
class BuildRequest:
    """Everything a condition may read to build one reply's context."""

    session: Session
    study: Study
    user_id: int
    task_session: TaskSession
    query: Message | None
    clock: Clock
    day_seconds: float
    embedder: EmbeddingProvider | None = None
    recall_params: RecallParams | None = None


@dataclass
class Upkeep:
    """What per-turn and consolidation upkeep may use: the consolidation model chain, the clock, the study."""

    llm: LLMService
    clock: Clock
    study: Study


@dataclass
class ConsolidationStep:
    """What a condition's own consolidation did, for the run's ``steps``; ``failure`` fails the run."""

    key: str
    result: dict[str, Any] = field(default_factory=dict)
    failure: str | None = None  # why the update failed (the failure log's text); None: it did not
    failure_class: str = "InvalidMemoryUpdate"
    failure_message: str = ""  # the run's error


@dataclass(frozen=True)
class BeyondBaseline:
    """The condition must hand over more than ``baseline``: at least as many planted facts (mean per task),
    and per task a minimum share of probe replies whose context holds a planted specific that the
    baseline's context for the same message lacks (``min_share``: task id -> share)."""

    baseline: str
    min_share: tuple[tuple[str, float], ...] = ()

    def share_needed(self, task_id: str) -> float:
        return dict(self.min_share).get(task_id, 0.0)


@dataclass(frozen=True)
class ManipulationCheck:
    """What the manipulation check (scripts/simulate_participants.py) expects of a condition's memory
    context in the bots' probe replies. The script evaluates these declarations, never condition ids, so a
    new condition is checked by declaring its expectations here. ``description`` is for people."""

    description: str = ""
    holds_no_fact: bool = False  # nothing the bots planted reaches the context
    recent_window_only: bool = False  # only facts from its recent-turn window (``recent_turns``)
    profile_holds_early_facts: bool = False  # early T1 facts through its consolidated profile at T2-T4
    beyond: BeyondBaseline | None = None
    recalls_messages: bool = False  # specific earlier messages recalled, each with content, in every language
    holds_facts_at: tuple[tuple[str, tuple[str, ...]], ...] = ()  # (task id, planted fact ids) it must hold


class MemoryCondition:
    """A memory condition; subclasses set the class attributes and override what they do."""

    id: ClassVar[str]
    name: ClassVar[str]
    consolidates_profile: ClassVar[bool] = False
    has_turn_upkeep: ClassVar[bool] = False
    # its context holds verbatim turns of earlier tasks (``context.recent_turns``): storing a message reads them
    # with the task so far, in one statement (``context.read_task_and_earlier_turns``)
    reads_earlier_turns: ClassVar[bool] = False
    manipulation_check: ClassVar[ManipulationCheck] = ManipulationCheck()

    @property
    def prompt_key(self) -> str:
        """The key of this condition's paragraph in the study's ``system_prompts``."""
        return self.id

    def recent_turns(self, study: Study) -> int:
        """Turns of verbatim conversation this condition keeps (``conditions.<id>.recent_turns``)."""
        return study.conditions[self.id].recent_turns

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        """Add this condition's sections to ``context``."""

    def after_turn(self, session: Session, upkeep: Upkeep, *, reply: Message) -> None:
        """Upkeep after a stored reply (run off the request path when ``has_turn_upkeep``)."""

    def turns_behind(self, session: Session, *, before: datetime) -> list[int]:
        """Replies written before ``before`` whose ``after_turn`` never ran (its worker died): one
        reply id per participant, the latest, since an upkeep catches up every turn before it."""
        return []

    def consolidate(self, session: Session, upkeep: Upkeep, *, user: User, task_session: TaskSession,
                    run: ConsolidationRun | None) -> ConsolidationStep | None:
        """This condition's own long-term memory update for a finished task, in the run's transaction."""
        return None
