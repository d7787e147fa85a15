"""L3 gist: the consolidated user profile (gist) + the last few turns before this task.

Consolidation merges each finished task into the profile (``services.memory.profile.schema``,
run by ``services.memory.consolidation_service`` for conditions that ``consolidates_profile``).
"""
from __future__ import annotations

from typing import Any

from sqlalchemy import bindparam, select

from database.models import ProfileVersion
from services.memory.base import BuildRequest, ManipulationCheck, MemoryCondition
from services.memory.context import MemoryContext, note, recent_turns, render_turns
from services.memory.profile.schema import render_profile

# on every reply of L3 and L4; built once (a statement built per call is coerced and given its cache key anew
# every time: docs/benchmarks.md, "CPU per reply, session 12")
_LATEST_GIST = (select(ProfileVersion)
                .where(ProfileVersion.user_id == bindparam("user_id"), ProfileVersion.kind == "gist")
                .order_by(ProfileVersion.version.desc()).limit(1))


def latest_profile(request: BuildRequest, context: MemoryContext) -> dict[str, Any] | None:
    """The newest gist profile version, rendered in the participant's language and capped."""
    version = request.session.scalar(_LATEST_GIST, {"user_id": request.user_id})
    if version is None:
        context.notes.append(note("no_profile"))
        return None
    text = render_profile(version.content, language=context.language,
                          max_chars=request.study.memory.gist_max_chars)
    return {"version": version.version, "text": text, "content": version.content, "task_id": version.task_id,
            "source": version.source, "profile_version_id": version.id}


def add_gist(request: BuildRequest, context: MemoryContext, turns: int) -> None:
    """The ``profile`` and ``recent_turns`` sections (shared by L3 and L4)."""
    profile = latest_profile(request, context)
    context.add_section("profile", profile, profile["text"] if profile else None)
    recent = recent_turns(request.session, request.user_id, request.task_session, turns)
    context.add_section("recent_turns", recent, render_turns(recent, context.language))


class GistCondition(MemoryCondition):
    """L3: the consolidated profile (gist) + the last N turns (default 3) before this task."""

    id = "L3"
    name = "gist"
    reads_earlier_turns = True
    consolidates_profile = True
    manipulation_check = ManipulationCheck("early T1 facts through its profile at T2-T4",
                                           profile_holds_early_facts=True)

    def build(self, request: BuildRequest, context: MemoryContext) -> None:
        add_gist(request, context, self.recent_turns(request.study))
