"""Server-side PNG charts for the admin console (matplotlib, Agg canvas; nothing loaded from the web).

Every chart returns a valid PNG, also before there is any data (a frame saying
"no data yet"), so the console can show its image slots from the first day.
Figures are built with ``matplotlib.figure.Figure`` rather than pyplot, which
keeps global state out of a threaded server. Labels are ASCII so no CJK font
is needed on the server.
"""
from __future__ import annotations

import io
import math
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sqlalchemy import select
from sqlalchemy.orm import Session

from database.models import Assignment, Message, QuestionnaireResponse, RecallEvent, TaskSession, User
from services import recall_model
from services.errors import BadInput, NotFound
from services.input_checks import MAX_DB_ID, bounded_int
from services.study import Study

NO_DATA = "no data yet"
# Two-sided 95 % Student t quantiles by degrees of freedom; beyond the table the next lower entry is used.
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
         11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
         20: 2.086, 21: 2.080, 22: 2.074, 23: 2.069, 24: 2.064, 25: 2.060, 26: 2.056, 27: 2.052, 28: 2.048,
         29: 2.045, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}
MAX_CURVES = 12


def t_quantile_975(df: int) -> float:
    if df < 1:
        raise ValueError("degrees of freedom must be at least 1")
    if df in _T975:
        return _T975[df]
    lower = [k for k in _T975 if k < df]
    return _T975[max(lower)] if df <= 120 else 1.960


def mean_ci95(values: list[float]) -> tuple[float, float | None]:
    """Mean and the half-width of its 95 % confidence interval (t distribution); None for n < 2."""
    if not values:
        raise ValueError("no values")
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return mean, t_quantile_975(n - 1) * sd / math.sqrt(n)


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def empty_chart(title: str, message: str = NO_DATA) -> bytes:
    figure = _figure()
    ax = figure.add_subplot()
    ax.set_axis_off()
    ax.set_title(title)
    ax.text(0.5, 0.5, message, ha="center", va="center", fontsize=16, color="#777777", transform=ax.transAxes)
    return _png(figure)


def _participants(session: Session) -> list[User]:
    return list(session.scalars(select(User).where(User.role == "participant").order_by(User.id)))


def _groups(study: Study, present: set[str]) -> list[str]:
    enabled = list(study.enabled_conditions)
    return enabled + sorted(g for g in present if g not in enabled)


# -- funnel --------------------------------------------------------------------------------------


def funnel(session: Session, study: Study) -> bytes:
    """Registered, then participants who completed each task, per memory group."""
    title = "Completion funnel"
    users = _participants(session)
    if not users:
        return empty_chart(title)
    task_ids = study.task_ids
    stages = ["registered"] + [f"{t} done" for t in task_ids]
    done = defaultdict(set)
    for user_id, task_id in session.execute(select(TaskSession.user_id, TaskSession.task_id)
                                            .where(TaskSession.status == "done")):
        done[task_id].add(user_id)
    group_of = {u.id: u.memory_group or "unassigned" for u in users}
    groups = _groups(study, set(group_of.values()))
    counts = np.zeros((len(groups), len(stages)))
    for uid, group in group_of.items():
        gi = groups.index(group)
        counts[gi, 0] += 1
        for ti, task_id in enumerate(task_ids, start=1):
            counts[gi, ti] += uid in done[task_id]
    figure = _figure()
    ax = figure.add_subplot()
    x = np.arange(len(stages))
    width = 0.8 / len(groups)
    for gi, group in enumerate(groups):
        bars = ax.bar(x - 0.4 + width * (gi + 0.5), counts[gi], width, label=group)
        ax.bar_label(bars, labels=[str(int(v)) for v in counts[gi]], fontsize=8)
    totals = counts.sum(axis=0)
    ax.set_xticks(x, [f"{s}\n(n={int(t)})" for s, t in zip(stages, totals, strict=True)])
    ax.set_ylabel("participants")
    ax.set_title(title)
    ax.legend(title="group", fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    return _png(figure)


# -- group sizes over time -------------------------------------------------------------------------


def group_sizes(session: Session, study: Study) -> bytes:
    """Cumulative participants per memory group, by assignment time."""
    title = "Group sizes over time"
    rows = session.execute(select(Assignment.memory_group, Assignment.created_at)
                           .order_by(Assignment.created_at, Assignment.id)).all()
    if not rows:
        return empty_chart(title)
    groups = _groups(study, {g for g, _ in rows})
    start, end = rows[0][1], rows[-1][1]
    figure = _figure()
    ax = figure.add_subplot()
    for group in groups:
        times = [at for g, at in rows if g == group]
        xs = [start] + times + [end]
        ys = [0] + list(range(1, len(times) + 1)) + [len(times)]
        ax.step(xs, ys, where="post", label=f"{group} (n={len(times)})")
    ax.set_ylabel("participants assigned")
    ax.set_xlabel("assignment time (UTC)")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.yaxis.get_major_locator().set_params(integer=True)
    figure.autofmt_xdate()
    figure.tight_layout()
    return _png(figure)


# -- questionnaire means -------------------------------------------------------------------------------


def scale_scores(session: Session, study: Study) -> dict[str, dict[tuple[str, str], list[float]]]:
    """instrument -> (group, task) -> one score per participant: the mean of its rating items."""
    numeric = {item["id"]: name for name, instrument in study.instruments.items()
               for item in instrument.items if item.get("type", "likert") in ("likert", "ios")}
    group_of = {u.id: u.memory_group for u in _participants(session)}
    per_person: dict[tuple[str, int, str], list[float]] = defaultdict(list)
    for answer in session.scalars(select(QuestionnaireResponse)):
        instrument = numeric.get(answer.item_id)
        if instrument is None or answer.user_id not in group_of or isinstance(answer.value, bool) \
                or not isinstance(answer.value, int | float):
            continue
        per_person[(instrument, answer.user_id, answer.task_id)].append(float(answer.value))
    scores: dict[str, dict[tuple[str, str], list[float]]] = defaultdict(lambda: defaultdict(list))
    for (instrument, user_id, task_id), values in per_person.items():
        scores[instrument][(group_of[user_id], task_id)].append(sum(values) / len(values))
    return scores


def questionnaire_means(session: Session, study: Study, instrument: str | None = None) -> bytes:
    """Scale means by group and task with 95 % confidence intervals, one panel per instrument."""
    title = "Questionnaire means by group and task (95% CI)"
    if instrument is not None and instrument not in study.instruments:
        raise BadInput(f"unknown instrument {instrument!r}", code="unknown_instrument")
    scores = scale_scores(session, study)
    names = [n for n in study.instruments if n in scores and (instrument is None or n == instrument)]
    if not names:
        return empty_chart(title)
    task_ids = study.task_ids
    groups = _groups(study, {g for n in names for g, _ in scores[n]})
    cols = min(3, len(names))
    rows = math.ceil(len(names) / cols)
    figure = _figure(4.2 * cols, 3.2 * rows + 0.6)
    for index, name in enumerate(names):
        ax = figure.add_subplot(rows, cols, index + 1)
        offsets = np.linspace(-0.15, 0.15, len(groups)) if len(groups) > 1 else [0.0]
        for gi, group in enumerate(groups):
            xs, means, errors = [], [], []
            for ti, task_id in enumerate(task_ids):
                values = scores[name].get((group, task_id))
                if values:
                    mean, half = mean_ci95(values)
                    xs.append(ti + offsets[gi])
                    means.append(mean)
                    errors.append(half or 0.0)
            if xs:
                ax.errorbar(xs, means, yerr=errors, marker="o", capsize=3, label=group)
        items = study.instruments[name].items
        ax.set_ylim(min(i.get("min", 1) for i in items) - 0.3, max(i.get("max", 7) for i in items) + 0.3)
        ax.set_xticks(range(len(task_ids)), task_ids)
        ax.set_title(name, fontsize=9)
        ax.tick_params(labelsize=8)
    handles, labels = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper right", fontsize=8, title="group")
    figure.suptitle(title + "; bars absent where n < 2")
    figure.tight_layout(rect=(0, 0, 0.92, 0.95))
    return _png(figure)


# -- recall events -------------------------------------------------------------------------------------


def recall_events(session: Session, study: Study) -> bytes:
    """Forgetting-curve candidates per task (L4): recalled versus considered but not recalled."""
    title = "Recall events per task (L4)"
    rows = session.execute(select(RecallEvent.task_id, RecallEvent.recalled, RecallEvent.user_id)).all()
    if not rows:
        return empty_chart(title)
    task_ids = study.task_ids
    task_ids += sorted({t for t, _, _ in rows} - set(task_ids))
    recalled = np.array([sum(1 for t, r, _ in rows if t == task and r) for task in task_ids])
    missed = np.array([sum(1 for t, r, _ in rows if t == task and not r) for task in task_ids])
    people = [len({u for t, r, u in rows if t == task and r}) for task in task_ids]
    figure = _figure()
    ax = figure.add_subplot()
    x = np.arange(len(task_ids))
    ax.bar(x, recalled, label="recalled (p_final >= threshold)", color="#2a7fb8")
    ax.bar(x, missed, bottom=recalled, label="considered, not recalled", color="#c9d7e3")
    for xi, (r, m, n) in enumerate(zip(recalled, missed, people, strict=True)):
        ax.text(xi, r + m, f"{r}/{r + m}\n{n} participant(s)", ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, task_ids)
    ax.set_ylabel("top-k candidates")
    ax.set_title(title)
    ax.legend(fontsize=8)
    ax.margins(y=0.2)
    figure.tight_layout()
    return _png(figure)


# -- forgetting curves of one participant ----------------------------------------------------------------


def forgetting_curves(session: Session, study: Study, user_id: int, *, now: datetime,
                      day_seconds: float) -> bytes:
    """p over time for a participant's memories at full relevance (r = 1): the curve decays with
    time since creation or last recall, and each recall restarts it with the larger g. Dots are
    the recall events actually computed (their own r), filled when recalled."""
    user = session.get(User, user_id)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    title = f"Forgetting curves of {user.participant_code} ({user.memory_group})"
    memories = session.scalars(select(Message).where(Message.user_id == user_id, Message.role == "user",
                                                     Message.consolidation_g.is_not(None))
                               .order_by(Message.id)).all()
    if not memories:
        return empty_chart(title, "no consolidated memories yet")
    events = session.scalars(select(RecallEvent).where(RecallEvent.user_id == user_id)
                             .order_by(RecallEvent.created_at, RecallEvent.id)).all()
    by_memory: dict[int, list[RecallEvent]] = defaultdict(list)
    for event in events:
        by_memory[event.memory_message_id].append(event)
    # the memories recalled most, then the most salient, keep the chart readable
    chosen = sorted(memories, key=lambda m: (-(m.recall_count or 0), -(m.emotional_salience or 0), m.id))[:MAX_CURVES]
    params = study.memory.recall
    origin = min(m.created_at for m in memories)
    end = max([now] + [e.created_at for e in events])

    def days(at: datetime) -> float:
        return (at - origin).total_seconds() / day_seconds

    figure = _figure(9.0, 5.0)
    ax = figure.add_subplot()
    by_wall_clock = params.time_unit in ("days", "hours")
    for index, memory in enumerate(sorted(chosen, key=lambda m: m.id)):
        color = f"C{index % 10}"
        memory_events = by_memory.get(memory.id, [])
        g = memory_events[0].g_before if memory_events else memory.consolidation_g
        label = f"#{memory.id} {memory.task_id} (e={memory.emotional_salience or 0:.2f}, " \
                f"recalled {memory.recall_count or 0}x)"
        if by_wall_clock:
            anchors = [memory.created_at] + [e.created_at for e in memory_events if e.recalled] + [end]
            gs = [g] + [e.g_after for e in memory_events if e.recalled]
            xs, ys = [], []
            for start, stop, g_segment in zip(anchors[:-1], anchors[1:], gs, strict=True):
                seconds = np.linspace(0.0, max((stop - start).total_seconds(), 0.0), 60)
                t = recall_model.elapsed_time(seconds, unit=params.time_unit, time_scale=params.time_scale,
                                              day_seconds=day_seconds)
                xs.extend(days(start) + seconds / day_seconds)
                ys.extend(np.atleast_1d(recall_model.recall_probability(1.0, t, g_segment)))
            ax.plot(xs, ys, linewidth=1.2, color=color, label=label)
        for number, event in enumerate(memory_events):
            ax.scatter([days(event.created_at)], [event.p_final], s=28, zorder=3,
                       facecolors=color if event.recalled else "none", edgecolors=color,
                       label=label if not by_wall_clock and number == 0 else None)
    ax.axhline(params.threshold, linestyle="--", color="#888888", linewidth=1)
    ax.text(0, params.threshold, f" threshold {params.threshold:g}", va="bottom", fontsize=8, color="#555555")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel("study days since the first memory")
    ax.set_ylabel("recall probability p (curve: r = 1; dots: events)")
    ax.set_title(title + (f"; preset {params.preset}" if by_wall_clock else
                          f"; t counted in {params.time_unit}: events only"))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    figure.tight_layout()
    return _png(figure)


PLOTS: dict[str, Callable[..., bytes]] = {
    "funnel": funnel,
    "group_sizes": group_sizes,
    "questionnaire_means": questionnaire_means,
    "recall_events": recall_events,
    "forgetting_curves": forgetting_curves,
}


def render(name: str, session: Session, study: Study, *, args: dict[str, str], now: datetime,
           day_seconds: float) -> bytes:
    """The chart called ``name``; ``args`` are the request's query parameters."""
    if name not in PLOTS:
        raise NotFound(f"no plot called {name!r}; available: {', '.join(PLOTS)}", code="unknown_plot")
    if name == "forgetting_curves":
        if args.get("user_id") is None:
            raise BadInput("forgetting_curves needs ?user_id=<participant id>", code="user_id_required")
        user_id = bounded_int(args["user_id"], name="user_id", low=1, high=MAX_DB_ID)
        return forgetting_curves(session, study, user_id, now=now, day_seconds=day_seconds)
    if name == "questionnaire_means":
        return questionnaire_means(session, study, args.get("instrument") or None)
    return PLOTS[name](session, study)
