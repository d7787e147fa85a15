"""report.html: the report's figures as one self-contained page (inline CSS, charts as PNG data URIs, no script,
nothing loaded from anywhere), in zh or en."""
from __future__ import annotations

import base64
from html import escape
from typing import Any

from services.reporting import analysis, report_charts
from services.study.evidence import Verdict, describe

T: dict[str, dict[str, str]] = {
    "title": {"en": "Study report", "zh": "研究报告"},
    "study": {"en": "Study", "zh": "研究"},
    "definition_hash": {"en": "study definition hash", "zh": "研究定义哈希"},
    "export_time": {"en": "export generated", "zh": "导出时间"},
    "report_time": {"en": "report generated", "zh": "报告生成时间"},
    "reference": {"en": "reference condition", "zh": "参照组"},
    "exclusion_rule": {"en": "excluded from the outcome models when above 0", "zh": "以下计数大于 0 时不纳入结果模型"},
    "none": {"en": "none", "zh": "无"},
    "consort": {"en": "1. Participant flow (CONSORT)", "zh": "1. 参与者流程（CONSORT）"},
    "consented": {"en": "consented", "zh": "已同意"},
    "assigned": {"en": "assigned", "zh": "已分组"},
    "started": {"en": "{task} started", "zh": "{task} 已开始"},
    "completed": {"en": "{task} completed", "zh": "{task} 已完成"},
    "withdrawn": {"en": "withdrawn", "zh": "已退出"},
    "erased": {"en": "erased", "zh": "已删除数据"},
    "excluded": {"en": "excluded by quality flags", "zh": "因质量标记排除"},
    "excluded_flag": {"en": "  of which {flag}", "zh": "  其中 {flag}"},
    "attrition": {"en": "Differential attrition ({outcome})", "zh": "差异性流失（{outcome}）"},
    "not_tested": {"en": "not tested", "zh": "未检验"},
    "manipulation": {"en": "2. Manipulation checks", "zh": "2. 操纵检验"},
    "preflight": {"en": "Pre-flight (latest stored report)", "zh": "预检（最近一次保存的报告）"},
    "preflight_none": {"en": "no pre-flight report is stored (state: {state})",
                       "zh": "没有保存的预检报告（状态：{state}）"},
    "preflight_head": {"en": "report {id} of {at}: {verdict}; state for this study definition: {state}",
                       "zh": "报告 {id}（{at}）：{verdict}；对当前研究定义的状态：{state}"},
    "passed": {"en": "passed", "zh": "通过"},
    "failed": {"en": "failed", "zh": "未通过"},
    "check": {"en": "check", "zh": "检查"},
    "verdict": {"en": "verdict", "zh": "结论"},
    "details": {"en": "details", "zh": "详情"},
    "exposure": {"en": "Memory exposure (memory_exposure) per condition and task",
                 "zh": "记忆暴露（memory_exposure）：各组各任务"},
    "exposure_note": {"en": "means over task sessions with replies; L1 must be 0",
                      "zh": "为有回复的任务会话的均值；L1 应为 0"},
    "not_recorded_columns": {"en": "not recorded: this export has no {columns}",
                             "zh": "未记录：本导出没有 {columns} 这些列"},
    "recall": {"en": "L4 recall events per condition and task", "zh": "L4 回忆事件：各组各任务"},
    "candidates": {"en": "candidates scored", "zh": "候选数"},
    "recalled": {"en": "recalled", "zh": "被回忆"},
    "with_recall": {"en": "participants with a recall", "zh": "有回忆的参与者"},
    "per_participant": {"en": "recalled per participant", "zh": "人均回忆数"},
    "no_recall_events": {"en": "no recall events in this export", "zh": "本导出中没有回忆事件"},
    "mc": {"en": "Self-reported manipulation check ({item})", "zh": "自评操纵检验（{item}）"},
    "no_mc": {"en": "no answers to {item} in this export", "zh": "本导出中没有 {item} 的回答"},
    "latency": {"en": "Reply timing parity", "zh": "回复用时一致性"},
    "mc_test": {"en": "{test} across conditions on each participant's mean",
                "zh": "{test}（各组之间，按每名参与者的均值）"},
    "latency_test": {"en": "{test} on each participant's median {column}",
                     "zh": "{test}（每名参与者 {column} 的中位数）"},
    "replies": {"en": "replies", "zh": "回复数"},
    "sessions": {"en": "task sessions", "zh": "任务会话数"},
    "median": {"en": "median", "zh": "中位数"},
    "mean": {"en": "mean", "zh": "均值"},
    "outcomes": {"en": "3. Outcomes", "zh": "3. 结果"},
    "outcome_method": {"en": "Each scale: the mean of its rating items per participant and task; model score ~ "
                              "condition * task + (1 | participant) (REML; one task: least squares). A contrast is "
                              "the difference to {ref} averaged over the scale's tasks (Wald 95% CI); d is it over "
                              "the model's total SD.",
                       "zh": "每个量表：每名参与者每个任务其评分题的均值；模型 score ~ condition * task + "
                             "(1 | participant)（REML；只测一次的量表用最小二乘）。"
                             "对比为与 {ref} 的差值在该量表各任务上的平均（Wald 95% 置信区间）；"
                             "d 为其除以模型总标准差。"},
    "contrast": {"en": "contrast", "zh": "对比"},
    "estimate": {"en": "estimate", "zh": "估计值"},
    "ci": {"en": "95% CI", "zh": "95% 置信区间"},
    "n": {"en": "n", "zh": "n"},
    "d": {"en": "d", "zh": "d"},
    "condition": {"en": "condition", "zh": "组别"},
    "task": {"en": "task", "zh": "任务"},
    "not_fitted": {"en": "No model: {message}", "zh": "未拟合模型：{message}"},
    "notes": {"en": "Note: {notes}", "zh": "注：{notes}"},
    "descriptives": {"en": "mean (SD), n", "zh": "均值（标准差），n"},
    "by_task": {"en": "by task", "zh": "分任务"},
    "footer": {"en": "Built from the data export; report.json holds the same figures. The pre-registration bundle's "
                      "script reproduces the outcome table from the export.",
               "zh": "本报告由数据导出生成；report.json 含相同数据。预注册包中的脚本可从导出重现结果表。"},
}
# The analysis' reasons (``code`` and ``params``), translated; its English ``message`` is the fallback.
REASONS: dict[str, dict[str, str]] = {
    "no_reference": {"en": "no scores in the reference condition {reference}", "zh": "参照组 {reference} 没有得分"},
    "one_condition": {"en": "fewer than two conditions with data: nothing to compare",
                      "zh": "有数据的组少于两个：无法比较"},
    "too_few": {"en": "too few participants: {counts} (at least {minimum} per condition)",
                "zh": "参与者太少：{counts}（每组至少 {minimum} 人）"},
    "empty_cells": {"en": "empty condition x task cell(s): {cells}", "zh": "组别 × 任务中有空单元格：{cells}"},
    "singular_design": {"en": "the design is singular (conditions and tasks are confounded in these data)",
                        "zh": "设计矩阵奇异（这些数据中组别与任务相互混淆）"},
    "not_converged": {"en": "the mixed model could not be fitted ({detail})", "zh": "混合模型无法拟合（{detail}）"},
    "too_few_for_parameters": {"en": "too few participants for the model's parameters",
                               "zh": "参与者人数少于模型参数所需"},
    "no_variation": {"en": "no variation to test: everyone has the same value", "zh": "没有可检验的差异：所有值相同"},
}


TESTS: dict[str, dict[str, str]] = {
    "chi-square": {"en": "chi-square test", "zh": "卡方检验"},
    "fisher-exact": {"en": "Fisher's exact test", "zh": "Fisher 精确检验"},
    "fisher-freeman-halton": {"en": "Fisher-Freeman-Halton exact test", "zh": "Fisher-Freeman-Halton 精确检验"},
    "kruskal-wallis": {"en": "Kruskal-Wallis test", "zh": "Kruskal-Wallis 检验"},
}


def test_name(name: str, language: str) -> str:
    return TESTS.get(name, {}).get("zh" if language == "zh" else "en", name)


def reason(entry: dict[str, Any], language: str) -> str:
    """A not-fitted model's or an untested test's reason in ``language``."""
    template = REASONS.get(entry.get("code") or "")
    if template is None:
        return str(entry.get("message") or "")
    try:
        return template["zh" if language == "zh" else "en"].format(**(entry.get("params") or {}))
    except KeyError:
        return str(entry.get("message") or "")


CSS = """body{font-family:"Noto Sans CJK SC","Noto Sans",system-ui,sans-serif;max-width:1100px;margin:2em auto;
padding:0 1em;color:#1d1d1f;line-height:1.45}h1{font-size:1.7em}h2{margin-top:2em;border-bottom:2px solid #ddd;
padding-bottom:.2em}h3{margin-top:1.4em}table{border-collapse:collapse;margin:.6em 0 1em;font-size:.92em}
th,td{border:1px solid #ccc;padding:.25em .55em;text-align:right}th:first-child,td:first-child{text-align:left}
thead th{background:#f2f2f5}.meta td{text-align:left}.msg{background:#fff4e5;border-left:4px solid #e69500;
padding:.4em .7em}.ok{color:#1a7f37}.bad{color:#b42318}img{max-width:100%;height:auto;display:block;
margin:.5em 0}.small{color:#555;font-size:.9em}"""


def t(key: str, language: str, **values: Any) -> str:
    text = T[key]["zh" if language == "zh" else "en"]
    return text.format(**values) if values else text


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
    measures = [("consented", lambda r: r["consented"]), ("assigned", lambda r: r["assigned"])]
    for task in consort["tasks"]:
        measures += [(t("started", language, task=task), lambda r, task=task: r["tasks"][task]["started"]),
                     (t("completed", language, task=task), lambda r, task=task: r["tasks"][task]["completed"])]
    measures += [("withdrawn", lambda r: r["withdrawn"]), ("erased", lambda r: r["erased"]),
                 ("excluded", lambda r: r["excluded"])]
    for flag in consort["exclude_flags"]:
        measures.append((t("excluded_flag", language, flag=flag), lambda r, flag=flag: r["excluded_by_flag"][flag]))
    rows = [[t(name, language) if name in T else name, *[str(get(consort["by_condition"][g])) for g in groups]]
            for name, get in measures]
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
    return (f'<!DOCTYPE html><html lang="{"zh-CN" if language == "zh" else "en"}"><head><meta charset="utf-8">'
            f"<title>{escape(t('title', language))}</title><style>{CSS}</style></head><body>{body}</body></html>\n")
