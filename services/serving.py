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
    db_pool_size: int = 10  # per process; PostgreSQL's default max_connections is 100
    db_max_overflow: int = 10
    proxy_hops: int = 0  # reverse proxies in front that set X-Forwarded-For/-Proto

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
    from services.embedding_service import check_embedder_pinned
    from services.keywords import keyword_set
    from services.preflight import warn_embedder_mismatch

    with runtime.db.Session() as session:
        check_embedder_pinned(session, runtime.embedder)
    warn_embedder_mismatch(runtime.study, runtime.embedder.model)  # the preset's r would mean nothing
    keyword_set("预热词典")
    gc.collect()
    gc.freeze()
