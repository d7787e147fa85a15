"""A burst of simultaneous registrations all succeed and stay balanced: slots come from one counter
row bumped under its row lock, so on PostgreSQL two registrations never draw the same slot (they
used to collide on a row count and answer 409 assignment_busy for 13-38 % of a burst)."""
from __future__ import annotations

import threading

import pytest
from sqlalchemy import select

from database.models import Assignment
from tests.conftest import ApiClient

pytestmark = pytest.mark.postgres

BURST = 20  # the default pool (10 + 10 overflow): every registration has a connection at once


def test_a_simultaneous_burst_of_registrations_all_succeeds_balanced(app, study):
    clients = [ApiClient(app.test_client()) for _ in range(BURST)]
    for api in clients:
        api.csrf()
    start = threading.Barrier(BURST)
    statuses: list[int] = []

    def register(number: int) -> None:
        start.wait()
        statuses.append(clients[number].register(f"burst{number:03d}").status_code)

    threads = [threading.Thread(target=register, args=(n,)) for n in range(BURST)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(statuses) == [201] * BURST

    with app.extensions["memory_lab"].db.Session() as session:
        rows = session.execute(select(Assignment.block_index, Assignment.slot_index, Assignment.memory_group)).all()
    block_size = len(study.enabled_conditions) * study.assignment.block_multiple
    assert sorted(b * block_size + s for b, s, _ in rows) == list(range(BURST))  # every slot once, none skipped
    counts = {group: sum(1 for *_, g in rows if g == group) for group in study.enabled_conditions}
    assert max(counts.values()) - min(counts.values()) <= study.assignment.block_multiple
