"""Issue 28 item 19: no text on the admin's plots (legends, bar labels, notes) is smaller than 9 pt."""
from __future__ import annotations

from datetime import timedelta

import matplotlib.text
import pytest

from database.models import Message, RecallEvent, TaskSession
from services.reporting import plots
from tests.services.reporting.test_plots import _participant


@pytest.fixture
def figures(monkeypatch):
    drawn = []
    real_png = plots._png

    def keep(figure):
        drawn.append(figure)
        return real_png(figure)

    monkeypatch.setattr(plots, "_png", keep)
    return drawn


def test_legends_and_labels_are_at_least_9_pt(db_session, study, clock, figures):
    now = clock.now()
    user = _participant(db_session, 1, "L4", now)
    _participant(db_session, 2, "L1", now)
    ts = TaskSession(user_id=user.id, task_id="T1", attempt=1, status="done", phase="closed", started_at=now,
                     last_activity_at=now, completed_at=now)
    db_session.add(ts)
    db_session.flush()
    memories = [Message(user_id=user.id, task_session_id=ts.id, task_id="T1", role="user", content=text,
                        created_at=now, consolidation_g=1.3, emotional_salience=e, recall_count=1)
                for text, e in (("我对海鲜过敏", 0.6), ("今天天气不错", 0.1))]
    db_session.add_all(memories)
    db_session.flush()
    db_session.add(RecallEvent(user_id=user.id, query_message_id=memories[1].id, memory_message_id=memories[0].id,
                               task_id="T2", rank=1, cosine=0.93, r=1.0, t=2 / 30, g_before=1.3, g_after=1.35,
                               p=0.95, p_final=0.98, salience=0.6, recalled=True, created_at=now + timedelta(days=2)))
    db_session.flush()
    for name in ("funnel", "group_sizes", "recall_events"):
        plots.PLOTS[name](db_session, study, language="en")
    plots.forgetting_curves(db_session, study, user.id, now=now + timedelta(days=16), day_seconds=86400)
    assert len(figures) == 4
    legends = 0
    for figure in figures:
        for text in figure.findobj(matplotlib.text.Text):
            if text.get_text().strip() and text.get_visible():
                assert text.get_fontsize() >= 9, (text.get_text(), text.get_fontsize())
        legends += sum(1 for ax in figure.axes if ax.get_legend() is not None)
    assert legends >= 3  # funnel, group sizes, recall events and the curves each have one
