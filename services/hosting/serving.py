"""How the app is served: `make run` (waitress, one process, SQLite) and `make serve`
(gunicorn gthread workers on PostgreSQL, production mode).

A reply spends ~99 % of its time waiting for the model, so what limits a cohort is how many
replies can *wait* at once, not CPU. Both servers give every request its own thread
(256 per host unless WEB_THREADS sets them per process: waiting costs no CPU, but every thread
of a process contends for its interpreter lock while it works) and keep idle
keep-alive connections out of the threads altogether (waitress's event loop, gunicorn's
poller), with a connection limit far above a class and a short idle timeout, so idle or
slow clients cannot lock others out. Measurements: docs/benchmarks.md ("Serving a cohort").
"""
from __future__ import annotations

import gc
import logging
import resource
from dataclasses import dataclass
from typing import Any

from database.db_manager import BACKGROUND_POOL_SIZE, LEASE_POOL_SIZE
from services.study.settings import ServingConfig

log = logging.getLogger(__name__)


# connections outside the workers' pools: migrations and the first admin in `make serve`'s parent (closed
# before the workers start, but a second `make serve` or a deploy may overlap), backups, psql, flask CLI
BUDGET_MARGIN = 5


@dataclass(frozen=True)
class ConnectionBudget:
    """How many PostgreSQL connections `make serve` may open at most, against what the server allows."""

    hosts: int
    workers: int
    per_worker: int  # the request pool (DB_POOL_SIZE + DB_MAX_OVERFLOW) and the background pools
    needed: int
    allowed: int | None = None  # max_connections - superuser_reserved_connections, or DB_MAX_CONNECTIONS

    def formula(self) -> str:
        return (f"WEB_HOSTS {self.hosts} x WEB_WORKERS {self.workers} x {self.per_worker} per worker "
                f"(DB_POOL_SIZE + DB_MAX_OVERFLOW + {BACKGROUND_CONNECTIONS} background) + {BUDGET_MARGIN} spare "
                f"= {self.needed}")

    def problem(self) -> str | None:
        """Why the budget does not fit (what to change), or None when it does."""
        if self.allowed is None or self.needed <= self.allowed:
            return None
        return (f"make serve could open {self.formula()} database connections, but the server allows "
                f"{self.allowed}. Lower WEB_WORKERS, DB_POOL_SIZE or DB_MAX_OVERFLOW (connections are held only "
                f"while a request reads or writes, so a pool of 10 + 5 serves hundreds of waiting replies), raise "
                f"max_connections in postgresql.conf (and restart PostgreSQL), or put pgbouncer between the hosts "
                f"and PostgreSQL and set DB_MAX_CONNECTIONS to its max_client_conn (README, \"Several hosts\")")


# per worker, apart from the requests' pool: background work's pool and the scheduler lease's connection
BACKGROUND_CONNECTIONS = BACKGROUND_POOL_SIZE + LEASE_POOL_SIZE


def connection_budget(serving: ServingConfig, allowed: int | None = None) -> ConnectionBudget:
    per_worker = serving.db_pool_size + serving.db_max_overflow + BACKGROUND_CONNECTIONS
    return ConnectionBudget(hosts=serving.hosts, workers=serving.workers, per_worker=per_worker,
                            needed=serving.hosts * serving.workers * per_worker + BUDGET_MARGIN, allowed=allowed)


def allowed_connections(engine: Any, configured: int | None = None) -> int:
    """What this deployment may use: ``configured`` when given (DB_MAX_CONNECTIONS, a pooler's max_client_conn),
    else the server's max_connections less the connections it keeps for superusers."""
    from sqlalchemy import text

    if configured is not None:
        return configured
    with engine.connect() as connection:
        total = int(connection.execute(text("SHOW max_connections")).scalar_one())
        reserved = int(connection.execute(text("SHOW superuser_reserved_connections")).scalar_one())
    return total - reserved


def raise_open_file_limit(connections: int) -> None:
    """Let the process hold every connection it accepts (plus the model and database sockets)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections * 2 + 256
    if soft != resource.RLIM_INFINITY and soft < wanted:
        new = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (new, hard))
        if new < wanted:
            log.warning("open-file limit %d is below the %d that %d connections need", new, wanted, connections)


def production_problems(database_url: str | None, secret_key: str | None) -> list[str]:
    """Why the environment's DATABASE_URL and SECRET_KEY cannot run `make serve` (empty when they can)."""
    problems = []
    url = database_url or ""
    if not url:
        problems.append("DATABASE_URL is not set. make serve runs on PostgreSQL, e.g. "
                        "DATABASE_URL=postgresql+psycopg://memlab:PASSWORD@127.0.0.1/memlab make serve")
    elif not url.startswith("postgresql"):
        problems.append(f"DATABASE_URL is {url.split(':', 1)[0]}:..., but make serve needs PostgreSQL: several "
                        "processes writing one SQLite file queue behind its single writer lock. Use `make run` "
                        "for SQLite (one process), or point DATABASE_URL at PostgreSQL (postgresql+psycopg://...)")
    if not secret_key:
        problems.append("SECRET_KEY is not set. In production every process and every host must sign sessions "
                        "with the same key, so it comes from the environment, not a file generated per host. "
                        "Make one with: python3 -c 'import secrets; print(secrets.token_hex(32))'")
    return problems


def warm_up(runtime: Any) -> None:
    """Load, before a process takes requests, what its first replies would otherwise load while a
    class waits: the embedding model (checking its pin, and warning when the active recall preset was
    fitted for another embedder) and jieba's dictionary. Each `make serve`
    worker is its own process and needs this once; without it the first burst of a class queued
    behind four cold starts (docs/benchmarks.md, "Serving a cohort").

    Then everything loaded so far (modules, the embedder, jieba's dictionary: ~150,000 objects,
    some of them dicts and lists with hundreds of thousands of entries) is moved out of the
    garbage collector's reach with ``gc.freeze()``: it lives as long as the process, and each
    full collection otherwise walked all of it again, a 150-350 ms pause of every request
    thread that landed in the middle of a class's first burst."""
    from services.llm.embedding_service import check_embedder_pinned
    from services.recall.parameters import embedder_warning
    from services.text.keywords import keyword_set

    with runtime.db.Session() as session:
        check_embedder_pinned(session, runtime.embedder)
    warning = embedder_warning(runtime.study.memory.recall, runtime.embedder.model)
    if warning:  # the preset's r would mean nothing; the admin console shows it too (preflight_status)
        log.warning("%s", warning)
    keyword_set("预热词典")
    gc.collect()
    gc.freeze()
