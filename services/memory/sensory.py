"""L1 sensory: nothing from earlier tasks; the system prompt says the assistant remembers nothing."""
from __future__ import annotations

from services.memory.base import ManipulationCheck, MemoryCondition


class SensoryCondition(MemoryCondition):
    id = "L1"
    name = "sensory"
    manipulation_check = ManipulationCheck("none of the planted facts", holds_no_fact=True)
