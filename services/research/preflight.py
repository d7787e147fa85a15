"""The pre-flight: prove the memory manipulation before anyone is recruited (``flask --app app preflight``).

``run_preflight`` runs with whatever providers the environment configures (embedder, reply and
consolidation chains) and never touches the study's database while it checks:

(a) **calibration** of the active recall preset for the configured embedder
    (``services.research.recall_calibration.check_active_preset``). An embedder the preset was not fitted for is
    refused with ``PresetEmbedderMismatch`` (its message names ``calibrate_recall.py --fit --write-preset``):
    ``r`` would mean nothing.
(b) **the bot manipulation check** for every enabled condition (``services.research.simulation``: bots walk T1-T4
    through the HTTP API of a temporary app on a temporary SQLite database, in pilot mode, in both languages,
    and every condition's declared expectations are checked, e.g. L4 beyond L3, the planted allergy for S1/R1).

Each check is a dict under its name in the report's ``checks`` (``CHECK_LABELS`` names them for people). A check
judged on pre-registered targets carries them in one shape (``evidence_check``): ``targets`` (each
``services.study.evidence.Verdict.as_dict()``: figure, one-sided 95 % interval, n, verdict, plus what it is about),
``shape`` (differences that must lie above zero by more than their error), ``amber`` (a target within error),
``passed`` (no target missed, every shape above zero) and, when it failed, ``next_step``. ``report_lines``, the
admin banner and the export's manifest read any check in that shape, so a new check needs no more than its dict.
Reports stored before this rule (no ``targets``) still render from their ``figures`` / ``failures``.

The report (``PreflightReport``: the study-definition hash, providers and models, time, each check's figures
and verdict) is stored in the study's database. The admin console shows the latest one
(``preflight_status``), exports carry it in their manifest, and with ``REQUIRE_PREFLIGHT=1`` registration
and panel entry answer 503 ``study_not_open`` until a passing report exists for the current definition
(``require_open``).
"""
from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from config import Settings
from database.models import PreflightReport
from services.llm.embedding_service import EmbeddingProvider, build_embedder
from services.platform.clock import Clock, utc_iso
from services.platform.errors import Unavailable
from services.recall import recall_model
from services.research import simulation
from services.research.recall_calibration import PresetCheck, PresetEmbedderMismatch, check_active_preset
from services.research.recall_calibration_report import describe_difference
from services.study import evidence
from services.study.definition import Study

PresetChecker = Callable[[Study, EmbeddingProvider], PresetCheck]


def study_hash(study: Study) -> str:
    """A stable hash of the frozen study definition: the same definition gives the same hash in any process."""
    canonical = json.dumps(study.as_dict(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def embedder_warning(study: Study, embedder_model: str) -> str | None:
    """Why ``r`` means nothing with this embedder, or None when the active preset was fitted for it."""
    return recall_model.embedder_warning(study.memory.recall, embedder_model)


# -- the stored reports -------------------------------------------------------------------------------


def latest_report(session: Session, for_hash: str | None = None) -> PreflightReport | None:
    query = select(PreflightReport)
    if for_hash is not None:
        query = query.where(PreflightReport.study_hash == for_hash)
    return session.scalar(query.order_by(PreflightReport.created_at.desc(), PreflightReport.id.desc()).limit(1))


def report_view(report: PreflightReport | None) -> dict[str, Any] | None:
    if report is None:
        return None
    return {"id": report.id, "created_at": utc_iso(report.created_at), "study_hash": report.study_hash,
            "passed": report.passed, "embedder_model": report.embedder_model, "chat_model": report.chat_model,
            "providers": report.providers, "checks": report.checks, "duration_seconds": report.duration_seconds}


def _state(session: Session, study: Study) -> tuple[str, PreflightReport | None]:
    current = study_hash(study)
    here = latest_report(session, current)
    if here is not None:
        return ("verified" if here.passed else "failed"), here
    report = latest_report(session)
    return ("changed" if report is not None else "not_verified"), report


def manifest_entry(session: Session, study: Study) -> dict[str, Any]:
    """The export manifest's ``preflight``: the state for the exported study definition, the latest report, and
    that report as lines (``report_lines``: each check's verdict, each target's figure, interval, n and verdict)."""
    state, report = _state(session, study)
    view = report_view(report)
    return {"state": state, "study_hash": study_hash(study), "report": view,
            "lines": report_lines(view) if view else []}


def preflight_status(session: Session, settings: Settings, embedder_model: str) -> dict[str, Any]:
    """What the admin console shows at the top: ``state`` is ``verified`` (the latest report for this study
    definition passed), ``failed`` (it failed), ``changed`` (reports exist, none for this definition) or
    ``not_verified`` (no report at all); with the report it refers to and any embedder mismatch."""
    state, report = _state(session, settings.study)
    return {"state": state, "study_hash": study_hash(settings.study), "required": settings.require_preflight,
            "report": report_view(report), "embedder_model": embedder_model,
            "embedder_warning": embedder_warning(settings.study, embedder_model)}


def is_open(session: Session, settings: Settings) -> bool:
    """Whether participants may come in: always without REQUIRE_PREFLIGHT, else once the latest pre-flight
    report for the current study definition passed."""
    if not settings.require_preflight:
        return True
    report = latest_report(session, study_hash(settings.study))
    return report is not None and report.passed


def require_open(session: Session, settings: Settings) -> None:
    """Registration and panel entry: 503 ``study_not_open`` until ``is_open``."""
    if not is_open(session, settings):
        raise Unavailable("the study is not open yet: the manipulation has not been verified for this study "
                          "definition (flask --app app preflight)", code="study_not_open")


# -- running it ---------------------------------------------------------------------------------------------


@dataclass
class PreflightOutcome:
    passed: bool
    report: dict[str, Any]
    refused: str | None = None  # the PresetEmbedderMismatch message, when the calibration check refused


# What each check is called for people (the banner translates these names: admin.preflight.check.<name>).
CHECK_LABELS = {"calibration": "recall calibration", "manipulation": "bot manipulation check",
                "probe": "probe recall check"}


def check_label(name: str) -> str:
    return CHECK_LABELS.get(name, name.replace("_", " "))


def evidence_check(targets: list[dict[str, Any]], shape: list[dict[str, Any]] | None = None,
                   **extra: Any) -> dict[str, Any]:
    """A check judged by the pre-registered rule from its verdicts (``Verdict.as_dict()``, with any keys saying
    what each is about) and its shape differences (``Difference.as_dict()``): passed when no target is missed or
    without data and every difference lies above zero by more than its error; amber when a target is within
    error. ``extra`` is stored with it (figures, the next step, ...)."""
    shape = shape or []
    passed = all(t["verdict"] in ("met", "within_error") for t in targets) and all(d["above"] for d in shape)
    return {"verdict": "passed" if passed else "failed", "passed": passed,
            "amber": any(t["verdict"] == "within_error" for t in targets), "targets": targets, "shape": shape,
            **extra}


REFIT_PRESET = "refit"  # the name the next step suggests for a refitted preset


def refit_command(embedding_provider: str) -> str:
    """The exact command that fits a recall preset for the configured embedder and writes it into the study file."""
    return (f".venv/bin/python scripts/calibrate_recall.py --embedder {embedding_provider} --fit "
            f"--write-preset {REFIT_PRESET}")


def _refit_step(embedding_provider: str) -> dict[str, Any]:
    return {"kind": "refit", "command": refit_command(embedding_provider), "preset": REFIT_PRESET,
            "text": f"run {refit_command(embedding_provider)}, set memory.recall.preset to {REFIT_PRESET!r} in the "
                    "study file, then run flask --app app preflight again"}


def _calibration(study: Study, embedder: EmbeddingProvider, check: PresetChecker,
                 embedding_provider: str) -> dict[str, Any]:
    try:
        result = check(study, embedder)
    except PresetEmbedderMismatch as exc:
        return {"verdict": "refused", "passed": False, "amber": False, "targets": [], "shape": [],
                "message": str(exc), "preset": study.memory.recall.preset, "embedder_model": embedder.model,
                "next_step": _refit_step(embedding_provider)}
    found = evidence_check(result.targets, result.shape, **{k: v for k, v in asdict(result).items()
                                                            if k not in ("targets", "shape", "passed")})
    if not result.passed:  # a checker that judges by more than its targets has the last word
        found.update(verdict="failed", passed=False)
    if not found["passed"]:
        found["next_step"] = _refit_step(embedding_provider)
    return found


SIMULATE_NEXT_STEP = ".venv/bin/python scripts/simulate_participants.py --per-group 3 --language both"


def _manipulation(report: dict[str, Any]) -> dict[str, Any]:
    """The bot check: its beyond-baseline shares (per task and language, and pooled per language) are judged by
    the rule (``simulation.beyond_baseline``); the check fails on any failed check of the run."""
    failed = simulation.failed_checks(report)
    targets = [{"name": f"{c['group']} beyond {c['baseline']} {r['task']} {r['language']}", "successes": r["beyond"],
                "n": r["replies"], "target": r["min_share"], "direction": "at_least",
                "estimate": r["beyond"] / r["replies"] if r["replies"] else None, "low": r.get("low"),
                "high": r.get("high"), "verdict": r.get("verdict", "met" if r["passed"] else "missed"),
                "language": r["language"], "task": r["task"], "measure": "beyond", "group": c["group"],
                "baseline": c["baseline"]}
               for c in report["checks"] if c.get("rows") is not None for r in c["rows"] + c.get("pooled", [])]
    found = {"verdict": "failed" if failed else "passed", "passed": not failed, "failed_checks": failed,
             "amber": any(t["verdict"] == "within_error" for t in targets), "targets": targets, "shape": [],
             "by_language": report["by_language"], "bots": report["config"]["bots"],
             "per_group": report["config"]["per_group"], "day_seconds": report["config"]["day_seconds"],
             "enrolment": report["config"]["enrolment"],
             "checks": [{"check": c["check"], "passed": c["passed"], "detail": c["detail"]} for c in report["checks"]],
             "duration_seconds": round(report["config"]["duration_seconds"], 1)}
    if failed:
        found["next_step"] = {"kind": "simulate", "command": SIMULATE_NEXT_STEP,
                              "text": f"run {SIMULATE_NEXT_STEP} for the full report of the bots' contexts"}
    return found


def run_preflight(settings: Settings, db_session: Callable[[], Any], make_app: simulation.AppFactory, *,
                  clock: Clock | None = None, embedder: EmbeddingProvider | None = None,
                  check_preset: PresetChecker = check_active_preset, per_group: int = 1,
                  day_seconds: float = 5.0, log_line: Callable[[str], None] = print,
                  simulate: Callable[..., dict[str, Any]] = simulation.run_simulation) -> PreflightOutcome:
    """Run (a) and (b) (module docstring) and store the report through ``db_session`` (the study's database).
    The bots run on a temporary database built by ``make_app`` (app.create_app) with ``settings``' providers
    (``simulate``: ``simulation.run_simulation``); a refused calibration skips them. The report passes when
    every check in it passed."""
    clock = clock or Clock()
    started = time.monotonic()
    embedder = embedder or build_embedder(settings)
    log_line(f"pre-flight of study {study_hash(settings.study)[:12]} with embedder {embedder.model}")
    checks: dict[str, Any] = {"calibration": _calibration(settings.study, embedder, check_preset,
                                                          settings.embedding_provider)}
    providers: dict[str, Any] = {"embedder": embedder.model, "reply": list(settings.llm_providers),
                                 "consolidation": list(settings.consolidation_providers or settings.llm_providers)}
    log_line(f"(a) {check_label('calibration')} of preset {settings.study.memory.recall.preset!r}: "
             f"{checks['calibration']['verdict']}")
    if checks["calibration"]["verdict"] == "refused":
        checks["manipulation"] = {"verdict": "not_run", "passed": False,
                                  "reason": "the calibration check refused the configured embedder"}
    else:
        report = simulate(per_group=per_group, language="both", day_seconds=day_seconds,
                          conditions=list(settings.study.enabled_conditions), make_app=make_app,
                          settings=settings, log=log_line)
        providers.update(report["config"]["providers"] or {})
        checks["manipulation"] = _manipulation(report)
        log_line(f"(b) {check_label('manipulation')}: {checks['manipulation']['verdict']}")
    passed = all(check["passed"] for check in checks.values())
    stored = PreflightReport(created_at=clock.now(), study_hash=study_hash(settings.study), passed=passed,
                             embedder_model=embedder.model, chat_model=_first_model(providers.get("reply")),
                             providers=providers, checks=checks, duration_seconds=round(time.monotonic() - started, 1))
    with db_session() as session:
        session.add(stored)
        session.flush()
        view = report_view(stored)
    refused = checks["calibration"].get("message") if checks["calibration"]["verdict"] == "refused" else None
    return PreflightOutcome(passed=passed, report=view, refused=refused)


def _first_model(chain: list[str] | None) -> str | None:
    return chain[0] if chain else None


# -- the report as lines (CLI and export) ------------------------------------------------------------------


def _verdict_of(target: dict[str, Any]) -> evidence.Verdict:
    return evidence.Verdict(**{f.name: target.get(f.name) for f in fields(evidence.Verdict)})


def _target_line(target: dict[str, Any]) -> str:
    if target.get("low") is None and target.get("estimate") is not None:  # no interval stored: figure and verdict
        return (f"{target['name']}: {target['estimate']:.1%} ({target['successes']}/{target['n']}; target "
                f"{'≥' if target['direction'] == 'at_least' else '≤'} {target['target']:.0%}) — "
                f"{target['verdict'].replace('_', ' ')}")
    return evidence.describe(_verdict_of(target))


def check_lines(name: str, check: dict[str, Any]) -> list[str]:
    """One check as lines: its name and verdict, then each target (figure, interval, n, verdict), each shape
    difference, what failed and the next step. Reads checks stored before the rule too (figures / failures)."""
    amber = " (amber: a target within error)" if check.get("amber") and check.get("passed") else ""
    lines = [f"{check_label(name)}: {check.get('verdict', 'passed' if check.get('passed') else 'failed')}{amber}"]
    if check.get("message"):
        lines.append(f"  {check['message']}")
    if check.get("reason"):
        lines.append(f"  {check['reason']}")
    lines += [f"  {_target_line(t)}" for t in check.get("targets") or []]
    lines += [f"  {describe_difference(d)}" for d in check.get("shape") or []]
    for group in check.get("groups") or []:  # information only: the rule does not decide on these
        off = [t for t in group["targets"] if t["verdict"] != "met"]
        lines.append(f"  (for information) {group['language']} {group['group']} alone: "
                     + ("every target met" if not off else "; ".join(_target_line(t) for t in off)))
    if not check.get("targets"):  # a report stored before the rule
        for language, splits in (check.get("figures") or {}).items():
            for split, figures in splits.items():
                lines.append(f"  {language} {split}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
        lines += [f"  {failure}" for failure in check.get("failures") or []]
    for language, result in (check.get("by_language") or {}).items():
        beyond = "; ".join(f"{c['group']} beyond {c['baseline']} "
                           + " / ".join(f"{t} {share:.0%}" for t, share in c["shares"].items())
                           for c in result["beyond"])
        lines.append(f"  {language}: {result['bots']} bots; {beyond or '-'}: {'PASS' if result['passed'] else 'FAIL'}")
    lines += [f"  FAILED: {failed}" for failed in check.get("failed_checks") or []]
    if check.get("next_step") and not check.get("passed"):
        lines.append(f"  next step: {check['next_step']['text']}")
    return lines


def report_lines(report: dict[str, Any]) -> list[str]:
    """A stored report (``report_view``) as lines: the verdict, the models, and each check (``check_lines``)."""
    lines = [f"pre-flight {'PASSED' if report['passed'] else 'FAILED'} for study definition "
             f"{report['study_hash'][:12]} at {report['created_at']} (report {report['id']}); "
             f"embedder {report['embedder_model']}, replies {report['chat_model']}"]
    failed = [check_label(name) for name, check in report["checks"].items() if not check.get("passed")]
    if failed:
        lines.append("failed: " + ", ".join(failed))
    for index, (name, check) in enumerate(report["checks"].items()):
        first, *rest = check_lines(name, check)
        lines += [f"  ({chr(ord('a') + index)}) {first}"] + [f"    {line}" for line in rest]
    return lines


def describe(outcome: PreflightOutcome) -> str:
    """What the CLI prints: the verdict, the models, and each check's figures and verdicts."""
    return "\n".join(report_lines(outcome.report))
