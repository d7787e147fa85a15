"""The report's charts (PNG, matplotlib through ``plots``), each drawn from the same figures as the table beside
it in the report, in zh or en. Legends and tick labels are at least 10 pt."""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from services.reporting.plots import empty_chart, new_figure, png_bytes
from services.text.catalogs import CATALOGS

FONT = 10  # points: legends, ticks and axis labels


def label(key: str, language: str, **values: Any) -> str:
    """A chart's words: the catalogs' report_chart.<key>."""
    return CATALOGS.text(language, f"report_chart.{key}", **values)


def _legend(figure, ax, language: str) -> None:
    handles, names = ax.get_legend_handles_labels()
    if handles:
        figure.legend(handles, names, loc="upper right", fontsize=FONT, title=label("condition", language),
                      title_fontsize=FONT)


def consort_flow(report: dict[str, Any], language: str) -> bytes:
    consort = report["consort"]
    conditions = [c for c in report["study"]["conditions"] if c in consort["by_condition"]]
    if not conditions:
        return empty_chart(label("flow", language), label("no_data", language))
    figure = new_figure(7.5, 4.2)
    ax = figure.add_subplot()
    steps = [label("assigned", language), *consort["tasks"]]
    for condition in conditions:
        row = consort["by_condition"][condition]
        ax.plot(range(len(steps)), [row["assigned"], *[row["tasks"][t]["completed"] for t in consort["tasks"]]],
                marker="o", linewidth=2, label=condition)
    ax.set_xticks(range(len(steps)), steps)
    ax.set_ylabel(label("participants", language), fontsize=FONT)
    ax.tick_params(labelsize=FONT)
    ax.set_ylim(bottom=0)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(label("flow", language), fontsize=12)
    _legend(figure, ax, language)
    figure.subplots_adjust(right=0.82)
    return png_bytes(figure)


def _cells_panel(ax, cells: dict[str, dict[str, dict[str, Any]]], conditions: list[str], tasks: list[str]) -> None:
    offsets = np.linspace(-0.15, 0.15, len(conditions)) if len(conditions) > 1 else [0.0]
    for ci, condition in enumerate(conditions):
        xs, means, low, high = [], [], [], []
        for ti, task in enumerate(tasks):
            cell = (cells.get(condition) or {}).get(task)
            if cell and cell.get("mean") is not None:
                xs.append(ti + offsets[ci])
                means.append(cell["mean"])
                low.append(cell["mean"] - (cell["ci_low"] if cell.get("ci_low") is not None else cell["mean"]))
                high.append((cell["ci_high"] if cell.get("ci_high") is not None else cell["mean"]) - cell["mean"])
        if xs:
            ax.errorbar(xs, means, yerr=[low, high], marker="o", markersize=5, linewidth=1.6, capsize=3,
                        label=condition)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.tick_params(labelsize=FONT)
    ax.grid(axis="y", alpha=0.3)


def _title(report: dict[str, Any], scale: str, language: str) -> str:
    shown = (report["study"]["scales"].get(scale, {}).get("title") or {}).get(language)
    return f"{shown} ({scale})" if shown else scale


def scale_means(report: dict[str, Any], language: str) -> bytes:
    scales = [s for s, cells in report["descriptives"].items() if cells]
    if not scales:
        return empty_chart(label("means", language), label("no_data", language))
    cols = min(3, len(scales))
    rows = math.ceil(len(scales) / cols)
    figure = new_figure(4.6 * cols + 1.2, 3.2 * rows + 0.8)
    conditions = report["study"]["conditions"]
    for index, scale in enumerate(scales):
        ax = figure.add_subplot(rows, cols, index + 1)
        _cells_panel(ax, report["descriptives"][scale], conditions, report["study"]["tasks"])
        ax.set_title(_title(report, scale, language), fontsize=FONT + 1)
    _legend(figure, figure.axes[0], language)
    figure.suptitle(label("means", language), fontsize=13)
    figure.subplots_adjust(left=0.06, right=0.88, top=1 - 0.9 / (3.2 * rows + 0.8), bottom=0.5 / (3.2 * rows + 0.8),
                           hspace=0.55, wspace=0.3)
    return png_bytes(figure)


def contrasts(report: dict[str, Any], language: str) -> bytes:
    rows = report["outcomes"]
    title = label("contrasts", language, ref=report["study"]["reference_condition"])
    if not rows:
        return empty_chart(title, label("not_fitted", language))
    names = list(dict.fromkeys(r["contrast"] for r in rows))
    scales = list(dict.fromkeys(r["scale"] for r in rows))
    figure = new_figure(8.0, 1.2 + 0.32 * len(scales) * max(1, len(names)) + 0.6)
    ax = figure.add_subplot()
    step = 1.0 / (len(names) + 1)
    for ni, name in enumerate(names):
        ys, xs, low, high = [], [], [], []
        for si, scale in enumerate(scales):
            row = next((r for r in rows if r["scale"] == scale and r["contrast"] == name), None)
            if row:
                ys.append(si + (ni + 1) * step - 0.5)
                xs.append(row["estimate"])
                low.append(row["estimate"] - row["ci_low"])
                high.append(row["ci_high"] - row["estimate"])
        ax.errorbar(xs, ys, xerr=[low, high], fmt="o", capsize=3, label=name)
    ax.axvline(0, color="#555555", linewidth=1)
    ax.set_yticks(range(len(scales)), scales)
    ax.invert_yaxis()
    ax.tick_params(labelsize=FONT)
    ax.set_xlabel(label("difference", language), fontsize=FONT)
    ax.grid(axis="x", alpha=0.3)
    ax.set_title(title, fontsize=12)
    ax.legend(fontsize=FONT, loc="best")
    figure.subplots_adjust(left=0.3, right=0.97)
    return png_bytes(figure)


def manipulation_check(report: dict[str, Any], language: str) -> bytes:
    mc = report["manipulation"]["mc"]
    if not mc.get("recorded"):
        return empty_chart(label("mc", language), label("no_data", language))
    figure = new_figure(7.5, 4.0)
    ax = figure.add_subplot()
    _cells_panel(ax, mc["by_condition_task"], report["study"]["conditions"], report["study"]["tasks"])
    ax.set_title(label("mc", language), fontsize=12)
    _legend(figure, ax, language)
    figure.subplots_adjust(right=0.82)
    return png_bytes(figure)


def exposure(report: dict[str, Any], language: str) -> bytes | None:
    data = report["exposure"]
    if not data.get("recorded") or "exposure_messages_mean" not in data["columns"]:
        return None
    figure = new_figure(7.5, 4.0)
    ax = figure.add_subplot()
    tasks = report["study"]["tasks"]
    for condition, cells in data["by_condition"].items():
        points = [(i, cells[t]["exposure_messages_mean"]) for i, t in enumerate(tasks)
                  if t in cells and cells[t].get("exposure_messages_mean") is not None]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", linewidth=2, label=condition)
    ax.set_xticks(range(len(tasks)), tasks)
    ax.tick_params(labelsize=FONT)
    ax.grid(axis="y", alpha=0.3)
    ax.set_title(label("exposure", language), fontsize=12)
    _legend(figure, ax, language)
    figure.subplots_adjust(right=0.82)
    return png_bytes(figure)


def latency(report: dict[str, Any], language: str) -> bytes | None:
    data = report["latency"]
    if not data.get("recorded"):
        return None
    conditions = list(data["by_condition"])
    columns = data["columns"]
    figure = new_figure(7.5, 4.0)
    ax = figure.add_subplot()
    width = 0.8 / max(1, len(columns))
    for ci, column in enumerate(columns):
        values = [data["by_condition"][c].get(column, {}).get("median") or 0 for c in conditions]
        ax.bar(np.arange(len(conditions)) + ci * width, values, width=width, label=column)
    ax.set_xticks(np.arange(len(conditions)) + width * (len(columns) - 1) / 2, conditions)
    ax.tick_params(labelsize=FONT)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=FONT - 1 if len(columns) > 3 else FONT, loc="upper right")
    ax.set_title(label("latency", language), fontsize=12)
    return png_bytes(figure)
