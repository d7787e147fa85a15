"""The study report: how long it takes on a simulated study of a given size.

    python scripts/report_bench.py --per-condition 100     # 400 participants, four tasks, every questionnaire

Writes the study's rows into a new SQLite file with tests/study_factory.py (L4's closeness one point higher),
then times, in this process, the export built in memory, the report's figures (every scale's model) and
report.html in Chinese, and prints wall and CPU seconds per step as JSON: CPU time is what the step costs; wall
time also counts the other work of a shared machine.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--per-condition", type=int, default=100, help="participants per enabled condition")
    args = parser.parse_args(argv)
    from database.db_manager import Database
    from services.platform.clock import ManualClock
    from services.reporting.export_service import ExportOptions, build_export
    from services.reporting.report import build_report, load_export, report_html
    from services.study.definition import load_study
    from tests.study_factory import populate

    timings: dict[str, dict[str, float]] = {}

    def step(name: str, work):
        wall, cpu = time.perf_counter(), time.process_time()
        result = work()
        timings[name] = {"wall_s": round(time.perf_counter() - wall, 2), "cpu_s": round(time.process_time() - cpu, 2)}
        return result

    with tempfile.TemporaryDirectory() as folder:
        db = Database(f"sqlite:///{Path(folder) / 'bench.db'}")
        db.upgrade()
        study, clock = load_study(), ManualClock(datetime(2026, 3, 2, 9))
        with db.session() as session:
            populate(session, study, clock, per_condition=args.per_condition,
                     effects={("closeness", study.enabled_conditions[-1]): 1.0})
        with db.session() as session:
            export = step("export", lambda: build_export(session, study, options=ExportOptions(exclude_pii=True),
                                                         generated_at=clock.now()))
        report = step("figures", lambda: build_report(load_export(export.data), generated_at=clock.now()))
        html = step("html_zh", lambda: report_html.render(report, "zh"))
        db.dispose()
    print(json.dumps({"participants": args.per_condition * len(study.enabled_conditions),
                      "answers": export.files["questionnaires_long.csv"], "html_bytes": len(html.encode()),
                      "models_fitted": sum(m["status"] == "fitted" for m in report["models"]), **timings}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
