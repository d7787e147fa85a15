"""Two hosts behind a real load balancer, on this machine (started by scripts/two_hosts.sh, which installs
PostgreSQL, pgbouncer and HAProxy first; `make two-hosts`):

    scripts/two_hosts.sh up                      # the stack, until Ctrl-C or --max-seconds; prints its addresses
    scripts/two_hosts.sh up --restart-dead 20    # ... and start a host that died again 20 s later (as systemd)
    scripts/two_hosts.sh kill --participants 600 --kill-at 10 --down-for 10   # load; kill -9 a host midway
    scripts/two_hosts.sh rolling --participants 600 --restart-at 5            # load; restart both in turn

One PostgreSQL, pgbouncer in transaction mode (deploy/pgbouncer.ini), two `make serve` instances on
127.0.0.1:18101 and :18102 sharing SECRET_KEY, HAProxy (deploy/haproxy.cfg) on 127.0.0.1:18100 checking
each host's /readyz (scripts/load_bots/stack.py). ``kill`` and ``rolling`` drive the load test's bots
(scripts/load_bots/: a loopback model with real latency, idempotency keys, resends after 502/503/504)
through the balancer and count messages sent, acknowledged, stored and answered (read back from PostgreSQL),
overhead before/while/after, how many processes ran the scheduler's jobs at once, and the reminders the
hosts' webhook channel sent (to a receiver in this script), each of which must arrive once.
Everything is bounded (--max-seconds) and stopped on exit, Ctrl-C or SIGTERM.
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scripts.load_bots.hosts_checks import (  # noqa: E402,E501
    WEBHOOK_PORT,
    Reminders,
    register_idle,
    scheduler_runs,
    stored_reminders,
)
from scripts.load_bots.load import model_latency, run  # noqa: E402
from scripts.load_bots.ports import Ports  # noqa: E402
from scripts.load_bots.servers import ModelServer  # noqa: E402
from scripts.load_bots.stack import Stack  # noqa: E402
from scripts.load_test import parse_args as load_args  # noqa: E402


def parse(argv: list[str] | None) -> tuple[argparse.Namespace, list[str]]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("mode", choices=("up", "kill", "rolling"))
    parser.add_argument("--workers", type=int, default=2, help="make serve workers per host")
    parser.add_argument("--workdir", help="logs and the database's files (default: a new temporary directory)")
    parser.add_argument("--restart-dead", type=float, help="up: start a host that died again after this many s")
    parser.add_argument("--kill-at", type=float, default=10.0, help="kill: seconds into the chat phase")
    parser.add_argument("--down-for", type=float, default=10.0, help="kill: seconds before the host is started")
    parser.add_argument("--restart-at", type=float, default=5.0, help="rolling: seconds into the chat phase")
    parser.add_argument("--idle", type=int, default=20,
                        help="kill/rolling: participants who register and never start T1, so that it falls overdue "
                             "(two study days) and each is reminded once, by whichever host leads the scheduler")
    parser.add_argument("--pilot-day-seconds", type=float, default=120.0,
                        help="kill/rolling: short study days, so that tasks fall overdue and reminders are due mid-run")
    return parser.parse_known_args(argv)


def main(argv: list[str] | None = None) -> int:
    ours, rest = parse(argv)
    args = load_args(["--server", "serve", "--base-url", "http://127.0.0.1:0", *rest])  # the balancer, below
    workdir = Path(ours.workdir or tempfile.mkdtemp(prefix="memory-lab-two-hosts-"))
    stack = Stack(workdir, Ports(), workers=ours.workers)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the finally below stops everything
    model = reminders = None
    started = time.monotonic()
    try:
        if ours.mode != "up":
            model = ModelServer(model_latency(args))
            reminders = Reminders()
            stack.app_env.update(
                LLM_PROVIDERS="openai_compatible", OPENAI_BASE_URL=model.url, OPENAI_API_KEY="local-load-test",
                OPENAI_CHAT_MODEL="loopback", CONSOLIDATION_PROVIDERS="offline", EMBEDDING_PROVIDER="offline",
                LLM_TIMEOUT_SECONDS="60", PILOT_DAY_SECONDS=str(ours.pilot_day_seconds), PILOT_TIMER_SCALE="1",
                REMINDERS_ENABLED="1", REMINDER_CHANNELS="webhook", SCHEDULER_REMINDER_SECONDS="5",
                # jobs every 5 s: the scheduler lease is then 15 s (45 s by default), so the surviving host
                # takes the jobs over while the killed one is still down
                SCHEDULER_SWEEP_SECONDS="5", SCHEDULER_OVERDUE_SECONDS="5", SCHEDULER_ANSWER_SECONDS="5",
                REMINDER_WEBHOOK_URL=f"http://127.0.0.1:{WEBHOOK_PORT}/remind",
                PUBLIC_BASE_URL=stack.balancer_url)
        stack.start()
        print(f"two-hosts: up. Balancer {stack.balancer_url}; hosts {stack.app_url(0)} (pid {stack.procs['app1'].pid}) "
              f"and {stack.app_url(1)} (pid {stack.procs['app2'].pid}); database {stack.database_url} "
              f"(pgbouncer) / {stack.direct_database_url}; logs in {workdir}", flush=True)
        if ours.mode == "up":
            return supervise(stack, ours, args.max_seconds)
        args.base_url, args.database_url = stack.balancer_url, stack.direct_database_url
        register_idle(stack.balancer_url, ours.idle)
        chaos = (lambda: kill_midway(stack, ours)) if ours.mode == "kill" else (lambda: rolling(stack, ours))
        result = run(args, model=model, during_chat=chaos)
        model = None  # run() stopped it
        time.sleep(6)  # a last reminder run
        result["reminders"] = {"webhook": reminders.counts(), "stored": stored_reminders(stack)}
        result["scheduler"] = scheduler_runs(workdir)
        result["hosts"] = [f"{time.strftime('%H:%M:%S', time.localtime(time.time() - (time.monotonic() - at)))} "
                           f"{what}" for at, what in stack.events]
        result["balancer"] = "HAProxy (deploy/haproxy.cfg), pgbouncer (deploy/pgbouncer.ini), 2 hosts x " \
                             f"{ours.workers} workers, {ours.mode}"
        text = json.dumps(result, indent=2, ensure_ascii=False)
        print(text)
        if args.json_out:
            Path(args.json_out).write_text(text + "\n", encoding="utf-8")
        lost = (result["messages"]["lost"] or {}).values()
        twice = (result["messages"]["stored"] or {}).get("messages_with_two_replies")
        once = result["scheduler"]["same_job_in_two_holders_at_once"] == 0 \
            and result["reminders"]["webhook"]["sent_twice_or_more"] == 0
        return 0 if not any(lost) and not twice and once else 1
    finally:
        if model is not None:
            model.stop()
        if reminders is not None:
            reminders.shutdown()
        stack.stop()
        print(f"two-hosts: everything stopped after {time.monotonic() - started:.0f} s; logs in {workdir}",
              file=sys.stderr)


def kill_midway(stack: Stack, ours) -> list[tuple[str, float]]:
    begin = time.monotonic()
    time.sleep(ours.kill_at)
    stack.kill_app(0)
    down = time.monotonic()
    time.sleep(ours.down_for)
    stack.start_app(0)  # waits until its /readyz answers 200
    stack.wait_balanced()
    return [("before_kill", begin - 1e6), ("host_down", down), ("after_restart", time.monotonic())]


def rolling(stack: Stack, ours) -> list[tuple[str, float]]:
    begin = time.monotonic()
    time.sleep(ours.restart_at)
    marks = [("before", begin - 1e6)]
    for index in (0, 1):  # one at a time: the next only once the balancer sends to the restarted one again
        marks.append((f"restarting_app{index + 1}", time.monotonic()))
        stack.stop_app(index, graceful=True)
        stack.start_app(index)
        stack.wait_balanced()
    marks.append(("after", time.monotonic()))
    return marks


def supervise(stack: Stack, ours, bound: float) -> int:
    """Keep the stack up until Ctrl-C or ``bound`` seconds; with --restart-dead, start a dead host again."""
    deadline = time.monotonic() + bound
    dead_since: dict[int, float] = {}
    try:
        while time.monotonic() < deadline:
            time.sleep(1)
            for index in (0, 1):
                proc = stack.procs.get(f"app{index + 1}")
                if proc is not None and proc.poll() is None:
                    continue
                if proc is not None:
                    stack.procs.pop(f"app{index + 1}")
                    stack.note(f"host app{index + 1} died (exit {proc.returncode})")
                    dead_since[index] = time.monotonic()
                if ours.restart_dead is not None and time.monotonic() - dead_since.get(index, 0) >= ours.restart_dead:
                    dead_since.pop(index, None)
                    stack.start_app(index)
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
