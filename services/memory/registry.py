"""The memory conditions a study can assign, by id. Code that needs a condition asks here.

Adding a condition: write its module (a ``MemoryCondition`` subclass), register it
below (or, for a condition outside this package, call ``register`` before the app is
built), and give it a system-prompt paragraph and ``conditions`` entry in the study
data (docs/architecture.md).
"""
from __future__ import annotations

from services.memory.base import MemoryCondition
from services.memory.gist import GistCondition
from services.memory.hybrid import HybridCondition
from services.memory.recursive_summary import RecursiveSummaryCondition
from services.memory.sensory import SensoryCondition
from services.memory.structured_summary import StructuredSummaryCondition
from services.memory.working import WorkingCondition
from services.study.definition import Study


class UnknownCondition(ValueError):
    """No memory condition is registered under this id."""


_CONDITIONS: dict[str, MemoryCondition] = {}


def register(condition: MemoryCondition) -> MemoryCondition:
    """Make ``condition`` assignable under its id; an id is registered once."""
    if condition.id in _CONDITIONS:
        raise ValueError(f"memory condition {condition.id!r} is already registered")
    _CONDITIONS[condition.id] = condition
    return condition


def unregister(condition_id: str) -> None:
    """Remove a condition (tests that register their own)."""
    _CONDITIONS.pop(condition_id, None)


def get(condition_id: str) -> MemoryCondition:
    try:
        return _CONDITIONS[condition_id]
    except KeyError:
        raise UnknownCondition(f"unknown memory group {condition_id!r}; registered: {', '.join(ids())}") from None


def check_study(study: Study) -> None:
    """Refuse a study that names a condition nobody registered, or leaves one without its prompt paragraph."""
    for condition_id in study.conditions:
        condition = get(condition_id)
        if condition.prompt_key not in study.system_prompts:
            raise ValueError(f"system_prompts has no paragraph {condition.prompt_key!r} for memory condition "
                             f"{condition_id!r}")


def ids() -> tuple[str, ...]:
    return tuple(_CONDITIONS)


def all_conditions() -> tuple[MemoryCondition, ...]:
    return tuple(_CONDITIONS.values())


for _condition in (SensoryCondition(), WorkingCondition(), GistCondition(), HybridCondition(),
                   StructuredSummaryCondition(), RecursiveSummaryCondition()):
    register(_condition)
