"""Balanced, server-side assignment to memory conditions by permuted blocks.

Each block holds every enabled condition ``block_multiple`` times in a random
order; participants fill blocks in registration order, so group sizes never
differ by more than one block. The draw is written once (unique per user and
per block slot) with an audit row and never re-drawn, also not on withdrawal.
With a seed the block order is reproducible; without one it comes from the OS
and each row stores its whole block so the sequence can be audited.
"""
from __future__ import annotations

import random
import secrets

from sqlalchemy import func, select, update
from sqlalchemy.orm import Session

from database.models import Assignment, AssignmentCounter, AuditLog, User
from services.platform.clock import Clock
from services.study.definition import Study


def permuted_block(conditions: list[str], multiple: int, seed: int | None, block_index: int) -> list[str]:
    block = [c for c in conditions for _ in range(multiple)]
    rng = random.Random(f"{seed}:{block_index}") if seed is not None else secrets.SystemRandom()
    rng.shuffle(block)
    return block


def assign(session: Session, user: User, study: Study, clock: Clock, seed: int | None = None) -> Assignment:
    """Assign ``user`` to the next slot, in the caller's transaction (the caller commits).

    The slot comes from the one ``assignment_counter`` row, bumped by an UPDATE: its row lock (held
    until the registration commits) makes a simultaneous registration wait a moment and then take
    the following slot, on PostgreSQL as on SQLite, so two never draw the same one."""
    existing = session.scalar(select(Assignment).where(Assignment.user_id == user.id))
    if existing:
        return existing
    conditions = list(study.enabled_conditions)
    multiple = study.assignment.block_multiple
    if seed is None:
        seed = study.assignment.seed
    block_size = len(conditions) * multiple
    block_index, slot_index = divmod(_take_slot(session), block_size)
    if slot_index == 0:
        block = permuted_block(conditions, multiple, seed, block_index)
    else:
        # the block's first slot was committed before this one could be taken (the row lock)
        first = session.scalar(
            select(Assignment).where(Assignment.block_index == block_index).order_by(Assignment.slot_index)
        )
        block = list(first.block_sequence) if first else permuted_block(conditions, multiple, seed, block_index)
    now = clock.now()
    assignment = Assignment(
        user_id=user.id, memory_group=block[slot_index], block_index=block_index, slot_index=slot_index,
        block_sequence=block, seed=seed, created_at=now,
    )
    session.add(assignment)
    session.add(AuditLog(
        at=now, actor_user_id=None, action="assignment", target_user_id=user.id,
        details={"memory_group": assignment.memory_group, "block_index": block_index,
                 "slot_index": slot_index, "block_size": block_size, "seeded": seed is not None},
    ))
    session.flush()
    return assignment


def hold_slots(session: Session) -> None:
    """Take the counter row's lock for the rest of the caller's transaction without taking a slot, so that
    accounts counted after it cannot grow until this transaction ends (the panel's enrolment cap)."""
    session.execute(update(AssignmentCounter).where(AssignmentCounter.id == 1)
                    .values(next_slot=AssignmentCounter.next_slot))


def _take_slot(session: Session) -> int:
    """The next running slot number, counted on under the counter row's lock."""
    bump = (update(AssignmentCounter).where(AssignmentCounter.id == 1)
            .values(next_slot=AssignmentCounter.next_slot + 1).returning(AssignmentCounter.next_slot))
    return session.execute(bump).scalar_one() - 1


def group_counts(session: Session) -> dict[str, int]:
    """Participants per condition; test (pilot) participants and preview accounts are not counted."""
    rows = session.execute(select(Assignment.memory_group, func.count()).join(User, User.id == Assignment.user_id)
                           .where(User.role == "participant").group_by(Assignment.memory_group))
    return {group: count for group, count in rows}
