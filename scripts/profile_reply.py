"""CPU per reply, and where it goes: one participant's messages through the whole app in this process,
profiled with cProfile on the process's CPU clock (waiting for the model or the database costs nothing).

    python scripts/profile_reply.py --database-url postgresql+psycopg://memlab@127.0.0.1/memlab_profile
    python scripts/profile_reply.py --messages 200 --top 30
    python scripts/profile_reply.py --messages 100 --cpu-only --tokens-per-second 400   # tokens one by one

The path is the one `make serve` takes, minus gunicorn: the loopback OpenAI-compatible model the load
test uses (scripts/load_bots/servers.py, here with no latency), rate limits counted in the database, half the
messages over JSON and half streamed (SSE), ``--per-participant`` messages (4, as in the load test) from
each of as many participants as it takes. Without ``--database-url`` it runs on a fresh SQLite file.
The report: CPU milliseconds per reply, the SQL statements and pool check-outs per reply (the request
pool's and the background pool's), then the functions with the most CPU of their own and in all.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from sqlalchemy import event

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

TEXTS = ["你好，我最近在准备考试，压力有点大。", "我晚上经常睡不好，有什么建议吗？", "我喜欢跑步，但是最近没有时间。",
         "我对海鲜过敏，周末想请朋友吃饭。", "我在考虑换一份工作，你觉得要注意什么？", "谢谢，你说的很有帮助。"]


def _app(database_url: str, model_url: str):
    os.environ.update(DATABASE_URL=database_url, SECRET_KEY="profile-reply", LLM_PROVIDERS="openai_compatible",
                      OPENAI_BASE_URL=model_url, OPENAI_API_KEY="local-profile", OPENAI_CHAT_MODEL="loopback",
                      CONSOLIDATION_PROVIDERS="offline", EMBEDDING_PROVIDER="offline", RATE_LIMIT_STORAGE="database",
                      RATE_LIMIT_MESSAGES_PER_ACCOUNT="100000 per minute", SCHEDULER_ENABLED="0",
                      SESSION_COOKIE_SECURE="0")
    import subprocess

    from app import create_app
    from services.hosting.serving import warm_up

    # migrated before the app starts, as `make serve` does: an app built on an empty database runs with
    # study versions off (no study_versions table yet), which is not the path a class takes
    subprocess.run([sys.executable, str(ROOT / "scripts" / "migrate.py")], cwd=ROOT, env=dict(os.environ),
                   check=True, capture_output=True)
    app = create_app()
    runtime = app.extensions["memory_lab"]
    warm_up(runtime)
    return app


def _participant(app):
    client = app.test_client()
    token = client.get("/api/auth/csrf").get_json()["csrf_token"]
    response = client.post("/api/auth/register", headers={"X-CSRFToken": token}, json={
        "username": f"profile{time.time_ns() % 10**9}", "password": "profile-password-1", "consent": True})
    token = response.get_json()["csrf_token"]
    assert client.post("/api/tasks/T1/start", headers={"X-CSRFToken": token}).status_code == 201
    return client, token


def _send(chat: tuple, number: int) -> bool:
    client, token = chat
    body = {"content": f"{TEXTS[number % len(TEXTS)]}（{number}）"}
    headers = {"X-CSRFToken": token, "Idempotency-Key": f"profile-{time.time_ns()}-{number}"}
    if number % 2:
        response = client.post("/api/tasks/T1/messages?stream=1", headers=headers, json=body)
        return "event: reply" in response.get_data(as_text=True)
    return client.post("/api/tasks/T1/messages", headers=headers, json=body).status_code == 201


def _count_database_work(runtime) -> Counter:
    """Count the statements sent and the connections checked out of the pools from now on."""
    counts: Counter = Counter()

    def statement(*_args) -> None:
        counts["statements"] += 1

    def checkout(*_args) -> None:
        counts["checkouts"] += 1

    for engine in {runtime.db.engine, runtime.background_db.engine}:
        event.listen(engine, "before_cursor_execute", statement)
        event.listen(engine.pool, "checkout", checkout)
    return counts


def profile(database_url: str, messages: int, top: int, per_participant: int, *, profiled: bool = True,
            tokens_per_second: float = 1e6) -> str:
    from scripts.load_bots.servers import ModelServer

    model = ModelServer({"first_token": 0.0, "tokens": 88, "tokens_per_second": tokens_per_second})
    try:
        app = _app(database_url, model.url)
        warm = _participant(app)
        for number in range(3):  # the first replies load what every later one reuses
            _send(warm, number)
        chats = [_participant(app) for _ in range(-(-messages // per_participant))]
        counts = _count_database_work(app.extensions["memory_lab"])
        profiler = cProfile.Profile(time.process_time)
        cpu = time.process_time()
        if profiled:
            profiler.enable()
        answered = sum(_send(chats[number // per_participant], number) for number in range(messages))
        profiler.disable()
        cpu = time.process_time() - cpu
        app.extensions["memory_lab"].db.dispose()
    finally:
        model.stop()
    out = io.StringIO()
    replies = max(1, answered)
    out.write(f"{answered} of {messages} answered; CPU per reply {1000 * cpu / replies:.1f} ms "
              f"(this process: app and the model client; the loopback model runs in another); "
              f"per reply {counts['statements'] / replies:.1f} SQL statements, "
              f"{counts['checkouts'] / replies:.1f} pool check-outs\n")
    if not profiled:
        return out.getvalue()
    stats = pstats.Stats(profiler, stream=out)
    for order in ("tottime", "cumulative"):
        out.write(f"\n== by {order} ==\n")
        stats.sort_stats(order).print_stats(top)
    return out.getvalue()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", help="an empty or migrated database (default: a fresh SQLite file)")
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--per-participant", type=int, default=4, help="messages from each participant")
    parser.add_argument("--top", type=int, default=25, help="functions listed per ordering")
    parser.add_argument("--cpu-only", action="store_true", help="measure CPU per reply without the profiler's cost")
    parser.add_argument("--tokens-per-second", type=float, default=1e6,
                        help="the model's pace: by default the 88 tokens come at once; at a real pace (e.g. 400) "
                             "each token is its own network read and its own work in the app, as in a class")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="memory-lab-profile-") as workdir:
        url = args.database_url or f"sqlite:///{Path(workdir) / 'profile.db'}"
        print(profile(url, max(1, min(args.messages, 1000)), args.top, max(1, args.per_participant),
                      profiled=not args.cpu_only, tokens_per_second=args.tokens_per_second))
    return 0


if __name__ == "__main__":
    sys.exit(main())
