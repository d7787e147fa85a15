"""How the app is served: `make run` (waitress, one process, SQLite) and `make serve`
(gunicorn gthread workers on PostgreSQL, production mode).

A reply spends ~99 % of its time waiting for the model, so what limits a cohort is how many
replies can *wait* at once, not CPU. Both servers give every request its own thread
(WEB_THREADS per process; a waiting thread costs a little memory and no CPU) and keep idle
keep-alive connections out of the threads altogether (waitress's event loop, gunicorn's
poller), with a connection limit far above a class and a short idle timeout, so idle or
slow clients cannot lock others out. Measurements: docs/benchmarks.md ("Serving a cohort").
"""
from __future__ import annotations

import gc
import logging
import os
import resource
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from database.db_manager import BACKGROUND_POOL_SIZE, LEASE_POOL_SIZE

log = logging.getLogger(__name__)


def _int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = int(raw)
    if value < 0:
        raise ValueError(f"{name} must not be negative")
    return value


@dataclass(frozen=True)
class ServingConfig:
    """Web server settings (env vars documented in README, "Serving a class")."""

    threads: int = 256  # per process: replies that can wait for the model at once
    connection_limit: int = 2000  # open connections per process, idle ones included
    idle_timeout: int = 30  # seconds an idle keep-alive connection stays open
    workers: int = 4  # make serve: processes (each with `threads` threads)
    db_pool_size: int = 10  # per process; PostgreSQL's default max_connections is 100 (connection_budget)
    db_max_overflow: int = 5
    db_pool_timeout: int = 10  # seconds a request waits for a pooled connection before a 503
    proxy_hops: int = 0  # reverse proxies in front that set X-Forwarded-For/-Proto
    hosts: int = 1  # machines running `make serve` on the same database (the connection budget)
    db_prepared_statements: bool = True  # off behind pgbouncer < 1.21 in transaction mode

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServingConfig:
        env = os.environ if environ is None else environ
        d = cls()
        return cls(
            threads=max(1, _int(env, "WEB_THREADS", d.threads)),
            connection_limit=max(10, _int(env, "WEB_CONNECTION_LIMIT", d.connection_limit)),
            idle_timeout=max(1, _int(env, "WEB_IDLE_TIMEOUT", d.idle_timeout)),
            workers=max(1, _int(env, "WEB_WORKERS", d.workers)),
            db_pool_size=max(1, _int(env, "DB_POOL_SIZE", d.db_pool_size)),
            db_max_overflow=_int(env, "DB_MAX_OVERFLOW", d.db_max_overflow),
            db_pool_timeout=max(1, _int(env, "DB_POOL_TIMEOUT", d.db_pool_timeout)),
            hosts=max(1, _int(env, "WEB_HOSTS", d.hosts)),
            db_prepared_statements=(env.get("DB_PREPARED_STATEMENTS") or "1").strip().lower() not in ("0", "false"),
            proxy_hops=_int(env, "PROXY_HOPS", d.proxy_hops),
        )

    def waitress_options(self) -> dict[str, object]:
        return {
            "threads": self.threads,
            "connection_limit": self.connection_limit,
            # waitress's event loop, not a thread, watches idle connections; this closes them
            "channel_timeout": self.idle_timeout,
            "cleanup_interval": max(1, min(30, self.idle_timeout // 2)),
            # select() cannot watch descriptors above 1024; poll() can (2000 connections)
            "asyncore_use_poll": True,
            "backlog": 2048,
            "ident": "ai-memory-lab",
        }

    def gunicorn_options(self, bind: str) -> dict[str, object]:
        return {
            "bind": bind,
            "workers": self.workers,
            "worker_class": "gthread",
            "threads": self.threads,
            "worker_connections": self.connection_limit,
            "keepalive": self.idle_timeout,
            "backlog": 2048,
            # each worker its own listening socket: the kernel spreads new connections evenly, instead
            # of the first worker to wake up taking most of a class's long-lived keep-alive connections
            "reuse_port": True,
            # a worker whose main loop stops for this long is restarted; requests waiting on the
            # model do not count (their threads are separate from the loop that heartbeats)
            "timeout": 60,
            "graceful_timeout": 30,
            "preload_app": False,  # each worker builds its own app: engine, pools, scheduler
            "accesslog": None,
            "forwarded_allow_ips": "127.0.0.1,::1",
            # gunicorn's admin socket is a file in $HOME shared by every server on the host; unused here
            "control_socket_disable": True,
        }


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


def allowed_connections(engine: Any, environ: Mapping[str, str] | None = None) -> int:
    """What this deployment may use: DB_MAX_CONNECTIONS when set (a pooler's max_client_conn), else the
    server's max_connections less the connections it keeps for superusers."""
    from sqlalchemy import text

    env = os.environ if environ is None else environ
    if (env.get("DB_MAX_CONNECTIONS") or "").strip():
        return _int(env, "DB_MAX_CONNECTIONS", 0)
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


def production_problems(environ: Mapping[str, str] | None = None) -> list[str]:
    """Why this environment cannot run `make serve` (empty when it can)."""
    env = os.environ if environ is None else environ
    problems = []
    url = env.get("DATABASE_URL", "")
    if not url:
        problems.append("DATABASE_URL is not set. make serve runs on PostgreSQL, e.g. "
                        "DATABASE_URL=postgresql+psycopg://memlab:PASSWORD@127.0.0.1/memlab make serve")
    elif not url.startswith("postgresql"):
        problems.append(f"DATABASE_URL is {url.split(':', 1)[0]}:..., but make serve needs PostgreSQL: several "
                        "processes writing one SQLite file queue behind its single writer lock. Use `make run` "
                        "for SQLite (one process), or point DATABASE_URL at PostgreSQL (postgresql+psycopg://...)")
    if not env.get("SECRET_KEY"):
        problems.append("SECRET_KEY is not set. In production every process and every host must sign sessions "
                        "with the same key, so it comes from the environment, not a file generated per host. "
                        "Make one with: python3 -c 'import secrets; print(secrets.token_hex(32))'")
    return problems


RATE_LIMIT_DEFAULTS = {
    # A class on a campus network shares one public address: per-address caps on successful
    # registrations must let a whole cohort in at once (200 within two minutes), while failed
    # attempts (taken names, bad passwords, missing consent) are capped tightly.
    "register": ("RATE_LIMIT_REGISTER_PER_ADDRESS", "1000 per hour"),
    "register_failures": ("RATE_LIMIT_REGISTER_FAILURES_PER_ADDRESS", "30 per minute"),
    # per account, so a cohort behind one address never shares it
    "messages": ("RATE_LIMIT_MESSAGES_PER_ACCOUNT", "30 per minute"),
    # new participants entering through the panel's link from one address (a campus shares one);
    # returning visits (device cookie, login session) are not counted
    "panel_entries": ("RATE_LIMIT_PANEL_ENTRIES_PER_ADDRESS", "60 per minute"),
    # password logins: per (account, address), and failures per account from all addresses together
    # (not counted where the account logged in before, so guesses never lock the owner out there)
    "login_per_account_address": ("RATE_LIMIT_LOGIN_PER_ACCOUNT_ADDRESS", "10 per minute"),
    "login_failures_per_account": ("RATE_LIMIT_LOGIN_FAILURES_PER_ACCOUNT", "100 per hour"),
}


def rate_limits(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The rate limits (flask-limiter strings such as "1000 per hour"), checked at start-up."""
    from limits import parse_many

    env = os.environ if environ is None else environ
    chosen = {}
    for name, (variable, default) in RATE_LIMIT_DEFAULTS.items():
        value = (env.get(variable) or "").strip() or default
        try:
            parse_many(value)
        except ValueError as exc:
            raise ValueError(f"{variable}={value!r} is not a rate limit such as '1000 per hour': {exc}") from exc
        chosen[name] = value
    return chosen


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
    from services.recall.recall_model import embedder_warning
    from services.text.keywords import keyword_set

    with runtime.db.Session() as session:
        check_embedder_pinned(session, runtime.embedder)
    warning = embedder_warning(runtime.study.memory.recall, runtime.embedder.model)
    if warning:  # the preset's r would mean nothing; the admin console shows it too (preflight_status)
        log.warning("%s", warning)
    keyword_set("预热词典")
    gc.collect()
    gc.freeze()
