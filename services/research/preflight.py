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
from dataclasses import asdict, dataclass
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
    """The export manifest's ``preflight``: the state for the exported study definition and the latest report."""
    state, report = _state(session, study)
    return {"state": state, "study_hash": study_hash(study), "report": report_view(report)}


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


def _calibration(study: Study, embedder: EmbeddingProvider, check: PresetChecker) -> dict[str, Any]:
    try:
        result = check(study, embedder)
    except PresetEmbedderMismatch as exc:
        return {"verdict": "refused", "passed": False, "message": str(exc), "preset": study.memory.recall.preset,
                "embedder_model": embedder.model}
    return {"verdict": "passed" if result.passed else "failed", **asdict(result)}


def _manipulation(report: dict[str, Any]) -> dict[str, Any]:
    failed = simulation.failed_checks(report)
    return {"verdict": "failed" if failed else "passed", "passed": not failed, "failed_checks": failed,
            "by_language": report["by_language"], "bots": report["config"]["bots"],
            "per_group": report["config"]["per_group"], "day_seconds": report["config"]["day_seconds"],
            "enrolment": report["config"]["enrolment"],
            "checks": [{"check": c["check"], "passed": c["passed"], "detail": c["detail"]} for c in report["checks"]],
            "duration_seconds": round(report["config"]["duration_seconds"], 1)}


def run_preflight(settings: Settings, db_session: Callable[[], Any], make_app: simulation.AppFactory, *,
                  clock: Clock | None = None, embedder: EmbeddingProvider | None = None,
                  check_preset: PresetChecker = check_active_preset, per_group: int = 1,
                  check_probes: ProbeChecker | None = None,
                  day_seconds: float = 5.0, log_line: Callable[[str], None] = print) -> PreflightOutcome:
    """Run (a) and (b) (module docstring) and store the report through ``db_session`` (the study's database).
    The bots run on a temporary database built by ``make_app`` (app.create_app) with ``settings``' providers;
    a refused calibration skips them."""
    clock = clock or Clock()
    started = time.monotonic()
    embedder = embedder or build_embedder(settings)
    log_line(f"pre-flight of study {study_hash(settings.study)[:12]} with embedder {embedder.model}")
    checks: dict[str, Any] = {"calibration": _calibration(settings.study, embedder, check_preset)}
    providers: dict[str, Any] = {"embedder": embedder.model, "reply": list(settings.llm_providers),
                                 "consolidation": list(settings.consolidation_providers or settings.llm_providers)}
    log_line(f"(a) calibration of preset {settings.study.memory.recall.preset!r}: {checks['calibration']['verdict']}")
    if checks["calibration"]["verdict"] == "refused":
        checks["manipulation"] = {"verdict": "not_run", "passed": False,
                                  "reason": "the calibration check refused the configured embedder"}
    else:
        report = simulation.run_simulation(per_group=per_group, language="both", day_seconds=day_seconds,
                                           conditions=list(settings.study.enabled_conditions), make_app=make_app,
                                           settings=settings, log=log_line)
        providers.update(report["config"]["providers"] or {})
        checks["manipulation"] = _manipulation(report)
        log_line(f"(b) bot manipulation check: {checks['manipulation']['verdict']}")
    checks["probe_recall"] = _probe_recall(settings, make_app, day_seconds, log_line, check_probes)
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


# -- (c) probe recall (issue 27, part 3; services.research.probes.recall) --------------------------------------

ProbeChecker = Callable[..., dict[str, Any]]


def _probe_recall(settings: Settings, make_app: simulation.AppFactory, day_seconds: float,
                  log_line: Callable[[str], None], check: ProbeChecker | None) -> dict[str, Any]:
    """(c) the held-out and blind probe personas through the chat path in L4, judged by part 1's rule."""
    from services.research.probes.recall import probe_recall_check

    result = (check or probe_recall_check)(settings, make_app, day_seconds=day_seconds, log=log_line)
    log_line(f"(c) probe recall check: {result['verdict']}")
    for line in result.get("lines") or []:
        log_line(f"      {line}")
    return result


def _first_model(chain: list[str] | None) -> str | None:
    return chain[0] if chain else None


def describe(outcome: PreflightOutcome) -> str:
    """What the CLI prints: the verdict, the models, and each check's figures."""
    report = outcome.report
    lines = [f"pre-flight {'PASSED' if outcome.passed else 'FAILED'} for study definition "
             f"{report['study_hash'][:12]} at {report['created_at']} (report {report['id']}); "
             f"embedder {report['embedder_model']}, replies {report['chat_model']}"]
    calibration = report["checks"]["calibration"]
    lines.append(f"  (a) calibration: {calibration['verdict']}")
    if outcome.refused:
        lines.append(f"      {outcome.refused}")
    for language, splits in (calibration.get("figures") or {}).items():
        for split, figures in splits.items():
            lines.append(f"      {language} {split}: " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    lines += [f"      {failure}" for failure in calibration.get("failures") or []]
    manipulation = report["checks"]["manipulation"]
    lines.append(f"  (b) bot manipulation check: {manipulation['verdict']}")
    for language, result in (manipulation.get("by_language") or {}).items():
        beyond = "; ".join(f"{c['group']} beyond {c['baseline']} "
                           + " / ".join(f"{t} {share:.0%}" for t, share in c["shares"].items())
                           for c in result["beyond"])
        lines.append(f"      {language}: {result['bots']} bots; {beyond or '-'}: "
                     f"{'PASS' if result['passed'] else 'FAIL'}")
    lines += [f"      FAILED: {name}" for name in manipulation.get("failed_checks") or []]
    probes = report["checks"].get("probe_recall")
    if probes:
        lines.append(f"  (c) probe recall check: {probes['verdict']}")
        lines += [f"      {line}" for line in probes.get("lines") or [probes.get("reason") or ""] if line]
    return "\n".join(lines)
