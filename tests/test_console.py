"""What `make run` prints and how it starts and stops: the admin password stands out, scheduler jobs
do not fill the console, Ctrl-C is a clean stop, and a different time scale on the same database is
refused unless allowed (issue 20, items 15 and 16); a start on a database that has its admin prints no
password."""
import logging
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app import configure_console_logging, password_notice
from tests.test_server_start import Browserless, free_port, wait_until_up

ROOT = Path(__file__).resolve().parent.parent


def test_the_password_notice_is_a_framed_block():
    notice = password_notice("admin", "s3cret-Pass")
    lines = [line for line in notice.splitlines() if line]
    assert lines[0] == lines[-1] and set(lines[0]) == {"#"}
    assert all(line.startswith("# ") and line.endswith(" #") and len(line) == len(lines[0]) for line in lines[1:-1])
    assert "First start: created admin 'admin' with password: s3cret-Pass" in notice


@pytest.fixture
def restore_loggers():
    names = ("apscheduler", "services.operations.scheduler", "alembic")
    levels = {name: logging.getLogger(name).level for name in names}
    yield
    for name, level in levels.items():
        logging.getLogger(name).setLevel(level)


def test_scheduler_logs_at_warning_unless_asked(restore_loggers):
    configure_console_logging({})
    assert logging.getLogger("apscheduler").getEffectiveLevel() == logging.WARNING
    assert not logging.getLogger("apscheduler.executors.default").isEnabledFor(logging.INFO)
    configure_console_logging({"SCHEDULER_LOG_LEVEL": "info"})
    assert logging.getLogger("apscheduler.executors.default").isEnabledFor(logging.INFO)
    with pytest.raises(SystemExit, match="SCHEDULER_LOG_LEVEL"):
        configure_console_logging({"SCHEDULER_LOG_LEVEL": "chatty"})


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items()
           if not k.endswith("_API_KEY") and k not in ("SCHEDULER_LOG_LEVEL", "ALLOW_TIME_SCALE_CHANGE")}
    env.update(DATABASE_URL=f"sqlite:///{tmp_path / 'run.db'}", SECRET_KEY="console-test", SCHEDULER_ENABLED="1",
               LLM_PROVIDERS="offline", EMBEDDING_PROVIDER="offline", PYTHONUNBUFFERED="1",
               SCHEDULER_SWEEP_SECONDS="1", SCHEDULER_OVERDUE_SECONDS="1", PORT=str(free_port()),
               PYTHONFAULTHANDLER="1", **extra)
    return env


def _interruptible() -> None:
    """Ctrl-C as a terminal delivers it, whatever the test process passes on: a suite started in the
    background by a shell without job control (``.ci/run &``) has SIGINT ignored, a Python started with it
    ignored keeps ignoring it, and a blocked SIGINT stays blocked across exec."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _start(command, env, log_path, **popen):
    log = open(log_path, "w+")
    # stdin from /dev/null: under pytest-xdist a worker's stdin is its channel to the controller
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=log,
                            stderr=subprocess.STDOUT, preexec_fn=_interruptible, **popen)
    return proc, log


def _stopped(proc, log, *, timeout: float = 60.0) -> int:
    """The exit code after Ctrl-C; a server that does not stop dumps its threads (faulthandler) into the
    failure, so a hang shows where it waits."""
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        proc.wait(timeout=30)
        log.seek(0)
        pytest.fail(f"still running {timeout:g} s after Ctrl-C; its output and threads:\n{log.read()[-30000:]}")


@pytest.mark.slow
def test_make_run_console_stops_cleanly_and_guards_the_time_scale(tmp_path):
    # first start: the password block, then quiet scheduler jobs (every second), then Ctrl-C exits 0
    env = _env(tmp_path, PILOT_DAY_SECONDS="60")
    proc, log = _start([sys.executable, "app.py"], env, tmp_path / "first.log")
    try:
        wait_until_up(Browserless(f"http://127.0.0.1:{env['PORT']}"), log)
        time.sleep(3)  # three runs of each scheduler job
        proc.send_signal(signal.SIGINT)
        assert _stopped(proc, log) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    log.seek(0)
    output = log.read()
    assert "#" * 20 in output and "First start: created admin 'admin' with password:" in output
    assert "apscheduler" not in output and "Running job" not in output, output
    assert "Traceback" not in output and "KeyboardInterrupt" not in output, output
    assert "stopped" in output

    # a different PILOT_DAY_SECONDS on the same database is refused before serving
    env = _env(tmp_path, PILOT_DAY_SECONDS="120")
    refused = subprocess.run([sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True,
                             timeout=120)
    assert refused.returncode != 0
    assert "time scale refused" in refused.stderr and "PILOT_DAY_SECONDS=60" in refused.stderr

    # allowed explicitly, under make (Ctrl-C reaches the whole process group): it serves, audits the
    # change, and stops without a make error
    makefile = tmp_path / "Makefile"
    makefile.write_text(f"run:\n\t{sys.executable} app.py\n")
    env = _env(tmp_path, PILOT_DAY_SECONDS="120", ALLOW_TIME_SCALE_CHANGE="1")
    proc, log = _start(["make", "-f", str(makefile), "run"], env, tmp_path / "make.log", start_new_session=True)
    try:
        wait_until_up(Browserless(f"http://127.0.0.1:{env['PORT']}"), log)
        os.killpg(proc.pid, signal.SIGINT)
        _stopped(proc, log)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    log.seek(0)
    output = log.read()
    assert "time scale changed on purpose" in output
    # a later start on the same database prints no new password (test_server_start.py relies on this check
    # rather than paying for a second server start of its own)
    assert "password" not in output, output
    assert "make: ***" not in output and "Traceback" not in output, output
    with sqlite3.connect(tmp_path / "run.db") as db:
        assert db.execute("SELECT value FROM database_settings WHERE key = 'day_seconds'").fetchone() == ("120.0",)
        assert db.execute("SELECT count(*) FROM audit_log WHERE action = 'time_scale_changed'").fetchone() == (1,)
