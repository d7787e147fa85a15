"""The load test's processes: the loopback model (tests/wire_servers.py in its own process) and the platform,
started as `make run` or `make serve` starts it."""
from __future__ import annotations

import multiprocessing
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

from scripts.load_bots.client import Client

ROOT = Path(__file__).resolve().parents[2]
# The loopback model server lives in tests/ (tests/wire_servers.py), which the editable install of
# the project does not include.
sys.path.insert(0, str(ROOT))


def _model_process(latency: dict[str, float], conn) -> None:
    from tests.wire_servers import Latency, OpenAIWireServer

    server = OpenAIWireServer(latency=Latency(**latency))
    conn.send(server.url)
    conn.recv()  # until the parent says stop
    conn.send(list(server.chat_seconds))
    server.close()


class ModelServer:
    def __init__(self, latency: dict[str, float]) -> None:
        self._conn, child = multiprocessing.Pipe()
        self._proc = multiprocessing.get_context("fork").Process(target=_model_process, args=(latency, child),
                                                                 daemon=True)
        self._proc.start()
        self.url = self._conn.recv()

    def stop(self) -> list[float]:
        self._conn.send("stop")
        seconds = self._conn.recv() if self._conn.poll(30) else []
        self._proc.join(10)
        return seconds


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_platform(args, model_url: str, workdir: Path) -> tuple[subprocess.Popen, str, str]:
    """Start the app as `make run` or `make serve` would; returns (process, base URL, database URL)."""
    port = _free_port()
    db_url = args.database_url or f"sqlite:///{workdir / 'load.db'}"
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(PORT=str(port), HOST="127.0.0.1", DATABASE_URL=db_url, SECRET_KEY=secrets.token_hex(16),
               LLM_PROVIDERS="openai_compatible", OPENAI_BASE_URL=model_url, OPENAI_API_KEY="local-load-test",
               OPENAI_CHAT_MODEL="loopback", CONSOLIDATION_PROVIDERS="offline", EMBEDDING_PROVIDER="offline",
               LLM_TIMEOUT_SECONDS="60", SESSION_COOKIE_SECURE="0", PYTHONUNBUFFERED="1")
    if args.server == "serve":
        env["WEB_WORKERS"] = str(args.workers)
        command = [sys.executable, "scripts/serve.py"]
    else:
        subprocess.run([sys.executable, "scripts/migrate.py"], cwd=ROOT, env=env, check=True, capture_output=True)
        command = [sys.executable, "app.py"]
    log = open(workdir / "server.log", "w+")  # noqa: SIM115 - kept open for the server's lifetime
    cpus = getattr(args, "platform_cpus", None)
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None  # inherited by the workers it forks
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, preexec_fn=pin)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            raise SystemExit(f"the server stopped:\n{log.read()[-3000:]}")
        try:
            if Client(base).call("GET", "/healthz")[0] == 200:
                return proc, base, db_url
        except OSError:
            time.sleep(0.3)
    proc.terminate()
    raise SystemExit("the server did not come up within 120 s")
