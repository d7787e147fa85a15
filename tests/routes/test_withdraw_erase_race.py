"""Issue 28 item 5: a participant's own withdrawal racing an admin's erasure. The withdrawal re-reads the
participant under the erasure's lock, so an erased tombstone never ends up ``withdrawn`` (which lifted the
erasure lock) and one participant is erased once: one 200, one participant_erased audit row. Real threads
against a served app, on SQLite and PostgreSQL; bounded: 8 trials of 2 requests."""
from __future__ import annotations

import pytest
from sqlalchemy import func, select

from database.models import AuditLog, User
from tests.routes.test_races import ERASE_BODY, _admin, _participant, all_at_once, leftovers, served

pytestmark = pytest.mark.postgres


def test_withdrawal_racing_an_erasure_leaves_one_erasure_and_an_erased_tombstone(app):
    runtime = app.extensions["memory_lab"]
    problems = []
    with served(app) as base:
        admin = _admin(app, base)
        for trial in range(8):
            participant, user_id = _participant(base, f"leaver{trial:02d}")
            assert participant.post("/api/tasks/T1/start").status_code == 201
            erase_too = trial % 2 == 0
            own, theirs = all_at_once([
                lambda p=participant, e=erase_too: p.post("/api/me/withdraw", json={"confirm": True, "erase": e}),
                lambda u=user_id: admin.post(f"/api/admin/participants/{u}/erase", json=ERASE_BODY)])
            participant.close()
            with runtime.db.Session() as session:
                status = session.get(User, user_id).status
                erasures = session.scalar(select(func.count(AuditLog.id)).where(
                    AuditLog.action == "participant_erased", AuditLog.target_user_id == user_id))
            if status != "erased":
                problems.append(f"trial {trial}: tombstone status {status}")
            if erasures != 1:
                problems.append(f"trial {trial}: {erasures} participant_erased rows")
            erased_ok = [r for r in (own, theirs) if r.status_code == 200 and
                         (r is theirs or r.json().get("erased"))]
            if len(erased_ok) != 1:
                problems.append(f"trial {trial}: {len(erased_ok)} erasures answered 200: "
                                f"{own.status_code} {own.text[:100]} / {theirs.status_code} {theirs.text[:100]}")
            if own.status_code not in (200, 401, 409, 410) or theirs.status_code not in (200, 409):
                problems.append(f"trial {trial}: answers {own.status_code} {own.text[:100]} / "
                                f"{theirs.status_code} {theirs.text[:100]}")
            if leftovers(app, user_id):
                problems.append(f"trial {trial}: rows left {leftovers(app, user_id)}")
            # the erasure lock holds: a second erasure is refused
            again = admin.post(f"/api/admin/participants/{user_id}/erase", json=ERASE_BODY)
            if again.status_code != 409:
                problems.append(f"trial {trial}: a second erasure answered {again.status_code}")
    assert problems == []
