"""What the two-host run checks besides the messages (scripts/two_hosts.py): reminders sent once (a webhook
receiver counting what the hosts send), the scheduler's jobs run by one lease holder at a time (from both
hosts' logs), and idle participants whose first task falls overdue (so that reminders are due mid-run)."""
from __future__ import annotations

import json
import re
import threading
from collections import Counter
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from scripts.load_bots.stack import Stack

WEBHOOK_PORT = 18191


class Reminders(ThreadingHTTPServer):
    """The reminder webhook's receiver (REMINDER_CHANNELS=webhook): counts what each host sends."""

    def __init__(self) -> None:
        self.received: Counter = Counter()

        class Handler(BaseHTTPRequestHandler):
            def do_POST(handler) -> None:  # noqa: N805
                body = json.loads(handler.rfile.read(int(handler.headers["Content-Length"])))
                self.received[(body["participant_code"], body["task_id"], body["kind"])] += 1
                handler.send_response(204)
                handler.end_headers()

            def log_message(handler, *args) -> None:  # noqa: N805
                pass

        super().__init__(("127.0.0.1", WEBHOOK_PORT), Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def counts(self) -> dict[str, int]:
        return {"received": sum(self.received.values()), "distinct": len(self.received),
                "sent_twice_or_more": sum(1 for n in self.received.values() if n > 1)}


def scheduler_runs(workdir: Path) -> dict:
    """From both hosts' logs: every run of a scheduler job names the lease holder that ran it. Once across
    instances means no job ran in two holders in the same second, and holders only change hands."""
    runs = []
    for log in sorted(workdir.glob("app*.log")):
        for line in log.read_text(errors="replace").splitlines():
            m = re.match(r"(\S+ \S+),\d+ \d+ INFO \S+: scheduler job (\w+) runs in (\S+)", line)
            if m:
                runs.append((datetime.fromisoformat(m.group(1)), m.group(2), m.group(3), log.stem))
    runs.sort()
    by_second: dict[tuple, set] = {}
    for at, job, holder, _ in runs:
        by_second.setdefault((at.replace(microsecond=0), job), set()).add(holder)
    handovers, last = [], None
    for at, _, holder, host in runs:
        if holder != last:
            handovers.append(f"{at:%H:%M:%S} {host} {holder}")
            last = holder
    return {"job_runs": len(runs), "same_job_in_two_holders_at_once": sum(len(h) > 1 for h in by_second.values()),
            "leaders_in_order": handovers}


def stored_reminders(stack: Stack) -> dict[str, int]:
    from sqlalchemy import func, select

    from database.db_manager import Database
    from database.models import Reminder

    db = Database(stack.direct_database_url)
    try:
        with db.Session() as session:
            return dict(session.execute(select(Reminder.status, func.count()).group_by(Reminder.status)).all())
    finally:
        db.dispose()



def register_idle(base: str, count: int) -> None:
    """Participants who enter through the panel's link (so the webhook channel can reach them by their panel
    id) and never start T1: it falls overdue two study days later and each is reminded once."""
    import secrets

    from scripts.load_bots.client import Client

    for _ in range(count):
        client = Client(base)
        client.call("GET", "/api/auth/csrf")
        status, body = client.call("POST", "/api/auth/panel", {"external_id": secrets.token_hex(12), "consent": True})
        if status != 201:
            raise SystemExit(f"two-hosts: an idle participant could not enter: {status} {body}")
