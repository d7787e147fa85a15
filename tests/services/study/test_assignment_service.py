from collections import Counter

import pytest
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from database.models import Assignment, AuditLog, User
from services.participants import account_service
from services.study.assignment_service import assign, group_counts, permuted_block


def register_many(db_session, study, clock, n, seed=42):
    users = []
    for i in range(n):
        users.append(account_service.register(
            db_session, username=f"p{i:03d}", password="password-123", consent=True, language="zh",
            study=study, clock=clock, seed=seed))
    return users


@pytest.mark.postgres
def test_forty_participants_with_a_fixed_seed_are_balanced_within_one_block(db_session, study, clock):
    register_many(db_session, study, clock, 40)
    counts = group_counts(db_session)
    assert set(counts) == {"L1", "L2", "L3", "L4"}
    assert max(counts.values()) - min(counts.values()) <= 1  # one block holds one slot per condition
    assert sum(counts.values()) == 40


def test_every_prefix_stays_within_one_block(db_session, study, clock):
    users = register_many(db_session, study, clock, 23)
    seen: Counter = Counter()
    for user in users:
        seen[user.memory_group] += 1
        assert max(seen.values()) - min(seen.get(g, 0) for g in ("L1", "L2", "L3", "L4")) <= 1


def test_same_seed_gives_the_same_sequence_and_another_seed_a_different_one():
    a = [permuted_block(["L1", "L2", "L3", "L4"], 1, 7, b) for b in range(10)]
    b = [permuted_block(["L1", "L2", "L3", "L4"], 1, 7, b) for b in range(10)]
    c = [permuted_block(["L1", "L2", "L3", "L4"], 1, 8, b) for b in range(10)]
    assert a == b
    assert a != c
    assert all(sorted(block) == ["L1", "L2", "L3", "L4"] for block in a)


def test_block_multiple_puts_each_condition_in_a_block_that_many_times(db_session, study, clock):
    study = study.with_overrides({"assignment": {"block_multiple": 2}})
    users = register_many(db_session, study, clock, 8)
    assert Counter(u.memory_group for u in users) == {"L1": 2, "L2": 2, "L3": 2, "L4": 2}
    rows = db_session.scalars(select(Assignment).order_by(Assignment.id)).all()
    assert {r.block_index for r in rows} == {0}
    assert sorted(r.slot_index for r in rows) == list(range(8))


def test_unseeded_blocks_are_balanced_and_store_their_sequence(db_session, study, clock):
    users = register_many(db_session, study, clock, 8, seed=None)
    assert Counter(u.memory_group for u in users) == {"L1": 2, "L2": 2, "L3": 2, "L4": 2}
    rows = db_session.scalars(select(Assignment).order_by(Assignment.id)).all()
    for row in rows:
        assert row.block_sequence[row.slot_index] == row.memory_group
    assert rows[0].block_sequence == rows[3].block_sequence  # one block, one stored order


def test_assignment_is_written_once_with_an_audit_row(db_session, study, clock):
    (user,) = register_many(db_session, study, clock, 1)
    first = user.memory_group
    again = assign(db_session, user, study, clock, seed=999)
    assert again.memory_group == first
    assert db_session.scalar(select(AuditLog).where(AuditLog.action == "assignment")).target_user_id == user.id
    db_session.add(Assignment(user_id=user.id, memory_group="L1", block_index=5, slot_index=0,
                              block_sequence=["L1"], seed=None, created_at=clock.now()))
    with pytest.raises(IntegrityError):
        db_session.flush()
    db_session.rollback()


def test_a_taken_block_slot_cannot_be_given_twice(db_session, study, clock):
    users = register_many(db_session, study, clock, 1)
    other = User(username="other", password_hash="x", created_at=clock.now())
    db_session.add(other)
    db_session.flush()
    db_session.add(Assignment(user_id=other.id, memory_group="L2", block_index=0,
                              slot_index=users[0].assignment.slot_index, block_sequence=[], seed=None,
                              created_at=clock.now()))
    with pytest.raises(IntegrityError):
        db_session.flush()
    db_session.rollback()


def test_only_enabled_conditions_are_drawn(db_session, study, clock):
    study = study.with_overrides({"enabled_conditions": ["L1", "L4", "S1", "R1"]})
    users = register_many(db_session, study, clock, 8)
    assert Counter(u.memory_group for u in users) == {"L1": 2, "L4": 2, "S1": 2, "R1": 2}
