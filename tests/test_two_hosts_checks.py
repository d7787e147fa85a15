"""What the two-host run checks (scripts/two_hosts.py): the scheduler's job runs read from both hosts' logs,
reminders counted at the webhook (a second delivery is seen), and the overhead split by phase."""
from __future__ import annotations

import json
import urllib.request

from scripts.load_bots import hosts_checks
from scripts.load_bots.measure import by_phase

LINE = "2026-11-28 00:36:{s:02d},123 4242 INFO services.operations.scheduler: scheduler job {job} runs in {holder}\n"


def test_scheduler_runs_find_two_holders_running_a_job_at_once(tmp_path):
    (tmp_path / "app1.log").write_text(LINE.format(s=1, job="mark_overdue", holder="vm:1:a")
                                       + LINE.format(s=6, job="mark_overdue", holder="vm:1:a"))
    (tmp_path / "app2.log").write_text(LINE.format(s=11, job="mark_overdue", holder="vm:2:b"))
    runs = hosts_checks.scheduler_runs(tmp_path)
    assert runs["job_runs"] == 3 and runs["same_job_in_two_holders_at_once"] == 0
    assert [entry.split()[1] for entry in runs["leaders_in_order"]] == ["app1", "app2"]
    (tmp_path / "app2.log").write_text(LINE.format(s=6, job="mark_overdue", holder="vm:2:b"))  # the same second
    assert hosts_checks.scheduler_runs(tmp_path)["same_job_in_two_holders_at_once"] == 1


def test_the_reminder_receiver_counts_a_second_delivery(monkeypatch):
    from tests.test_server_start import free_port

    monkeypatch.setattr(hosts_checks, "WEBHOOK_PORT", free_port())
    receiver = hosts_checks.Reminders()
    try:
        body = json.dumps({"participant_code": "P1", "task_id": "T1", "kind": "overdue"}).encode()
        for _ in range(2):
            urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{hosts_checks.WEBHOOK_PORT}/remind",
                                                          data=body, method="POST"), timeout=5)
        assert receiver.counts() == {"received": 2, "distinct": 1, "sent_twice_or_more": 1}
    finally:
        receiver.shutdown()


def test_overhead_by_phase_splits_by_when_a_message_was_sent():
    timeline = [(0.0, 3.5), (5.0, 4.0), (12.0, 3.2), (30.0, 3.1)]  # (sent at, latency); the model takes 3.0 s
    phases = by_phase(timeline, [("before", -1e6), ("down", 10.0), ("after", 20.0)], 3.0)
    assert {name: phase["n"] for name, phase in phases.items()} == {"before": 2, "down": 1, "after": 1}
    assert phases["down"]["p50"] == 0.2
