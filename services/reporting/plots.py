"""Server-side PNG charts for the admin console (matplotlib, Agg canvas; nothing loaded from the web).

Every chart returns a valid PNG, also before there is any data (a frame saying
"no data yet"), so the console can show its image slots from the first day.
Figures are built with ``matplotlib.figure.Figure`` rather than pyplot, which
keeps global state out of a threaded server.

Labels are in the admin's language (``language``: zh or en). Chinese is drawn with
Noto Sans CJK SC, shipped by the pinned ``mpl-font`` package (requirements.txt) and
registered with matplotlib's font manager from that package's folder, so no font of
the host is needed; DejaVu Sans (matplotlib's own) stays first for Latin text.

``PlotCache`` keeps each rendered PNG until the data it is drawn from change: its key
holds the plot, its arguments, the language and ``data_version`` (row counts, newest
ids and times of the tables the plots read), so a repeated request costs a few
small queries instead of a render.
"""
from __future__ import annotations

import hashlib
import importlib.util
import io
import math
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from database.models import Assignment, Message, QuestionnaireResponse, RecallEvent, TaskSession, User
from services.participants.input_checks import MAX_DB_ID, bounded_int
from services.platform.errors import BadInput, NotFound
from services.recall.formulas import elapsed_time, recall_probability
from services.study.definition import Study
from services.text.catalogs import CATALOGS, FALLBACK_LANGUAGE

CJK_FONT_FAMILY = "Noto Sans CJK SC"
# Every label drawn: the catalogs' plot.<key> (translations/), in any language with a catalog.
NO_DATA = CATALOGS.text(FALLBACK_LANGUAGE, "plot.no_data")
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


def label(key: str, language: str, **values: object) -> str:
    return CATALOGS.text(language, f"plot.{key}", **values)


def cjk_font_path() -> Path | None:
    """Noto Sans CJK SC Regular inside the installed mpl-font package (found without importing it: its
    ``__init__`` imports pyplot), or None if the package is missing."""
    spec = importlib.util.find_spec("mpl_font")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "fonts" / "noto" / "NotoSansCJKsc-Regular.otf"
    return path if path.is_file() else None


def _register_cjk_font() -> None:
    """Add the shipped CJK font to matplotlib's font manager, as the fallback for glyphs its Latin font lacks
    (matplotlib falls back along the font.family list, not within the generic sans-serif list)."""
    path = cjk_font_path()
    if path is None:
        return
    font_manager.fontManager.addfont(str(path))
    families = [f for f in matplotlib.rcParams["font.family"] if f != CJK_FONT_FAMILY]
    matplotlib.rcParams["font.family"] = [*families, CJK_FONT_FAMILY]


_register_cjk_font()


# legends, bar labels and notes: never below 9 pt (at 100 dpi, 12.5 px in the PNG; 7-8 pt read as about 7 px
# once the console scales a chart to its column)
SMALL_TEXT_PT = 9


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    figure = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(figure)
    return figure


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def new_figure(width: float = 8.0, height: float = 4.5) -> Figure:
    """A figure on the Agg canvas with the shipped CJK font registered (the report's charts draw on these)."""
    return _figure(width, height)


def png_bytes(figure: Figure) -> bytes:
    return _png(figure)


def empty_chart(title: str, message: str = NO_DATA) -> bytes:
    """A frame with ``title`` saying there is nothing to draw yet."""
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


def funnel(session: Session, study: Study, language: str = "en") -> bytes:
    """Registered, then participants who completed each task, per memory group."""
    title = label("funnel", language)
    users = _participants(session)
    if not users:
        return empty_chart(title, label("no_data", language))
    task_ids = study.task_ids
    stages = [label("registered", language)] + [label("task_done", language, task=t) for t in task_ids]
    done = defaultdict(set)
    for user_id, task_id in session.execute(select(TaskSession.user_id, TaskSession.task_id)
                                            .where(TaskSession.status == "done")):
        done[task_id].add(user_id)
    group_of = {u.id: u.memory_group or label("unassigned", language) for u in users}
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
        ax.bar_label(bars, labels=[str(int(v)) for v in counts[gi]], fontsize=SMALL_TEXT_PT)
    totals = counts.sum(axis=0)
    ax.set_xticks(x, [f"{s}\n(n={int(t)})" for s, t in zip(stages, totals, strict=True)])
    ax.set_ylabel(label("participants", language))
    ax.set_title(title)
    ax.legend(title=label("group", language), fontsize=SMALL_TEXT_PT)
    ax.yaxis.get_major_locator().set_params(integer=True)
    figure.tight_layout()
    return _png(figure)


# -- group sizes over time -------------------------------------------------------------------------


def group_sizes(session: Session, study: Study, language: str = "en") -> bytes:
    """Cumulative participants per memory group, by assignment time."""
    title = label("group_sizes", language)
    rows = session.execute(select(Assignment.memory_group, Assignment.created_at)
                           .order_by(Assignment.created_at, Assignment.id)).all()
    if not rows:
        return empty_chart(title, label("no_data", language))
    groups = _groups(study, {g for g, _ in rows})
    start, end = rows[0][1], rows[-1][1]
    figure = _figure()
    ax = figure.add_subplot()
    for group in groups:
        times = [at for g, at in rows if g == group]
        xs = [start] + times + [end]
        ys = [0] + list(range(1, len(times) + 1)) + [len(times)]
        ax.step(xs, ys, where="post", label=f"{group} (n={len(times)})")
    ax.set_ylabel(label("assigned", language))
    ax.set_xlabel(label("assignment_time", language))
    ax.set_title(title)
    ax.legend(fontsize=SMALL_TEXT_PT)
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


def questionnaire_means(session: Session, study: Study, instrument: str | None = None, language: str = "en") -> bytes:
    """Scale means by group and task with 95 % confidence intervals, one panel per instrument
    (two panels a row, large enough to read at the console's full width)."""
    title = label("questionnaire_means", language)
    if instrument is not None and instrument not in study.instruments:
        raise BadInput(f"unknown instrument {instrument!r}", code="unknown_instrument")
    scores = scale_scores(session, study)
    names = [n for n in study.instruments if n in scores and (instrument is None or n == instrument)]
    if not names:
        return empty_chart(title, label("no_data", language))
    task_ids = study.task_ids
    groups = _groups(study, {g for n in names for g, _ in scores[n]})
    cols = min(2, len(names))
    rows = math.ceil(len(names) / cols)
    figure = _figure(6.4 * cols, 4.4 * rows + 0.8)
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
                ax.errorbar(xs, means, yerr=errors, marker="o", markersize=7, linewidth=2, capsize=4, label=group)
        items = study.instruments[name].items
        ax.set_ylim(min(i.get("min", 1) for i in items) - 0.3, max(i.get("max", 7) for i in items) + 0.3)
        ax.set_xticks(range(len(task_ids)), task_ids)
        shown = study.instruments[name].title.get(language)
        ax.set_title(f"{shown} ({name})" if shown else name, fontsize=13)
        ax.tick_params(labelsize=12)
        ax.grid(axis="y", alpha=0.3)
    handles, labels = figure.axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="upper right", fontsize=12, title=label("group", language), title_fontsize=12)
    figure.suptitle(f"{title}; {label('no_bars', language)}", fontsize=15)
    _fixed_margins(figure, rows, cols)
    return _png(figure)


# questionnaire_means' margins in inches (left, right with the legend, bottom, top with both titles, and the
# gaps between panels): its panels have a fixed size, so fixed margins fit, and tight_layout, which measured
# every tick label of all panels before the drawing did it again, was a third of the chart's render time
# (docs/benchmarks.md, "Admin plots")
MEANS_MARGINS_IN = {"left": 0.55, "right": 1.4, "bottom": 0.45, "top": 1.05, "wspace": 0.55, "hspace": 0.75}


def _fixed_margins(figure: Figure, rows: int, cols: int) -> None:
    width, height = figure.get_size_inches()
    m = MEANS_MARGINS_IN
    axis_width = (width - m["left"] - m["right"] - m["wspace"] * (cols - 1)) / cols
    axis_height = (height - m["top"] - m["bottom"] - m["hspace"] * (rows - 1)) / rows
    figure.subplots_adjust(left=m["left"] / width, right=1 - m["right"] / width, bottom=m["bottom"] / height,
                           top=1 - m["top"] / height, wspace=m["wspace"] / axis_width,
                           hspace=m["hspace"] / axis_height)


# -- recall events -------------------------------------------------------------------------------------


def recall_events(session: Session, study: Study, language: str = "en") -> bytes:
    """Forgetting-curve candidates per task (L4): recalled versus considered but not recalled."""
    title = label("recall_events", language)
    rows = session.execute(select(RecallEvent.task_id, RecallEvent.recalled, RecallEvent.user_id)).all()
    if not rows:
        return empty_chart(title, label("no_data", language))
    task_ids = study.task_ids
    task_ids += sorted({t for t, _, _ in rows} - set(task_ids))
    recalled = np.array([sum(1 for t, r, _ in rows if t == task and r) for task in task_ids])
    missed = np.array([sum(1 for t, r, _ in rows if t == task and not r) for task in task_ids])
    people = [len({u for t, r, u in rows if t == task and r}) for task in task_ids]
    figure = _figure()
    ax = figure.add_subplot()
    x = np.arange(len(task_ids))
    ax.bar(x, recalled, label=label("recalled", language), color="#2a7fb8")
    ax.bar(x, missed, bottom=recalled, label=label("not_recalled", language), color="#c9d7e3")
    for xi, (r, m, n) in enumerate(zip(recalled, missed, people, strict=True)):
        ax.text(xi, r + m, f"{r}/{r + m}\n{label('people', language, n=n)}", ha="center", va="bottom",
                fontsize=SMALL_TEXT_PT)
    ax.set_xticks(x, task_ids)
    ax.set_ylabel(label("candidates", language))
    ax.set_title(title)
    ax.legend(fontsize=SMALL_TEXT_PT)
    ax.margins(y=0.2)
    figure.tight_layout()
    return _png(figure)


# -- forgetting curves of one participant ----------------------------------------------------------------


def forgetting_curves(session: Session, study: Study, user_id: int, *, now: datetime,
                      day_seconds: float, language: str = "en") -> bytes:
    """p over time for a participant's memories at full relevance (r = 1): the curve decays with
    time since creation or last recall, and each recall restarts it with the larger g. Dots are
    the recall events actually computed (their own r), filled when recalled."""
    user = session.get(User, user_id)
    if user is None or user.role != "participant":
        raise NotFound("no such participant", code="unknown_participant")
    title = label("forgetting", language, code=user.participant_code, group=user.memory_group)
    memories = session.scalars(select(Message).where(Message.user_id == user_id, Message.role == "user",
                                                     Message.consolidation_g.is_not(None))
                               .order_by(Message.id)).all()
    if not memories:
        return empty_chart(title, label("no_memories", language))
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
        name = label("curve_label", language, id=memory.id, task=memory.task_id, e=memory.emotional_salience or 0,
                     n=memory.recall_count or 0)
        if by_wall_clock:
            anchors = [memory.created_at] + [e.created_at for e in memory_events if e.recalled] + [end]
            gs = [g] + [e.g_after for e in memory_events if e.recalled]
            xs, ys = [], []
            for start, stop, g_segment in zip(anchors[:-1], anchors[1:], gs, strict=True):
                seconds = np.linspace(0.0, max((stop - start).total_seconds(), 0.0), 60)
                t = elapsed_time(seconds, unit=params.time_unit, time_scale=params.time_scale,
                                 day_seconds=day_seconds)
                xs.extend(days(start) + seconds / day_seconds)
                ys.extend(np.atleast_1d(recall_probability(1.0, t, g_segment)))
            ax.plot(xs, ys, linewidth=1.2, color=color, label=name)
        for number, event in enumerate(memory_events):
            ax.scatter([days(event.created_at)], [event.p_final], s=28, zorder=3,
                       facecolors=color if event.recalled else "none", edgecolors=color,
                       label=name if not by_wall_clock and number == 0 else None)
    ax.axhline(params.threshold, linestyle="--", color="#888888", linewidth=1)
    ax.text(0, params.threshold, label("threshold", language, value=params.threshold), va="bottom",
            fontsize=SMALL_TEXT_PT,
            color="#555555")
    ax.set_ylim(-0.02, 1.05)
    ax.set_xlabel(label("days_axis", language))
    ax.set_ylabel(label("p_axis", language))
    ax.set_title(title + (label("preset", language, preset=params.preset) if by_wall_clock else
                          label("events_only", language, unit=params.time_unit)))
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=SMALL_TEXT_PT, loc="center left", bbox_to_anchor=(1.01, 0.5))
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
           day_seconds: float, language: str = "en") -> bytes:
    """The chart called ``name``; ``args`` are the request's query parameters."""
    check_name(name)
    if name == "forgetting_curves":
        return forgetting_curves(session, study, _user_id(args), now=now, day_seconds=day_seconds,
                                 language=language)
    if name == "questionnaire_means":
        return questionnaire_means(session, study, args.get("instrument") or None, language=language)
    return PLOTS[name](session, study, language=language)


def check_name(name: str) -> None:
    if name not in PLOTS:
        raise NotFound(f"no plot called {name!r}; available: {', '.join(PLOTS)}", code="unknown_plot")


def _user_id(args: dict[str, str]) -> int:
    if args.get("user_id") is None:
        raise BadInput("forgetting_curves needs ?user_id=<participant id>", code="user_id_required")
    return bounded_int(args["user_id"], name="user_id", low=1, high=MAX_DB_ID)


def plot_language(raw: str | None, default: str) -> str:
    if raw is None or raw == "":
        return default if CATALOGS.has(default) else FALLBACK_LANGUAGE
    if not CATALOGS.has(raw):
        raise BadInput(f"lang must be one of {', '.join(CATALOGS.languages())}", code="invalid_language",
                       details={"lang": raw})
    return raw


# -- cache -------------------------------------------------------------------------------------------------

_VERSIONED = (User, Assignment, TaskSession, QuestionnaireResponse, RecallEvent)


def data_version(session: Session) -> tuple:
    """What the plots are drawn from, in a few aggregate queries: each table's row count and newest id,
    plus the times that change without a new row (a task completed, a memory consolidated or recalled)."""
    version: list = []
    for model in _VERSIONED:
        version += list(session.execute(select(func.count(), func.max(model.id)).select_from(model)).one())
    version += list(session.execute(select(func.count(), func.max(TaskSession.completed_at))
                                    .where(TaskSession.status == "done")).one())
    version += list(session.execute(select(func.count(), func.max(Message.consolidated_at),
                                           func.max(Message.last_recall_at), func.sum(Message.recall_count))
                                    .where(Message.consolidation_g.is_not(None))).one())
    return tuple(str(v) for v in version)


class PlotCache:
    """Rendered PNGs by plot, arguments, language and data version; the oldest entries go first.

    ``renders`` counts the renders it did (a hit renders nothing). One per app; thread-safe."""

    def __init__(self, size: int = 64) -> None:
        self.size = size
        self.renders = 0
        self._entries: OrderedDict[str, bytes] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, name: str, session: Session, study: Study, *, args: dict[str, str], now: datetime,
            day_seconds: float, language: str) -> tuple[bytes, str, bool]:
        """(png, etag, hit). The forgetting curves run up to now, so their key also holds the minute."""
        check_name(name)
        relevant = {k: args[k] for k in ("user_id", "instrument") if args.get(k)}
        minute = now.strftime("%Y%m%d%H%M") if name == "forgetting_curves" else ""
        key = hashlib.sha256(repr((name, sorted(relevant.items()), language, minute, day_seconds,
                                   data_version(session))).encode()).hexdigest()[:32]
        with self._lock:
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key], key, True
        png = render(name, session, study, args=args, now=now, day_seconds=day_seconds, language=language)
        with self._lock:
            self.renders += 1
            self._entries[key] = png
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)
        return png, key, False
