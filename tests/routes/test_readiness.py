"""``/readyz`` for a load balancer's health check: 200 only when the instance reaches its database and is not
draining; ``/healthz`` (liveness) stays 200 while draining. The drain itself, in a real `make serve` process:
tests/test_graceful_stop.py."""
from __future__ import annotations

import pytest

from config import serving_from_env
from database.db_manager import Database
from services.hosting.drain import DRAIN, DrainFlag


@pytest.fixture
def flag():
    yield DRAIN
    DRAIN.reset()


@pytest.mark.postgres
def test_ready_when_the_database_answers(client):
    response = client.raw.get("/readyz")
    assert response.status_code == 200
    assert response.get_json() == {"ready": True, "reason": "ready"}
    assert response.headers["Cache-Control"] == "no-store"


@pytest.mark.postgres
def test_not_ready_while_draining_but_still_alive(client, flag):
    flag.start()
    response = client.raw.get("/readyz")
    assert response.status_code == 503
    assert response.get_json() == {"ready": False, "reason": "draining"}
    assert response.headers["Retry-After"] == "5"
    assert client.raw.get("/healthz").status_code == 200  # alive: requests in flight are still served
    flag.reset()
    assert client.raw.get("/readyz").status_code == 200


@pytest.mark.postgres
def test_not_ready_when_the_database_is_unreachable(app, client):
    runtime = app.extensions["memory_lab"]
    # nothing listens on port 9 (discard) of 127.0.0.1: the connection is refused at once
    unreachable = Database("postgresql+psycopg://memlab@127.0.0.1:9/memlab", pool_size=1, max_overflow=0,
                           pool_timeout=1)
    kept, runtime.jobs_db = runtime.jobs_db, unreachable
    try:
        response = client.raw.get("/readyz")
    finally:
        runtime.jobs_db = kept
        unreachable.dispose()
    assert response.status_code == 503
    assert response.get_json() == {"ready": False, "reason": "database_unreachable"}


def test_the_flag_is_shared_with_forked_workers():
    import os

    flag = DrainFlag()
    flag.share()  # the main process, before the fork
    pid = os.fork()
    if pid == 0:  # a worker: exits 0 once it sees the main process's drain
        import time

        deadline = time.time() + 5
        while not flag.draining and time.time() < deadline:
            time.sleep(0.01)
        os._exit(0 if flag.draining else 1)
    flag.start()
    assert os.waitpid(pid, 0)[1] == 0


def test_drain_seconds_from_the_environment():
    assert serving_from_env({}).drain_seconds == 5.0
    assert serving_from_env({"DRAIN_SECONDS": "2.5"}).drain_seconds == 2.5
    with pytest.raises(ValueError):
        serving_from_env({"DRAIN_SECONDS": "-1"})
