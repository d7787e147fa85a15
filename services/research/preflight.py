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
(``services.study.preflight_gate.preflight_status``), exports carry it in their manifest, and with
``REQUIRE_PREFLIGHT=1`` registration and panel entry answer 503 ``study_not_open`` until a passing report exists
for the current definition (``services.study.preflight_gate.require_open``: the live decision, apart from this
offline tooling).
"""
from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from database.models import PreflightReport
from services.llm.embedding_service import EmbeddingProvider, build_embedder
from services.platform.clock import Clock
from services.reporting.preflight_record import check_label, report_lines
from services.research import simulation
from services.research.recall_calibration import PresetCheck, PresetEmbedderMismatch, check_active_preset
from services.study.definition import Study
from services.study.preflight_gate import report_view, study_hash
from services.study.settings import Settings

PresetChecker = Callable[[Study, EmbeddingProvider], PresetCheck]


# -- running it ---------------------------------------------------------------------------------------------


@dataclass
class PreflightOutcome:
    passed: bool
    report: dict[str, Any]
    refused: str | None = None  # the PresetEmbedderMismatch message, when the calibration check refused


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
                  simulate: Callable[..., dict[str, Any]] = simulation.run_simulation,
                  check_probes: ProbeChecker | None = None) -> PreflightOutcome:
    """Run (a), (b) and (c) (module docstring) and store the report through ``db_session`` (the study's
    database). The bots run on a temporary database built by ``make_app`` (app.create_app) with ``settings``'
    providers (``simulate``: ``simulation.run_simulation``); a refused calibration skips (b) and (c)
    (``not_run``). The report passes when every check in it passed."""
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
    refused = checks["calibration"]["verdict"] == "refused"
    if refused:
        # (b) and (c) would run L4 on a preset fitted for another embedder: figures that mean nothing
        not_run = {"verdict": "not_run", "passed": False,
                   "reason": "the calibration check refused the configured embedder"}
        checks["manipulation"] = dict(not_run)
        checks["probe"] = dict(not_run)
    else:
        report = simulate(per_group=per_group, language="both", day_seconds=day_seconds,
                          conditions=list(settings.study.enabled_conditions), make_app=make_app,
                          settings=settings, log=log_line)
        providers.update(report["config"]["providers"] or {})
        checks["manipulation"] = _manipulation(report)
        log_line(f"(b) {check_label('manipulation')}: {checks['manipulation']['verdict']}")
        checks["probe"] = _probe_recall(settings, make_app, day_seconds, log_line, check_probes)
    passed = all(check["passed"] for check in checks.values())
    stored = PreflightReport(created_at=clock.now(), study_hash=study_hash(settings.study), passed=passed,
                             embedder_model=embedder.model, chat_model=_first_model(providers.get("reply")),
                             providers=providers, checks=checks, duration_seconds=round(time.monotonic() - started, 1))
    with db_session() as session:
        session.add(stored)
        session.flush()
        view = report_view(stored)
    return PreflightOutcome(passed=passed, report=view,
                            refused=checks["calibration"].get("message") if refused else None)


# -- (c) probe recall (issue 27, part 3; services.research.probes.recall) --------------------------------------

ProbeChecker = Callable[..., dict[str, Any]]


def _probe_recall(settings: Settings, make_app: simulation.AppFactory, day_seconds: float,
                  log_line: Callable[[str], None], check: ProbeChecker | None) -> dict[str, Any]:
    """(c) the held-out and blind probe personas through the chat path in L4, judged by part 1's rule."""
    from services.research.probes.recall import probe_recall_check

    result = (check or probe_recall_check)(settings, make_app, day_seconds=day_seconds, log=log_line)
    log_line(f"(c) {check_label('probe')}: {result['verdict']}")
    for line in result.get("lines") or []:
        log_line(f"      {line}")
    return result


def _first_model(chain: list[str] | None) -> str | None:
    return chain[0] if chain else None


def describe(outcome: PreflightOutcome) -> str:
    """What the CLI prints: the verdict, the models, and each check's figures and verdicts."""
    return "\n".join(report_lines(outcome.report))
