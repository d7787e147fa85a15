"""`make serve`: production mode. Several gunicorn worker processes on PostgreSQL.

    DATABASE_URL=postgresql+psycopg://memlab:PW@127.0.0.1/memlab SECRET_KEY=... make serve
    WEB_WORKERS=4 WEB_THREADS=64 HOST=127.0.0.1 PORT=8000 make serve

Refuses to start (exit 2, saying why) without a PostgreSQL ``DATABASE_URL`` or without
``SECRET_KEY`` in the environment: every process and every host must share both; and when
its connection budget (WEB_HOSTS x WEB_WORKERS x (DB_POOL_SIZE + DB_MAX_OVERFLOW + 4
background) + 5, services.hosting.serving.connection_budget) exceeds what PostgreSQL allows
(``SHOW max_connections`` less the superuser reserve, or DB_MAX_CONNECTIONS behind pgbouncer). The
session cookie is ``Secure`` unless ``SESSION_COOKIE_SECURE=0`` (plain-HTTP lab LAN).

Before any worker starts, this process applies migrations, checks the embedder pin and
creates the first admin (printing its password once). Each worker then builds its own app
(engine, thread pools, scheduler); the ``scheduler`` lease lets exactly one of them run the
scheduler's jobs, on this host or another. SIGTERM drains before it stops (DRAIN_SECONDS, default 5:
``/readyz`` answers 503 so a load balancer stops sending, then gunicorn's graceful stop; services/hosting/drain.py).
Threads, connection limits and timeouts:
services/hosting/serving.py; the reverse proxy in front: README, "Several hosts".
"""
from __future__ import annotations

import logging
import os
import sys
import time

import config  # loads .env before the environment is checked
from services.hosting.drain import DRAIN
from services.hosting.serving import (
    ServingConfig,
    allowed_connections,
    connection_budget,
    production_problems,
    raise_open_file_limit,
    warm_up,
)


def _prepare(serving: ServingConfig) -> str | None:
    """Migrate, check the connection budget and the embedder and bootstrap the admin once, in the parent
    process; returns why the workers must not start (None when they may)."""
    from app import bootstrap_admin_once, check_time_scale_on_start, create_app
    from config import Settings
    from services.hosting.runtime import check_embedder

    settings = Settings.from_env()
    app = create_app(settings)
    runtime = app.extensions["memory_lab"]
    try:
        budget = connection_budget(serving, allowed_connections(runtime.db.engine, serving.max_connections))
        if budget.problem():
            return budget.problem()
        print(f"make serve: database connections at most {budget.formula()}, of {budget.allowed} allowed", flush=True)
        runtime.db.upgrade()
        check_time_scale_on_start(app)  # refuses another PILOT_DAY_SECONDS than the database was run with
        check_embedder(runtime)
        bootstrap_admin_once(app)
    finally:
        runtime.background.shutdown()
        runtime.db.dispose()  # no connection may be shared with the forked workers
    return None


def build_application(serving: ServingConfig, bind: str):
    from gunicorn.app.base import BaseApplication
    from gunicorn.arbiter import Arbiter

    class DrainingArbiter(Arbiter):
        """SIGTERM drains first (services.hosting.drain): /readyz turns 503 in every worker at once, the
        workers keep serving for ``serving.drain_seconds`` while the balancer takes this instance out, and only
        then does gunicorn's graceful stop begin (no new connections; requests in flight finish)."""

        def handle_term(self):
            drain = serving.drain_seconds
            if drain and not DRAIN.draining:
                DRAIN.start()
                self.log.info("SIGTERM: draining for %g s (/readyz answers 503), then a graceful stop", drain)
                time.sleep(drain)
            raise StopIteration

    class ProductionServer(BaseApplication):
        def load_config(self) -> None:
            for name, value in serving.gunicorn_options(bind).items():
                self.cfg.set(name, value)

        def load(self):
            from app import create_app

            app = create_app()
            warm_up(app.extensions["memory_lab"])
            if app.extensions["memory_lab"].settings.scheduler_enabled:
                from services.operations.scheduler import start_scheduler

                start_scheduler(app)  # in every worker; the scheduler lease picks the one that runs jobs
            return app

        def run(self):
            DRAIN.share()  # before the workers are forked: they read the flag the main process sets
            DrainingArbiter(self).run()

    return ProductionServer()


def main() -> int:
    problems = production_problems(os.environ.get("DATABASE_URL"), os.environ.get("SECRET_KEY"))
    if problems:
        for problem in problems:
            print(f"make serve: {problem}", file=sys.stderr)
        return 2
    os.environ.setdefault("SESSION_COOKIE_SECURE", "1")
    # several workers (and hosts): rate limits counted together in PostgreSQL, not once per worker
    os.environ.setdefault("RATE_LIMIT_STORAGE", "database")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)  # a line per migration plugin is noise
    # APScheduler's line per job run buries what matters; which process leads the jobs
    # (services.operations.scheduler, INFO) stays visible here, where several processes share them
    logging.getLogger("apscheduler").setLevel((os.environ.get("SCHEDULER_LOG_LEVEL") or "WARNING").strip().upper())
    serving = config.serving_from_env()
    from services.study.definition import StudyDefinitionError

    try:
        refused = _prepare(serving)
    except StudyDefinitionError as exc:  # as make run: a study that cannot run is never served
        print(f"make serve: study definition refused: {exc}", file=sys.stderr)
        return 2
    if refused:
        print(f"make serve: {refused}", file=sys.stderr)
        return 2
    raise_open_file_limit(serving.connection_limit * serving.workers)
    bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
    threads = serving.threads_per_process(serving.workers)
    print(f"AI Memory Lab (production) on http://{bind}: {serving.workers} worker processes x {threads} "
          f"threads, PostgreSQL, secure cookie {'on' if os.environ['SESSION_COOKIE_SECURE'] != '0' else 'OFF'}",
          flush=True)
    build_application(serving, bind).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
