"""report.html: the report's figures as one self-contained page (inline CSS, charts as PNG data URIs, no script,
nothing loaded from anywhere), in zh or en."""
from __future__ import annotations

import base64
from html import escape
from typing import Any

from services.reporting import analysis, report_charts
from services.study.evidence import Verdict, describe
from services.text.catalogs import CATALOGS, PLACEHOLDER, fill

# The words are the catalogs' report.<key>, report.reason.<code> (the analysis' reasons, with its English
# ``message`` as the fallback) and report.test.<name> (translations/).


def test_name(name: str, language: str) -> str:
    key = f"report.test.{name}"
    text = CATALOGS.text(language, key)
    return name if text == key else text


def reason(entry: dict[str, Any], language: str) -> str:
    """A not-fitted model's or an untested test's reason in ``language``."""
    key = f"report.reason.{entry.get('code') or ''}"
    params = entry.get("params") or {}
    template = CATALOGS.text(language, key)
    if template == key or not set(PLACEHOLDER.findall(template)) <= set(params):
        return str(entry.get("message") or "")
    return fill(template, params)


CSS = """body{font-family:"Noto Sans CJK SC","Noto Sans",system-ui,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}h1{font-size:1.7em}h2{margin-top:2em;border-bottom:2px solid #ddd;
padding-bottom:.2em}h3{margin-top:1.4em}table{border-collapse:collapse;margin:.6em 0 1em;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:right}th:first-child,td:first-child{text-align:left}
thead th{background:#f2f2f5}.meta td{text-align:left}.msg{background:#fff4e5;border-left:4px solid #e69500;
padding:.4em .7em}.ok{color:#1a7f37}.bad{color:#b42318}img{max-width:100%;height:auto;display:block;
margin:.5em 0}.small{color:#555;font-size:.9em}"""


def t(key: str, language: str, **values: Any) -> str:
    return CATALOGS.text(language, f"report.{key}", **values)


def num(value: Any, places: int = 2) -> str:
    if value is None:
        return "–"
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return f"{value:.{places}f}"


def p_text(p: float | None) -> str:
    if p is None:
        return "–"
    return "< .001" if p < 0.001 else f"{p:.3f}"


def _table(head: list[str], rows: list[list[str]]) -> str:
    cells = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{body}</tbody></table>"


def _image(png: bytes | None, alt: str) -> str:
    if png is None:
        return ""
    return f'<img alt="{escape(alt)}" src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}">'


def _msg(text: str) -> str:
    return f'<p class="msg">{escape(text)}</p>'


def _meta(report: dict[str, Any], language: str) -> str:
    study = report["study"]
    rows = [[t("study", language), study.get("name") or ""],
            [t("definition_hash", language), (study.get("hash") or "–")[:16]],
            [t("export_time", language), report["export"].get("generated_at") or "–"],
            [t("report_time", language), report["generated_at"]],
            [t("reference", language), study["reference_condition"]],
            [t("exclusion_rule", language), ", ".join(study["exclude_flags"]) or t("none", language)]]
    return '<table class="meta">' + "".join(f"<tr><td>{escape(a)}</td><td>{escape(str(b))}</td></tr>"
                                            for a, b in rows) + "</table>"


def _consort(report: dict[str, Any], language: str) -> str:
    consort, attrition = report["consort"], report["attrition"]
    groups = list(consort["by_condition"])
    measures = [(t("consented", language), lambda r: r["consented"]),
                (t("assigned", language), lambda r: r["assigned"])]
    for task in consort["tasks"]:
        measures += [(t("started", language, task=task), lambda r, task=task: r["tasks"][task]["started"]),
                     (t("completed", language, task=task), lambda r, task=task: r["tasks"][task]["completed"])]
    measures += [(t("withdrawn", language), lambda r: r["withdrawn"]), (t("erased", language), lambda r: r["erased"]),
                 (t("excluded", language), lambda r: r["excluded"])]
    for flag in consort["exclude_flags"]:
        measures.append((t("excluded_flag", language, flag=flag), lambda r, flag=flag: r["excluded_by_flag"][flag]))
    rows = [[name, *[str(get(consort["by_condition"][g])) for g in groups]] for name, get in measures]
    test = attrition.get("test")
    line = (f"{t('attrition', language, outcome=attrition['outcome'])}: {test_name(test, language)}, "
            f"p = {p_text(attrition['p'])}"
            if test else f"{t('attrition', language, outcome=attrition['outcome'])}: "
                         f"{t('not_tested', language)} ({reason(attrition, language)})")
    return (f"<h2>{escape(t('consort', language))}</h2>" + _table(["", *groups], rows) + f"<p>{escape(line)}</p>"
            + _image(report_charts.consort_flow(report, language), t("consort", language)))


def _preflight(report: dict[str, Any], language: str) -> str:
    pre = report["manipulation"]["preflight"]
    out = f"<h3>{escape(t('preflight', language))}</h3>"
    if not pre.get("report_id"):
        return out + _msg(t("preflight_none", language, state=pre.get("state")))
    verdict = t("passed" if pre.get("passed") else "failed", language)
    out += f"<p>{escape(t('preflight_head', language, id=pre['report_id'], at=pre['created_at'], verdict=verdict, state=pre['state']))}</p>"  # noqa: E501
    rows = [[name, check.get("verdict") or ("passed" if check.get("passed") else "failed"),
             "; ".join([*check["details"], *(describe(Verdict(**v), language) for v in check.get("targets", []))])
             or "–"] for name, check in pre["checks"].items()]
    return out + _table([t("check", language), t("verdict", language), t("details", language)], rows)


def _exposure(report: dict[str, Any], language: str) -> str:
    data = report["exposure"]
    out = f"<h3>{escape(t('exposure', language))}</h3>"
    if not data.get("recorded"):
        return out + _msg(t("not_recorded_columns", language, columns=", ".join(analysis.EXPOSURE_COLUMNS)))
    rows = [[group, task, str(cell["sessions"]), *[num(cell.get(c)) for c in data["columns"]]]
            for group, cells in data["by_condition"].items() for task, cell in cells.items()]
    return (out + f'<p class="small">{escape(t("exposure_note", language))}</p>'
            + _table([t("condition", language), t("task", language), t("sessions", language), *data["columns"]], rows)
            + _image(report_charts.exposure(report, language), t("exposure", language)))


def _recall(report: dict[str, Any], language: str) -> str:
    data = report["manipulation"]["recall_events"]["by_condition"]
    out = f"<h3>{escape(t('recall', language))}</h3>"
    if not any(cell["candidates"] for cells in data.values() for cell in cells.values()):
        return out + _msg(t("no_recall_events", language))
    rows = [[group, task, str(c["candidates"]), str(c["recalled"]), f"{c['participants_with_recall']} / "
             f"{c['participants']}", num(c["recalled_per_participant"])]
            for group, cells in data.items() for task, c in cells.items()]
    return out + _table([t("condition", language), t("task", language), t("candidates", language),
                         t("recalled", language), t("with_recall", language), t("per_participant", language)], rows)


def _cells_table(cells: dict[str, dict[str, Any]], tasks: list[str], language: str) -> str:
    rows = []
    for group, by_task in cells.items():
        rows.append([group, *[f"{num(c['mean'])} ({num(c['sd'])}), {c['n']}" if (c := by_task.get(task)) else "–"
                              for task in tasks]])
    return f'<p class="small">{escape(t("descriptives", language))}</p>' + _table(
        [t("condition", language), *tasks], rows)


def _mc(report: dict[str, Any], language: str) -> str:
    mc = report["manipulation"]["mc"]
    out = f"<h3>{escape(t('mc', language, item=mc['item']))}</h3>"
    if not mc.get("recorded"):
        return out + _msg(t("no_mc", language, item=mc["item"]))
    test = mc["test"]
    line = f"{t('mc_test', language, test=test_name(test['test'], language))}: p = {p_text(test.get('p'))}" + (
        f" – {reason(test, language)}" if test.get("message") else "")
    return (out + _cells_table(mc["by_condition_task"], report["study"]["tasks"], language)
            + f"<p>{escape(line)}</p>" + _image(report_charts.manipulation_check(report, language), "mc_1"))


def _latency(report: dict[str, Any], language: str) -> str:
    data = report["latency"]
    out = f"<h3>{escape(t('latency', language))}</h3>"
    if not data.get("recorded"):
        return out + _msg(t("not_recorded_columns", language, columns=", ".join(analysis.LATENCY_COLUMNS)))
    head = [t("condition", language), t("replies", language)]
    for column in data["columns"]:
        head += [f"{column} {t('median', language)}", f"{column} {t('mean', language)}"]
    rows = [[group, str(c["replies"]), *[v for column in data["columns"]
                                         for v in (num(c[column]["median"], 0), num(c[column]["mean"], 0))]]
            for group, c in data["by_condition"].items()]
    parity = data["parity"]
    line = (t("latency_test", language, test=test_name(parity["test"], language), column=parity["column"]) +
            f": p = {p_text(parity.get('p'))}" + (f" – {reason(parity, language)}" if parity.get("message") else ""))
    return (out + _table(head, rows) + f"<p>{escape(line)}</p>"
            + _image(report_charts.latency(report, language), t("latency", language)))


def _outcomes(report: dict[str, Any], language: str) -> str:
    ref = report["study"]["reference_condition"]
    out = (f"<h2>{escape(t('outcomes', language))}</h2>"
           f'<p class="small">{escape(t("outcome_method", language, ref=ref))}</p>'
           + _image(report_charts.contrasts(report, language), t("outcomes", language)))
    head = [t("contrast", language), t("estimate", language), t("ci", language), "p", t("d", language),
            t("n", language)]
    for model in report["models"]:
        scale = model["scale"]
        title = (report["study"]["scales"].get(scale, {}).get("title") or {}).get(language) or scale
        out += f"<h3>{escape(title)} <span class='small'>({escape(scale)})</span></h3>"
        out += _cells_table(report["descriptives"].get(scale, {}), report["study"]["tasks"], language)
        if model["status"] != "fitted":
            out += _msg(t("not_fitted", language, message=reason(model, language)))
            continue
        rows = [[r["contrast"], num(r["estimate"]), f"[{num(r['ci_low'])}, {num(r['ci_high'])}]", p_text(r["p"]),
                 num(r["effect_size"]), str(r["n"])] for r in report["outcomes"] if r["scale"] == scale]
        out += f'<p class="small">{escape(model["formula"])}</p>' + _table(head, rows)
        by_task = [[f"{r['contrast']} {r['task']}", num(r["estimate"]), f"[{num(r['ci_low'])}, {num(r['ci_high'])}]",
                    p_text(r["p"]), num(r["effect_size"]), str(r["n"])]
                   for r in report["outcomes_by_task"] if r["scale"] == scale and len(model["tasks"]) > 1]
        if by_task:
            out += f'<p class="small">{escape(t("by_task", language))}</p>' + _table(head, by_task)
        if model.get("notes"):
            out += _msg(t("notes", language, notes="; ".join(model["notes"])))
    return out + _image(report_charts.scale_means(report, language), t("outcomes", language))


def render(report: dict[str, Any], language: str) -> str:
    body = (f"<h1>{escape(t('title', language))}: {escape(report['study'].get('name') or '')}</h1>"
            + _meta(report, language) + _consort(report, language)
            + f"<h2>{escape(t('manipulation', language))}</h2>" + _preflight(report, language)
            + _exposure(report, language) + _recall(report, language) + _mc(report, language)
            + _latency(report, language) + _outcomes(report, language)
            + f'<p class="small">{escape(t("footer", language))}</p>')
    return (f'<!DOCTYPE html><html lang="{CATALOGS.tag(language)}"><head><meta charset="utf-8">'
            f"<title>{escape(t('title', language))}</title><style>{CSS}</style></head><body>{body}</body></html>\n")
