"""L2 working memory: the last N turns (default 7) before this task, verbatim."""
from __future__ import annotations

from services.memory.base import BuildRequest, ManipulationCheck, MemoryCondition
from services.memory.context import MemoryContext, recent_turns, render_turns


class WorkingCondition(MemoryCondition):
    id = "L2"
    name = "working"
    reads_earlier_turns = True
    manipulation_check = ManipulationCheck(
        "at T2 exactly the facts of T1's last turns, never one from outside its recent-turn window",
        recent_window_only=True)

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        recent = recent_turns(request.session, request.user_id, request.task_session,
                              self.recent_turns(request.study))
        context.add_section("recent_turns", recent, render_turns(recent, context.language))
