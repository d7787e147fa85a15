"""Serving settings, `make serve`'s refusals, and scripts/load_test.py end to end (small)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from config import serving_from_env
from services.hosting.serving import production_problems
from tests.test_server_start import ROOT


def test_serving_defaults_leave_room_for_a_class_and_env_overrides_them():
    default = serving_from_env({})
    assert default.connection_limit >= 1000 and default.idle_timeout <= 60
    waitress = default.waitress_options()
    assert waitress["asyncore_use_poll"] is True  # select() breaks above 1024 descriptors
    assert waitress["connection_limit"] == default.connection_limit
    # unset, the threads are a budget per host: make run's one process has all 256, make serve's workers share it
    assert waitress["threads"] == 256
    assert default.gunicorn_options("127.0.0.1:9000")["threads"] * default.workers == 256
    assert serving_from_env({"WEB_WORKERS": "32"}).gunicorn_options("127.0.0.1:9000")["threads"] == 16  # a floor
    custom = serving_from_env({"WEB_THREADS": "32", "WEB_WORKERS": "2", "WEB_IDLE_TIMEOUT": "10",
                               "PROXY_HOPS": "1"})
    assert (custom.threads, custom.workers, custom.idle_timeout, custom.proxy_hops) == (32, 2, 10, 1)
    gunicorn = custom.gunicorn_options("127.0.0.1:9000")
    assert gunicorn["worker_class"] == "gthread" and gunicorn["threads"] == 32 and gunicorn["workers"] == 2
    with pytest.raises(ValueError, match="WEB_THREADS"):
        serving_from_env({"WEB_THREADS": "-1"})


def test_production_mode_needs_postgresql_and_a_shared_secret_key():
    assert any("DATABASE_URL is not set" in p for p in production_problems(None, None))
    sqlite = production_problems("sqlite:///data/experiment.db", "k")
    assert len(sqlite) == 1 and "needs PostgreSQL" in sqlite[0] and "make run" in sqlite[0]
    no_key = production_problems("postgresql+psycopg://u@127.0.0.1/db", None)
    assert len(no_key) == 1 and "SECRET_KEY" in no_key[0]
    assert production_problems("postgresql+psycopg://u@127.0.0.1/db", "k") == []


def test_make_serve_refuses_sqlite_with_a_clear_message(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "DATABASE_URL")}
    env["DATABASE_URL"] = f"sqlite:///{tmp_path / 'x.db'}"
    result = subprocess.run([sys.executable, "scripts/serve.py"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2
    assert "needs PostgreSQL" in result.stderr and "SECRET_KEY is not set" in result.stderr
    assert not (tmp_path / "x.db").exists()  # nothing was created


def test_proxy_hops_make_the_participants_address_the_forwarded_one(settings, clock, database, monkeypatch):
    from flask import request

    from app import create_app

    monkeypatch.setattr(settings, "serving", serving_from_env({"PROXY_HOPS": "1"}))
    app = create_app(settings, clock=clock)
    seen = []
    app.add_url_rule("/probe", "probe", lambda: seen.append(request.remote_addr) or "ok")
    app.test_client().get("/probe", headers={"X-Forwarded-For": "203.0.113.5"})
    assert seen == ["203.0.113.5"]
    app.extensions["memory_lab"].db.dispose()


@pytest.mark.slow
def test_load_test_script_reports_a_small_class(tmp_path):
    out = tmp_path / "report.json"
    result = subprocess.run(
        [sys.executable, "scripts/load_test.py", "--participants", "4", "--register-over", "1", "--messages", "2",
         "--think", "0.5", "--first-token", "0.2", "--tokens", "8", "--tokens-per-second", "40",
         "--max-seconds", "120", "--platform-cpus", "0", "--json-out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["platform_cpus"] == [0]  # read back from the kernel: the server ran pinned
    assert report["error_count"] == 0
    assert report["messages"]["stored"]["user_messages"] == report["messages"]["sent"] == 8
    assert report["messages"]["lost"] == {"messages": 0, "replies": 0, "never_answered": 0}
    assert report["messages"]["stored"]["answered_by_server_after_the_bots"] == 0
    assert report["reply_latency"]["json"]["n"] == 4 and report["reply_latency"]["sse"]["n"] == 4
    assert report["model_seconds_measured"]["n"] == 8
    # a reply cannot come back faster than the model's own 0.4 s
    assert report["reply_latency"]["all"]["max"] >= 0.4 and report["overhead"]["n"] == 8


def test_warm_up_loads_the_embedder_and_jieba_then_freezes_the_start_up_heap(settings, clock, database):
    """What a process loaded before its first request is out of the collector's reach afterwards, so a
    full collection in the middle of a class's burst does not walk it again (docs/benchmarks.md)."""
    import gc

    from app import create_app
    from services.hosting.serving import warm_up
    from services.text.keywords import keyword_set

    app = create_app(settings, clock=clock)
    runtime = app.extensions["memory_lab"]
    try:
        warm_up(runtime)
        assert gc.get_freeze_count() > 10_000
        assert keyword_set("我喜欢跑步")  # jieba's dictionary is loaded and answers
    finally:
        gc.unfreeze()  # the rest of the test session collects as usual
        runtime.db.dispose()


@pytest.mark.parametrize("argv", [["--platform-cpus", "x"], ["--platform-cpus", ""],
                                  ["--platform-cpus", str(os.cpu_count() or 1)],
                                  ["--platform-cpus", "0", "--base-url", "http://127.0.0.1:8000"]],
                         ids=["not-a-number", "empty", "beyond-the-machine", "with-base-url"])
def test_load_test_refuses_cpus_it_cannot_pin(argv, capsys):
    """--platform-cpus takes this machine's CPU numbers, for a platform the script itself starts."""
    from scripts import load_test

    with pytest.raises(SystemExit) as refused:
        load_test.parse_args(argv)
    assert refused.value.code == 2 and "--platform-cpus" in capsys.readouterr().err
    assert load_test.parse_args(["--platform-cpus", "0,0"]).platform_cpus == [0]
