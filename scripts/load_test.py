"""Load test: a class of bot participants chatting at once against a model with real latency.

    python scripts/load_test.py --participants 200 --register-over 80 --messages 4 --think 10
    python scripts/load_test.py --server serve --database-url postgresql+psycopg://... --workers 4
    python scripts/load_test.py --base-url http://127.0.0.1:8000 --database-url sqlite:///data/experiment.db

Everything stays on 127.0.0.1 and is bounded: at most 1,000 participants, 20 messages each and
``--max-seconds`` (default 900) of wall time, after which every bot stops by itself.

* The model is a loopback OpenAI-compatible server (tests/wire_servers.py, in its own process)
  whose own time per reply is set by ``--first-token`` seconds, ``--tokens`` and
  ``--tokens-per-second`` (default 0.8 s + 88 tokens at 40/s = 3.0 s).
* The platform is started the way `make run` starts it (``--server run``: python app.py on a
  fresh SQLite file) or `make serve` (``--server serve``: scripts/serve.py, gunicorn workers on
  the PostgreSQL database named by ``--database-url``), or an already running one
  (``--base-url``), configured with LLM_PROVIDERS=openai_compatible pointing at the model.
* Each bot registers from the same address (all spread over ``--register-over`` seconds), waits
  for the whole class, starts T1 and sends ``--messages`` messages ``--think`` seconds apart
  (±20 %), alternating the JSON and the SSE paths. Each message carries an ``Idempotency-Key``;
  a 503 (back-pressure: Retry-After), an SSE ``error`` event or a cut connection sends it again
  with the same key after Retry-After, up to SEND_ATTEMPTS times (``retried`` in the report).
* The report: reply latency p50/p95/p99 per path, the platform's overhead (latency minus the
  model's own time) in all and per 10 s of the chat phase, the latency of the class's T1 starts,
  errors by kind, messages acknowledged vs stored and replies received vs
  stored (read back from the database), and the machine's load average while it ran.
* A message a bot gave up on (stored, no reply after SEND_ATTEMPTS) is answered by the server's
  ``answer_unanswered`` job a minute later: the run waits up to ``--settle-seconds`` for it and
  reports it (``answered_by_server_after_the_bots``); ``lost.never_answered`` counts what is left.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repository: scripts.load_bots, tests.wire_servers

from scripts.load_bots.load import MAX_MESSAGES, MAX_PARTICIPANTS, run  # noqa: E402


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--participants", type=int, default=200)
    parser.add_argument("--register-over", type=float, default=80.0, help="seconds over which the class registers")
    parser.add_argument("--messages", type=int, default=4, help="messages per participant")
    parser.add_argument("--think", type=float, default=10.0, help="seconds between a reply and the next message")
    parser.add_argument("--first-token", type=float, default=0.8)
    parser.add_argument("--tokens", type=int, default=88)
    parser.add_argument("--tokens-per-second", type=float, default=40.0)
    parser.add_argument("--server", choices=("run", "serve"), default="run",
                        help="start the platform as make run (SQLite) or make serve (PostgreSQL) does")
    parser.add_argument("--workers", type=int, default=4, help="--server serve: worker processes")
    parser.add_argument("--platform-cpus",
                        help="pin the platform's processes to these CPUs (e.g. 0 or 0,1), to measure what a smaller "
                             "machine carries; start PostgreSQL under `taskset` to pin it too")
    parser.add_argument("--base-url", help="an already running platform on 127.0.0.1 instead")
    parser.add_argument("--database-url", help="required for --server serve; with --base-url, to count what is stored")
    parser.add_argument("--max-seconds", type=float, default=900.0, help="hard bound on the run's wall time")
    parser.add_argument("--settle-seconds", type=float, default=150.0,
                        help="after the bots: wait at most this long for the server to answer what they gave up on")
    parser.add_argument("--json-out", help="also write the report to this file")
    parser.add_argument("--keep-files", action="store_true",
                        help="keep the run's working directory (SQLite file, server.log) and print where it is")
    args = parser.parse_args(argv)
    if not 1 <= args.participants <= MAX_PARTICIPANTS or not 1 <= args.messages <= MAX_MESSAGES:
        parser.error(f"at most {MAX_PARTICIPANTS} participants and {MAX_MESSAGES} messages each")
    if args.server == "serve" and not args.base_url and not (args.database_url or "").startswith("postgresql"):
        parser.error("--server serve needs --database-url postgresql+psycopg://... (an empty database)")
    if args.platform_cpus is not None:
        try:
            cpus = {int(c) for c in args.platform_cpus.split(",")}
        except ValueError:
            cpus = set()
        machine = set(range(os.cpu_count() or 1))  # not this process's own affinity: `taskset` may pin the bots apart
        if not cpus or not cpus <= machine:
            parser.error(f"--platform-cpus: a comma-separated list among this machine's CPUs {sorted(machine)}")
        if args.base_url:
            parser.error("--platform-cpus pins a platform this script starts, not one at --base-url")
        args.platform_cpus = sorted(cpus)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = run(args)
    text = json.dumps(result, indent=2, ensure_ascii=False)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n", encoding="utf-8")
    lost = (result["messages"]["lost"] or {}).values()  # never_answered included
    return 0 if result["error_count"] == 0 and not any(lost) else 1


if __name__ == "__main__":
    sys.exit(main())
