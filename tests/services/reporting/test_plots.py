"""Admin plots: valid PNGs with and without data, and the statistics drawn on them."""
from __future__ import annotations

import io
import math
from datetime import timedelta

import matplotlib.image
import pytest
from sqlalchemy import select

from database.models import Assignment, Message, QuestionnaireResponse, RecallEvent, TaskSession, User
from services.platform.errors import BadInput, NotFound
from services.reporting import plots

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _image(png: bytes):
    assert png.startswith(PNG_SIGNATURE)
    return matplotlib.image.imread(io.BytesIO(png), format="png")


def test_t_quantiles_and_confidence_interval_by_hand():
    assert plots.t_quantile_975(1) == 12.706
    assert plots.t_quantile_975(4) == 2.776
    assert plots.t_quantile_975(35) == 2.042  # between table rows: the more conservative lower df
    assert plots.t_quantile_975(1000) == 1.960
    with pytest.raises(ValueError):
        plots.t_quantile_975(0)
    mean, half = plots.mean_ci95([1, 2, 3, 4, 5])
    # sd = sqrt(2.5) = 1.5811; half = 2.776 * 1.5811 / sqrt(5) = 1.9629
    assert mean == 3.0
    assert half == pytest.approx(2.776 * math.sqrt(2.5) / math.sqrt(5))
    assert half == pytest.approx(1.9629, abs=1e-4)
    assert plots.mean_ci95([4.0]) == (4.0, None)
    assert plots.mean_ci95([6, 6, 6]) == (6.0, 0.0)


@pytest.mark.parametrize("name", ["funnel", "group_sizes", "questionnaire_means", "recall_events"])
def test_every_plot_is_a_valid_png_before_any_data(db_session, study, name):
    image = _image(plots.PLOTS[name](db_session, study))
    assert image.shape[0] > 100 and image.shape[1] > 100


def _participant(session, n: int, group: str, at) -> User:
    user = User(username=f"p{n}", password_hash="x", role="participant", participant_code=f"P{n:04d}",
                language="zh", created_at=at, consent_at=at, status="active")
    session.add(user)
    session.flush()
    session.add(Assignment(user_id=user.id, memory_group=group, block_index=0, slot_index=n, block_sequence=[],
                           created_at=at))
    return user


def _answer(session, user: User, task_id: str, item_id: str, instrument: str, value, at) -> None:
    ts = session.scalar(select(TaskSession).where(TaskSession.user_id == user.id, TaskSession.task_id == task_id))
    if ts is None:
        ts = TaskSession(user_id=user.id, task_id=task_id, attempt=1, status="done", phase="closed", started_at=at,
                         last_activity_at=at, completed_at=at)
        session.add(ts)
        session.flush()
    session.add(QuestionnaireResponse(user_id=user.id, task_session_id=ts.id, task_id=task_id,
                                      instrument=instrument, item_id=item_id, value=value, submitted_at=at))


def test_scale_scores_average_items_per_person_then_group(db_session, study, clock):
    now = clock.now()
    a = _participant(db_session, 1, "L1", now)
    b = _participant(db_session, 2, "L1", now)
    c = _participant(db_session, 3, "L4", now)
    for item, value in (("pu_1", 7), ("pu_2", 5), ("pu_3", 3)):
        _answer(db_session, a, "T1", item, "perceived_understanding", value, now)
    _answer(db_session, b, "T1", "pu_1", "perceived_understanding", 2, now)
    _answer(db_session, c, "T1", "pu_1", "perceived_understanding", 6, now)
    _answer(db_session, c, "T1", "close_1", "closeness", 4, now)
    _answer(db_session, c, "T4", "open_1", "open_questions", "很好", now)  # free text is not a scale score
    db_session.flush()
    scores = plots.scale_scores(db_session, study)
    assert sorted(scores["perceived_understanding"][("L1", "T1")]) == [2.0, 5.0]
    assert scores["perceived_understanding"][("L4", "T1")] == [6.0]
    assert scores["closeness"] == {("L4", "T1"): [4.0]}
    assert "open_questions" not in scores
    png = plots.questionnaire_means(db_session, study)
    assert _image(png).shape[1] > 400
    assert plots.questionnaire_means(db_session, study, "perceived_understanding") != png
    with pytest.raises(BadInput):
        plots.questionnaire_means(db_session, study, "no_such_instrument")


def test_charts_with_data_differ_from_the_empty_chart(db_session, study, clock):
    empty = {name: plots.PLOTS[name](db_session, study) for name in ("funnel", "group_sizes", "recall_events")}
    now = clock.now()
    users = [_participant(db_session, n, group, now + timedelta(hours=n))
             for n, group in enumerate(["L1", "L2", "L3", "L4", "L4"])]
    db_session.add(TaskSession(user_id=users[0].id, task_id="T1", attempt=1, status="done", phase="closed",
                               started_at=now, last_activity_at=now, completed_at=now))
    ts = TaskSession(user_id=users[3].id, task_id="T2", attempt=1, status="in_progress", phase="chat",
                     started_at=now, last_activity_at=now)
    db_session.add(ts)
    db_session.flush()
    memory = Message(user_id=users[3].id, task_session_id=ts.id, task_id="T1", role="user", content="我养猫",
                     created_at=now)
    query = Message(user_id=users[3].id, task_session_id=ts.id, task_id="T2", role="user", content="猫",
                    created_at=now + timedelta(days=2))
    db_session.add_all([memory, query])
    db_session.flush()
    for recalled in (True, False, False):
        db_session.add(RecallEvent(user_id=users[3].id, query_message_id=query.id, memory_message_id=memory.id,
                                   task_id="T2", rank=1, cosine=0.9, r=0.8, t=0.06, g_before=1.2, g_after=1.3,
                                   p=0.9, p_final=0.92, salience=0.4, recalled=recalled, created_at=query.created_at))
    db_session.flush()
    for name, before in empty.items():
        after = plots.PLOTS[name](db_session, study)
        _image(after)
        assert after != before, name


def test_forgetting_curves_of_a_participant(db_session, study, clock):
    now = clock.now()
    user = _participant(db_session, 1, "L4", now)
    with pytest.raises(NotFound):
        plots.forgetting_curves(db_session, study, 999, now=now, day_seconds=86400)
    empty = plots.forgetting_curves(db_session, study, user.id, now=now, day_seconds=86400)
    _image(empty)
    ts = TaskSession(user_id=user.id, task_id="T1", attempt=1, status="done", phase="closed", started_at=now,
                     last_activity_at=now, completed_at=now)
    db_session.add(ts)
    db_session.flush()
    memories = [Message(user_id=user.id, task_session_id=ts.id, task_id="T1", role="user", content=text,
                        created_at=now, consolidation_g=1.0 + 0.5 * e, emotional_salience=e, recall_count=0)
                for text, e in (("我对海鲜过敏", 0.6), ("今天天气不错", 0.1))]
    db_session.add_all(memories)
    db_session.flush()
    recall_at = now + timedelta(days=2)
    db_session.add(RecallEvent(user_id=user.id, query_message_id=memories[1].id, memory_message_id=memories[0].id,
                               task_id="T2", rank=1, cosine=0.93, r=1.0, t=2 / 30, g_before=1.3, g_after=1.35,
                               p=0.95, p_final=0.98, salience=0.6, recalled=True, created_at=recall_at))
    memories[0].recall_count = 1
    memories[0].consolidation_g = 1.35
    db_session.flush()
    png = plots.forgetting_curves(db_session, study, user.id, now=now + timedelta(days=16), day_seconds=86400)
    assert _image(png).shape[1] >= 800
    assert png != empty


def test_render_dispatches_and_validates(db_session, study, clock):
    kwargs = {"now": clock.now(), "day_seconds": 86400.0}
    assert plots.render("funnel", db_session, study, args={}, **kwargs).startswith(PNG_SIGNATURE)
    with pytest.raises(NotFound):
        plots.render("pie", db_session, study, args={}, **kwargs)
    with pytest.raises(BadInput):
        plots.render("forgetting_curves", db_session, study, args={}, **kwargs)
    with pytest.raises(BadInput):
        plots.render("forgetting_curves", db_session, study, args={"user_id": "abc"}, **kwargs)


def test_plot_routes(app, admin_client, make_participant):
    alice = make_participant("alice")
    alice_id = alice.get("/api/auth/me").get_json()["user"]["id"]
    for path in ("funnel", "group_sizes", "questionnaire_means", "recall_events",
                 f"forgetting_curves.png?user_id={alice_id}"):
        url = f"/api/admin/plots/{path}" if "?" in path else f"/api/admin/plots/{path}.png"
        response = admin_client.get(url)
        assert response.status_code == 200 and response.mimetype == "image/png", path
        _image(response.data)
    assert admin_client.get("/api/admin/plots/pie.png").status_code == 404
    assert admin_client.get("/api/admin/plots/forgetting_curves.png").status_code == 400
    assert admin_client.get("/api/admin/plots/forgetting_curves.png?user_id=999").status_code == 404
    assert admin_client.get("/api/admin/plots/questionnaire_means.png?instrument=nope").status_code == 400


def test_chinese_labels_render_with_the_shipped_cjk_font_and_no_missing_glyphs(db_session, study, clock):
    """The font comes from the pinned mpl-font package, not the host; no glyph falls back to a box."""
    import warnings

    from matplotlib import font_manager

    path = plots.cjk_font_path()
    assert path is not None and "site-packages" in str(path) and path.parent.parent.parent.name == "mpl_font"
    found = font_manager.findfont(font_manager.FontProperties(family=plots.CJK_FONT_FAMILY),
                                  fallback_to_default=False)
    assert found == str(path)
    _participant(db_session, 1, "L1", clock.now())
    _answer(db_session, db_session.scalar(select(User)), "T1", "pu_1", "perceived_understanding", 6, clock.now())
    db_session.flush()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pngs = [plots.funnel(db_session, study, language="zh"), plots.group_sizes(db_session, study, language="zh"),
                plots.questionnaire_means(db_session, study, language="zh"),
                plots.recall_events(db_session, study, language="zh")]
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert missing == []
    assert all(_image(png).shape[0] > 100 for png in pngs)
    assert plots.label("funnel", "zh") == "完成漏斗" and plots.label("funnel", "en") == "Completion funnel"
    assert pngs[0] != plots.funnel(db_session, study, language="en")


def test_without_the_cjk_font_chinese_would_be_missing_glyphs(db_session, study):
    """The check above can fail: DejaVu Sans alone has no glyph for 完成漏斗."""
    import warnings

    from matplotlib.figure import Figure

    figure = Figure()
    figure.add_subplot().set_title("完成漏斗", fontfamily="DejaVu Sans")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        figure.savefig(io.BytesIO(), format="png")
    assert any("missing from font" in str(w.message) for w in caught)
