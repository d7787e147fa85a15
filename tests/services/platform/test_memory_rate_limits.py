"""`make run`'s rate-limit store (one process, in memory) counts correctly when many request threads
hit it at once: limits' own memory store restarted its expiry timer from request threads and once in
a while two of them started the same timer ("threads can only be started once", a 500)."""
from __future__ import annotations

import dataclasses
import sys
import threading
import time

import pytest
from limits import parse
from limits.strategies import FixedWindowRateLimiter

THREADS = 32
ROUNDS = 150


@pytest.fixture
def app(settings, clock, database):
    """The app as `make run` builds it: rate limits on, counted in this process's memory."""
    from app import create_app

    flask_app = create_app(dataclasses.replace(settings, rate_limits_enabled=True, rate_limit_storage="memory"),
                           clock=clock)
    yield flask_app
    flask_app.extensions["memory_lab"].db.dispose()


def test_many_threads_at_once_never_fail_and_every_hit_counts(app):
    from routes.access import limiter

    storage = limiter.storage
    errors: list[BaseException] = []
    start = threading.Barrier(THREADS)

    def hammer(number: int) -> None:
        for round_number in range(ROUNDS):
            try:
                start.wait()
                storage.incr(f"round:{round_number}", 60)
            except BaseException as exc:  # noqa: BLE001 - any failure is the finding
                errors.append(exc)
            if number == 0:
                time.sleep(0.02)  # long enough for a window's expiry machinery to go idle again

    threads = [threading.Thread(target=hammer, args=(n,)) for n in range(THREADS)]
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as a loaded server does
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        sys.setswitchinterval(switch)
    assert errors == []
    assert [storage.get(f"round:{n}") for n in range(ROUNDS)] == [THREADS] * ROUNDS


def test_a_fixed_window_limit_holds_and_starts_again_when_it_ends(app, monkeypatch):
    import services.platform.memory_rate_limits as store_module
    from routes.access import limiter

    now = [1_000_000.0]
    monkeypatch.setattr(store_module.time, "time", lambda: now[0])
    limit = parse("3 per minute")
    window = FixedWindowRateLimiter(limiter.storage)
    assert [window.hit(limit, "messages", "user:1") for _ in range(4)] == [True, True, True, False]
    assert window.hit(limit, "messages", "user:2") is True
    now[0] += 61
    assert window.hit(limit, "messages", "user:1") is True
    assert limiter.storage.get_expiry("messages") == now[0]  # no window: it would end now
