"""Admin plots: how long each chart takes to draw, the first time in a fresh process and again.

    python scripts/plot_render_bench.py --database /tmp/plots.db --prepare   # 12 participants through T1
    python scripts/plot_render_bench.py --database /tmp/plots.db             # a fresh process per run

Draws each chart in Chinese twice with the plot functions themselves (no cache) and prints wall and CPU
milliseconds per draw as JSON: CPU time is what the chart costs; wall time also counts the other work of a
shared machine. ``--prepare`` makes a new SQLite file with offline providers and a manual clock, the
participants registered and walked through T1 by the test helpers over the app's test client.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

CHARTS = ("questionnaire_means", "funnel", "group_sizes", "recall_events")
LINES = ["你好，我叫小林。", "我喜欢在周末爬山。", "下次再聊。"]


def _settings(database: Path):
    from config import Settings

    return Settings.from_env(database_url=f"sqlite:///{database}", secret_key="plot-bench", testing=True,
                             scheduler_enabled=False, consolidate_inline=True, assignment_seed=1,
                             llm_providers=["offline"], embedding_provider="offline", rate_limits_enabled=False)


def prepare(database: Path, participants: int) -> None:
    from app import create_app
    from database.db_manager import Database
    from services.platform.clock import ManualClock
    from tests.conftest import ApiClient, walk_task

    database.unlink(missing_ok=True)
    db = Database(f"sqlite:///{database}")
    db.upgrade()
    db.dispose()
    clock = ManualClock(datetime(2026, 3, 2, 9))
    app = create_app(_settings(database), clock=clock)
    for n in range(participants):
        api = ApiClient(app.test_client())
        api.register(f"plotbench{n}")
        walk_task(api, clock, "T1", LINES, study=app.extensions["memory_lab"].study)


def measure(database: Path) -> dict[str, str]:
    from app import create_app
    from services.reporting import plots

    runtime = create_app(_settings(database)).extensions["memory_lab"]
    result = {}
    for name in CHARTS:
        for attempt in ("first", "again"):
            with runtime.db.Session() as session:
                wall, cpu = time.perf_counter(), time.process_time()
                getattr(plots, name)(session, runtime.study, language="zh")
                result[f"{name} {attempt}"] = (f"{1000 * (time.perf_counter() - wall):.0f} ms wall, "
                                               f"{1000 * (time.process_time() - cpu):.0f} ms CPU")
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", type=Path, required=True, help="the SQLite file to draw from")
    parser.add_argument("--prepare", action="store_true", help="make the file first (replaces it)")
    parser.add_argument("--participants", type=int, default=12, help="with --prepare (at most 50)")
    args = parser.parse_args()
    if args.prepare:
        prepare(args.database, min(args.participants, 50))
    print(json.dumps(measure(args.database), ensure_ascii=False, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
