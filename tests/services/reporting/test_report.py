"""The study report and the pre-registration bundle, on a simulated study with a known effect.

100 participants (25 per condition, permuted blocks with a fixed seed) answer every questionnaire through the
questionnaire service; L4 answers the ``closeness`` items one point higher than everyone else, ``trust_cognitive``
carries no effect, each answer has a person effect and item noise and is rounded to the 1-7 scale; 10 % stop after
T2 and two fail an attention item. The report runs on the real export of those rows.

The report is built from the export alone, so the module runs on SQLite; the PostgreSQL pass runs the last test,
which stores a smaller study in both databases and finds the same export.
"""
from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
import sys
import zipfile
from datetime import datetime

import pytest
from sqlalchemy import select

from config import Settings
from database.db_manager import Database
from database.models import Assignment, AuditLog
from services.platform.clock import ManualClock
from services.reporting import analysis, preflight_record
from services.reporting.export_service import ExportOptions, build_export
from services.reporting.report import ExportUnreadable, build_report, load_export, write_report
from services.study.definition import load_study
from tests.conftest import _reset_schema
from tests.study_factory import add_recall_events, populate

EFFECT_SCALE, NULL_SCALE = "closeness", "trust_cognitive"
PER_CONDITION = 25


@pytest.fixture(scope="module")
def simulated(tmp_path_factory, migrated_sqlite_template):
    url = os.environ.get("TEST_DATABASE_URL")
    if url:
        db = Database(url)
        _reset_schema(db)
        db.upgrade()
    else:
        path = tmp_path_factory.mktemp("report") / "report.db"
        shutil.copyfile(migrated_sqlite_template, path)
        url = f"sqlite:///{path}"
        db = Database(url)
    study = load_study()
    reference, treated = study.report.reference_condition, study.enabled_conditions[-1]
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, 0))
    with db.session() as session:
        users = populate(session, study, clock, per_condition=PER_CONDITION, effects={(EFFECT_SCALE, treated): 1.0},
                         seed=11)
        groups = {a.user_id: a.memory_group for a in session.scalars(select(Assignment))}
        recalls = add_recall_events(session, users, groups, treated, clock)
    with db.session() as session:
        export = build_export(session, study, options=ExportOptions(), generated_at=clock.now())
    tables = load_export(export.data)
    report = build_report(tables, generated_at=clock.now())
    yield {"db": db, "url": url, "study": study, "export": export.data, "tables": tables, "report": report,
           "reference": reference, "treated": treated, "recalls": recalls, "clock": clock}
    db.dispose()


class _UndrawnCharts:
    """Stands in for services.reporting.report_charts in report_html: every chart is the PNG signature alone."""

    def __getattr__(self, name):
        return lambda report, language: b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def charts_undrawn(monkeypatch):
    """For a test that reads the report's words and figures, not its charts: a report's six charts cost ~2 s of
    CPU to draw (most of writing report.html). test_report_html_and_json_in_each_language draws them in both
    languages."""
    from services.reporting import report_html

    monkeypatch.setattr(report_html, "report_charts", _UndrawnCharts())


def _row(report, scale, contrast):
    return next(r for r in report["outcomes"] if r["scale"] == scale and r["contrast"] == contrast)


def test_the_report_recovers_the_injected_effect_and_the_null(simulated):
    report, treated, reference = simulated["report"], simulated["treated"], simulated["reference"]
    assert reference == "L1" and treated == "L4"  # the default study: contrasts against L1
    effect = _row(report, EFFECT_SCALE, "L4-L1")
    assert effect["ci_low"] <= 1.0 <= effect["ci_high"] and effect["ci_low"] > 0, effect
    assert effect["p"] < 0.001 and effect["effect_size"] > 0.8 and effect["model"] == "mixed"
    null = _row(report, NULL_SCALE, "L4-L1")
    assert null["ci_low"] <= 0.0 <= null["ci_high"], null
    for other in ("L2-L1", "L3-L1"):  # no effect was injected there either
        row = _row(report, EFFECT_SCALE, other)
        assert row["ci_low"] <= 0.0 <= row["ci_high"], row
    # n: the participants of both conditions with a score, less the excluded
    flagged = analysis.excluded(simulated["tables"].rows("participants.csv"), simulated["tables"].study)
    in_pair = [r for r in simulated["tables"].rows("participants.csv") if r["memory_group"] in ("L1", "L4")
               and r["participant_code"] not in flagged]
    assert effect["n"] == len(in_pair)
    assert {r["contrast"] for r in report["outcomes"]} == {"L2-L1", "L3-L1", "L4-L1"}
    by_task = [r for r in report["outcomes_by_task"] if r["scale"] == EFFECT_SCALE and r["contrast"] == "L4-L1"]
    assert [r["task"] for r in by_task] == ["T1", "T2", "T3", "T4"]
    assert all(r["ci_low"] > 0 for r in by_task)
    assert by_task[0]["n"] == effect["n"]
    assert by_task[3]["n"] == sum(1 for r in in_pair if r["T4_completed_at"]) < effect["n"]  # the dropouts
    # a scale asked at one task only is fitted by least squares
    assert _row(report, "continuance_intention", "L4-L1")["model"] == "ols"


def test_consort_attrition_and_exclusions_count_the_exported_rows(simulated):
    report, tables = simulated["report"], simulated["tables"]
    participants = tables.rows("participants.csv")
    consort = report["consort"]["by_condition"]
    assert set(consort) == {"L1", "L2", "L3", "L4"}
    assert sum(c["assigned"] for c in consort.values()) == len(participants) == 4 * PER_CONDITION
    assert all(c["assigned"] == PER_CONDITION for c in consort.values())  # permuted blocks
    withdrawn = sum(1 for p in participants if p["status"] == "withdrawn")
    assert withdrawn > 0 and sum(c["withdrawn"] for c in consort.values()) == withdrawn
    for c in consort.values():
        assert c["tasks"]["T1"]["completed"] == c["assigned"]
        assert c["tasks"]["T4"]["completed"] == c["assigned"] - c["withdrawn"]  # the dropouts stop after T2
    assert sum(c["excluded"] for c in consort.values()) == 2 == report["excluded_participants"]
    attrition = report["attrition"]
    assert attrition["test"] in ("chi-square", "fisher-freeman-halton") and 0 <= attrition["p"] <= 1
    assert sum(attrition["not_completed"].values()) == withdrawn


def test_manipulation_checks_from_the_export(simulated):
    report = simulated["report"]
    recall = report["manipulation"]["recall_events"]["by_condition"]
    assert set(recall) == {"L1", "L2", "L3", "L4"}  # every condition, so the controls' zeros show
    assert all(cell["candidates"] == 0 for g in ("L1", "L2", "L3") for cell in recall[g].values())
    assert recall["L4"]["T2"]["participants"] == PER_CONDITION
    assert recall["L4"]["T2"]["candidates"] == simulated["recalls"]
    assert recall["L4"]["T2"]["recalled"] == simulated["recalls"] // 2 == recall["L4"]["T2"]["participants_with_recall"]
    mc = report["manipulation"]["mc"]
    assert mc["item"] == "mc_1" and mc["recorded"] and set(mc["by_condition_task"]["L1"]) == {"T2", "T3", "T4"}
    assert mc["test"]["test"] == "kruskal-wallis" and mc["test"]["p"] is not None
    pre = report["manipulation"]["preflight"]
    assert pre == {"state": "not_verified", "report": None}
    # the simulated study has questionnaires but no chat replies: no latency to report (said, not invented), and
    # the exposure columns are there with no reply that carried an exposure, so no cell
    assert report["latency"]["recorded"] is False and "not recorded" in report["latency"]["message"]
    assert report["exposure"]["recorded"] is True and report["exposure"]["by_condition"] == {}


def _with_columns(data: bytes, extra: dict[str, callable]) -> bytes:
    """The export with columns added to some CSVs: {file: fn(rows) -> (new columns, rows)}."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            body = source.read(name)
            if name in extra:
                rows = list(csv.DictReader(io.StringIO(body.decode("utf-8"), newline="")))
                columns, rows = extra[name](rows)
                buffer = io.StringIO(newline="")
                writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\r\n")
                writer.writeheader()
                writer.writerows(rows)
                body = buffer.getvalue().encode("utf-8")
            target.writestr(name, body)
    return out.getvalue()


def _with_preflight(data: bytes, preflight: dict) -> bytes:
    """The export with ``preflight`` as its manifest's pre-flight entry."""
    source = zipfile.ZipFile(io.BytesIO(data))
    manifest = json.loads(source.read("manifest.json"))
    manifest["preflight"] = preflight
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as target:
        for name in source.namelist():
            target.writestr(name, json.dumps(manifest) if name == "manifest.json" else source.read(name))
    return out.getvalue()


@pytest.fixture(scope="module")
def recorded(simulated):
    """The export with what the simulated study does not record, each read by its own test below: the pacing
    helper's columns (messages.csv model_first_token_ms ..., task_sessions.csv exposure_*) and a failed
    pre-flight in the manifest with judged targets (evidence.Verdict). One report is built from it (the mixed
    models it fits again are most of the cost, and neither addition changes them)."""
    from services.study.evidence import judge

    participants = simulated["tables"].rows("participants.csv")
    base = {"L1": 400.0, "L2": 500.0, "L3": 600.0, "L4": 900.0}

    def messages(rows):
        columns = list(rows[0]) if rows else ["message_id", "participant_code", "memory_group", "task_id", "role"]
        columns += ["model_first_token_ms", "model_total_ms", "pacing_delay_ms", "visible_first_token_ms"]
        made = []
        for n, p in enumerate(participants):
            for k in range(3):
                model = base[p["memory_group"]] + 10 * k + n % 7
                made.append({"message_id": str(len(made) + 1), "participant_code": p["participant_code"],
                             "memory_group": p["memory_group"], "task_id": "T2", "role": "assistant",
                             "model_first_token_ms": str(model), "model_total_ms": str(model + 2000),
                             "pacing_delay_ms": str(1500 - model), "visible_first_token_ms": "1500"})
        return columns, made

    def sessions(rows):
        columns = list(rows[0]) + ["exposure_replies", "exposure_messages_mean", "exposure_profile_share",
                                   "exposure_tokens_mean"]
        for r in rows:
            earlier = r["task_id"] != "T1" and r["memory_group"] != "L1"
            r.update(exposure_replies="4", exposure_messages_mean="6" if earlier else "0",
                     exposure_profile_share="1" if earlier else "0", exposure_tokens_mean="120" if earlier else "0")
        return columns, rows

    t3 = judge("zh T3 relevant recalled", 3, 40, 0.15)
    unrelated = judge("en unrelated", 1, 60, 0.03, "at_most")
    data = _with_columns(simulated["export"], {"messages.csv": messages, "task_sessions.csv": sessions})
    data = _with_preflight(data, {"state": "failed", "study_hash": "abc", "report": {
        "id": 7, "created_at": "2026-03-01T08:00:00Z", "study_hash": "abc", "passed": False,
        "embedder_model": "e5", "chat_model": "offline", "providers": {}, "duration_seconds": 12.0,
        "checks": {"calibration": {"verdict": "passed", "passed": True,
                                   "pooled": {"zh": [t3.as_dict()], "en": [unrelated.as_dict()]}},
                   "manipulation": {"verdict": "failed", "passed": False, "failed_checks": ["L4 beyond L3 (zh)"]}}}})
    return {"data": data, "report": build_report(load_export(data), generated_at=simulated["clock"].now()),
            "targets": (t3, unrelated)}


def test_latency_and_exposure_from_an_export_that_records_them(simulated, recorded):
    """A constructed export that has the pacing helper's columns gives per-condition figures and the parity
    test."""
    data, report = recorded["data"], recorded["report"]
    latency = report["latency"]
    assert latency["recorded"] and latency["columns"] == list(analysis.LATENCY_COLUMNS)
    assert latency["by_condition"]["L4"]["replies"] == 3 * PER_CONDITION
    assert latency["by_condition"]["L1"]["model_first_token_ms"]["median"] < 430
    assert latency["by_condition"]["L4"]["model_first_token_ms"]["median"] > 890
    # what participants see is paced to 1.5 s everywhere: parity holds on visible_first_token_ms
    assert latency["parity"]["column"] == "visible_first_token_ms" and latency["parity"]["p"] == 1.0
    exposure = report["exposure"]["by_condition"]
    assert exposure["L1"]["T3"]["exposure_messages_mean"] == 0.0 and exposure["L4"]["T3"]["exposure_messages_mean"] == 6
    assert exposure["L4"]["T1"]["exposure_profile_share"] == 0.0
    # without pacing the model's own latencies differ by condition, and the test says so
    unpaced = analysis.latency([{**r, "visible_first_token_ms": "", "pacing_delay_ms": ""}
                                for r in load_export(data).rows("messages.csv")], simulated["tables"].study)
    assert unpaced["parity"]["column"] == "model_first_token_ms" and unpaced["parity"]["p"] < 1e-6


def _html_is_self_contained(html: str) -> None:
    assert "<script" not in html and "http://" not in html and "https://" not in html
    assert 'src="data:image/png;base64,' in html and "<style>" in html


@pytest.mark.parametrize("language", ["zh", "en"])
def test_report_html_and_json_in_each_language(simulated, tmp_path, language):
    paths = write_report(simulated["report"], tmp_path, language=language)
    html = paths["html"].read_text(encoding="utf-8")
    _html_is_self_contained(html)
    stored = json.loads(paths["json"].read_text(encoding="utf-8"))
    assert stored["language"] == language and stored["outcomes"] == simulated["report"]["outcomes"]
    assert {"consort", "attrition", "outcomes", "latency", "exposure"} <= set(stored)
    if language == "zh":
        assert "研究报告" in html and "参与者流程" in html and "亲近感" in html and "未记录" in html
        assert 'lang="zh-CN"' in html and "Kruskal-Wallis 检验" in html and "task sessions" not in html
    else:
        assert "Study report" in html and "Participant flow" in html and "Closeness" in html
        assert "not recorded" in html and "研究报告" not in html
    effect = _row(simulated["report"], EFFECT_SCALE, "L4-L1")
    assert f"[{effect['ci_low']:.2f}, {effect['ci_high']:.2f}]" in html


@pytest.mark.slow
def test_the_cli_builds_the_report_from_the_study_database(simulated, tmp_path, charts_undrawn):
    from app import create_app

    settings = Settings.from_env(database_url=simulated["url"], secret_key="report-test", testing=True,
                                 scheduler_enabled=False, llm_providers=["offline"], embedding_provider="offline",
                                 rate_limits_enabled=False)
    app = create_app(settings, clock=simulated["clock"])
    try:
        runner = app.test_cli_runner()
        result = runner.invoke(args=["report", "--out", str(tmp_path / "r"), "--language", "zh"])
        assert result.exit_code == 0, result.output
        assert "12 of 12 scale models fitted, 36 contrasts against L1" in result.output
        stored = json.loads((tmp_path / "r" / "report.json").read_text(encoding="utf-8"))
        assert stored["outcomes"] == simulated["report"]["outcomes"]  # the same export, the same figures
        with simulated["db"].session() as session:
            assert session.scalar(select(AuditLog).where(AuditLog.action == "report_generated")) is not None
        # from an export on disk; and something that is not one is refused with a message
        (tmp_path / "export.zip").write_bytes(simulated["export"])
        result = runner.invoke(args=["report", "--out", str(tmp_path / "e"), "--from-export",
                                     str(tmp_path / "export.zip"), "--language", "en"])
        assert result.exit_code == 0, result.output
        (tmp_path / "junk.zip").write_bytes(b"not a zip")
        result = runner.invoke(args=["report", "--out", str(tmp_path / "j"), "--from-export",
                                     str(tmp_path / "junk.zip")])
        assert result.exit_code == 2 and "not a zip file" in result.output

        bundle = tmp_path / "bundle.zip"
        result = runner.invoke(args=["prereg-bundle", "--out", str(bundle)])
        assert result.exit_code == 0, result.output
    finally:
        runtime = app.extensions["memory_lab"]
        runtime.background.shutdown()
        runtime.db.dispose()
    files = zipfile.ZipFile(bundle)
    names = set(files.namelist())
    assert {"study_definition.json", "study_hash.txt", "prompts.json", "providers.json", "preflight.json",
            "codebook.csv", "codebook.md", "analysis/analysis.py", "analysis/analyse.py", "analysis/analyse.R",
            "analysis/requirements.txt", "README.md", "bundle_manifest.json"} == names
    study = simulated["study"]
    assert files.read("study_hash.txt").decode().strip() == preflight_record.study_hash(study)
    assert json.loads(files.read("prompts.json"))["system_prompts"]["base"] == dict(study.system_prompts["base"])
    assert json.loads(files.read("providers.json"))["reply_providers"] == ["offline"]
    assert "statsmodels==" in files.read("analysis/requirements.txt").decode()
    files.extractall(tmp_path / "bundle")


@pytest.mark.slow
def test_the_bundle_script_reproduces_the_outcome_table(simulated, tmp_path):
    """Run as a subprocess on the export zip, the bundle's analyse.py gives report.json's outcome table."""
    (tmp_path / "analysis").mkdir()
    from services.reporting import prereg

    for name in ("analysis.py", "bundle/analyse.py"):
        shutil.copyfile(prereg.HERE / name, tmp_path / "analysis" / name.split("/")[-1])
    (tmp_path / "export.zip").write_bytes(simulated["export"])
    done = subprocess.run([sys.executable, str(tmp_path / "analysis" / "analyse.py"), str(tmp_path / "export.zip"),
                           "--out", str(tmp_path / "results.json")], capture_output=True, text=True, timeout=120,
                          env={"PATH": os.environ.get("PATH", ""), "HOME": str(tmp_path)}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    results = json.loads((tmp_path / "results.json").read_text(encoding="utf-8"))
    expected = simulated["report"]["outcomes"]
    assert [(r["scale"], r["contrast"]) for r in results["outcomes"]] == [(r["scale"], r["contrast"]) for r in expected]
    for got, want in zip(results["outcomes"], expected, strict=True):
        assert got["n"] == want["n"]
        for key in ("estimate", "ci_low", "ci_high", "p", "effect_size"):
            assert got[key] == pytest.approx(want[key], abs=1e-6), (got["scale"], got["contrast"], key)
    assert results["consort"] == simulated["report"]["consort"]
    assert results["attrition"] == simulated["report"]["attrition"]  # Fisher-Freeman-Halton's draws are seeded


def _r_ready() -> str | None:
    if shutil.which("Rscript") is None:
        return "Rscript is not installed (scripts/install_test_deps.sh installs r-base-core and lme4/lmerTest)"
    check = subprocess.run(["Rscript", "-e", "library(lmerTest); library(jsonlite)"], capture_output=True, timeout=60)
    return None if check.returncode == 0 else "R lacks lmerTest or jsonlite (scripts/install_test_deps.sh)"


@pytest.mark.slow
def test_the_bundle_r_script_gives_the_same_estimates(simulated, tmp_path):
    """analyse.R (lme4/lmerTest) on the unpacked export: the same estimates and effect sizes; its intervals are
    Satterthwaite t intervals, so only close to the Wald ones."""
    if shutil.which("Rscript") is None:
        pytest.skip(_r_ready())
    from services.reporting import prereg

    zipfile.ZipFile(io.BytesIO(simulated["export"])).extractall(tmp_path / "export")
    done = subprocess.run(["Rscript", str(prereg.HERE / "bundle" / "analyse.R"), str(tmp_path / "export"),
                           str(tmp_path / "r.csv")], capture_output=True, text=True, timeout=240)
    if done.returncode != 0 and (reason := _r_ready()):  # R without its packages: a skip, not a failure
        pytest.skip(reason)
    assert done.returncode == 0, done.stderr[-2000:]
    rows = list(csv.DictReader((tmp_path / "r.csv").open(encoding="utf-8")))
    expected = {(r["scale"], r["contrast"]): r for r in simulated["report"]["outcomes"]}
    assert {(r["scale"], r["contrast"]) for r in rows} == set(expected)
    for row in rows:
        want = expected[(row["scale"], row["contrast"])]
        assert float(row["estimate"]) == pytest.approx(want["estimate"], abs=1e-4)
        assert float(row["effect_size"]) == pytest.approx(want["effect_size"], abs=1e-3)
        assert int(row["n"]) == want["n"] and row["model"] == want["model"]
        width = float(row["ci_high"]) - float(row["ci_low"])
        assert width == pytest.approx(want["ci_high"] - want["ci_low"], rel=0.05)


def test_an_unreadable_export_is_refused_with_what_is_missing(tmp_path):
    with pytest.raises(ExportUnreadable, match="study_config.json, participants.csv"):
        load_export(tmp_path)
    with pytest.raises(ExportUnreadable, match="no such file"):
        load_export(tmp_path / "nothing.zip")


def test_the_latest_preflight_report_and_its_judged_targets_are_shown(recorded, tmp_path, charts_undrawn):
    """The manifest's pre-flight entry: its state, each check's verdict and failures, and every judged target
    (evidence.Verdict) wherever the check keeps it, described in the report's language."""
    from services.study.evidence import describe

    report, (t3, unrelated) = recorded["report"], recorded["targets"]
    pre = report["manipulation"]["preflight"]
    assert pre["state"] == "failed" and pre["report_id"] == 7 and pre["passed"] is False
    assert pre["checks"]["manipulation"] == {"verdict": "failed", "passed": False,
                                             "details": ["L4 beyond L3 (zh)"], "targets": []}
    assert pre["checks"]["calibration"]["targets"] == [t3.as_dict(), unrelated.as_dict()]
    html = write_report(report, tmp_path, language="zh")["html"].read_text(encoding="utf-8")
    assert describe(t3, "zh") in html.replace("&gt;", ">") and "L4 beyond L3 (zh)" in html
    assert "报告 7" in html


def _export_files(db: Database, study, per_condition: int) -> dict[str, bytes]:
    """The export of a simulated study (the module's recipe, ``per_condition`` participants a condition) stored
    in ``db``, file by file."""
    clock = ManualClock(datetime(2026, 3, 2, 9, 0, 0))
    treated = study.enabled_conditions[-1]
    with db.session() as session:
        users = populate(session, study, clock, per_condition=per_condition, effects={(EFFECT_SCALE, treated): 1.0},
                         seed=11)
        groups = {a.user_id: a.memory_group for a in session.scalars(select(Assignment))}
        add_recall_events(session, users, groups, treated, clock)
    with db.session() as session:
        export = build_export(session, study, options=ExportOptions(), generated_at=clock.now())
    files = zipfile.ZipFile(io.BytesIO(export.data))
    return {name: files.read(name) for name in files.namelist()}


@pytest.mark.postgres
def test_the_export_the_report_reads_is_the_same_from_this_database_as_from_sqlite(database, migrated_sqlite_template,
                                                                                  tmp_path):
    """What the tests above show on SQLite holds on PostgreSQL when the same rows export to the same files there:
    the report reads nothing else (report_runtime, the CLI's and the admin's report, builds it from an export).
    A smaller simulated study (12 participants: one stops after T2, two fail the attention item, the treated
    condition's recall events) stored in the test's database, PostgreSQL in the PostgreSQL pass, and in a SQLite
    copy gives the same files byte for byte. The admin's report on PostgreSQL (tests/routes/test_admin_report.py)
    runs report_runtime there."""
    study = load_study()
    shutil.copyfile(migrated_sqlite_template, tmp_path / "sqlite.db")
    sqlite = Database(f"sqlite:///{tmp_path / 'sqlite.db'}")
    try:
        expected = _export_files(sqlite, study, per_condition=3)
    finally:
        sqlite.dispose()
    exported = _export_files(database, study, per_condition=3)
    assert list(exported) == list(expected)
    assert [name for name in exported if exported[name] != expected[name]] == []
    participants = list(csv.DictReader(io.StringIO(exported["participants.csv"].decode("utf-8-sig"))))
    assert len(participants) == 12 and [p["status"] for p in participants].count("withdrawn") == 1
    assert len(exported["recall_events.csv"].decode("utf-8-sig").splitlines()) == 1 + 2 * 3
