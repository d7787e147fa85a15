"""Graceful stop and readiness for `make serve` behind a load balancer.

A SIGTERM to `make serve`'s main process (systemd, a rolling restart, ``docker stop``) first *drains*:
``GET /readyz`` answers 503 at once in every worker, so the balancer's health check takes this
instance out of rotation within its check interval, while requests that still arrive meanwhile are
served as usual. After ``DRAIN_SECONDS`` (default 5: deploy/haproxy.cfg checks every second and
marks a server down after two failures) gunicorn's graceful stop follows: the workers take no new
connection, answer a request arriving on a kept-alive connection with ``Connection: close``, and let
requests in flight, streamed replies included, finish within ``graceful_timeout`` (30 s; a 3 s model
reply ends well inside it). A reply still running after that is cut: its message is committed already
(before any model call), the stream then ends without its ``reply`` event, and the client sends the
message again with its idempotency key (the page, the bots) or the scheduler's ``answer_unanswered``
answers it; nothing is half-written, because a reply is one transaction.

The flag is one byte of shared memory made by the main process before it forks the workers, so a
worker sees it without a round trip; ``make run`` (one process, no balancer) never drains.
"""
from __future__ import annotations

import logging
import multiprocessing
import time
from typing import Any

log = logging.getLogger(__name__)

class DrainFlag:
    """Whether this instance is draining: set by the main process, read by every worker."""

    def __init__(self) -> None:
        self._since: Any = None  # a shared double: when draining began (epoch seconds), 0 when not

    def share(self) -> None:
        """Make the flag shared memory; call in the main process before the workers are forked."""
        if self._since is None:
            self._since = multiprocessing.RawValue("d", 0.0)

    def start(self) -> None:
        self.share()
        if not self._since.value:
            self._since.value = time.time()

    def reset(self) -> None:
        if self._since is not None:
            self._since.value = 0.0

    @property
    def draining(self) -> bool:
        return bool(self._since is not None and self._since.value)


DRAIN = DrainFlag()


def readiness(runtime: Any, flag: DrainFlag = DRAIN) -> tuple[bool, str]:
    """(ready, why): not ready while draining or when the database cannot be reached. The check runs on
    the background pool (3 connections per worker), not the requests' pool, so a class that keeps
    every request connection busy does not make a healthy instance look dead and flap out of rotation."""
    from sqlalchemy import text
    from sqlalchemy.exc import SQLAlchemyError

    if flag.draining:
        return False, "draining"
    try:
        with runtime.background_db.engine.connect() as connection:
            connection.execute(text("SELECT 1"))
    except SQLAlchemyError as exc:
        log.warning("readiness: the database cannot be reached: %s", getattr(exc, "orig", exc))
        return False, "database_unreachable"
    return True, "ready"
