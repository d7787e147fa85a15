"""Two hosts on one machine, the way scripts/two_hosts.sh runs them: PostgreSQL (scripts/pg_test_server.sh),
pgbouncer in transaction mode (deploy/pgbouncer.ini), two `make serve` instances (scripts/serve.py) on
their own ports as two hosts would run them, and HAProxy (deploy/haproxy.cfg) in front, health-checking
``/readyz``. Everything binds to 127.0.0.1; ``stop`` ends every process this started, and only those."""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from scripts.load_bots.ports import Ports, as_postgres, http_status

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"


@dataclass
class Stack:
    workdir: Path
    ports: Ports = field(default_factory=Ports)
    app_env: dict[str, str] = field(default_factory=dict)  # the model and study settings, the same on both hosts
    workers: int = 2
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    events: list[tuple[float, str]] = field(default_factory=list)  # (monotonic, what happened), for the report

    def note(self, what: str) -> None:
        self.events.append((time.monotonic(), what))
        print(f"two-hosts {time.strftime('%H:%M:%S')}: {what}", file=sys.stderr, flush=True)

    @property
    def balancer_url(self) -> str:
        return f"http://127.0.0.1:{self.ports.balancer}"

    @property
    def database_url(self) -> str:  # what the hosts use: pgbouncer
        return f"postgresql+psycopg://memlab@127.0.0.1:{self.ports.pgbouncer}/memlab"  # the alias in pgbouncer.ini

    @property
    def direct_database_url(self) -> str:  # PostgreSQL itself, for counting what is stored
        return f"postgresql+psycopg://memlab@127.0.0.1:{self.ports.postgres}/memlab_test"

    # -- start and stop -------------------------------------------------------------------------------------

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres")
        self._postgres("start")
        self._pgbouncer()
        self.start_app(0)  # the first host applies the migrations; the second then finds the schema current
        self.start_app(1)
        self._haproxy()
        self.wait_balanced()

    def stop(self) -> None:
        for name in [n for n in self.procs if n.startswith("app")]:
            self.stop_app(int(name[3:]) - 1, graceful=True, timeout=40)
        for name in ("haproxy", "pgbouncer"):
            proc = self.procs.pop(name, None)
            if proc is not None and proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        self._postgres("stop")

    def _postgres(self, action: str) -> None:
        env = {**os.environ, "PG_TEST_DIR": str(self.workdir / "pg"), "PG_TEST_PORT": str(self.ports.postgres)}
        out = subprocess.run(["bash", str(ROOT / "scripts/pg_test_server.sh"), action], env=env, check=True,
                             capture_output=True, text=True, timeout=120).stdout
        if action == "start":
            port = int(re.search(r":(\d+)/memlab_test", out).group(1))  # the script may move to a free port
            self.ports.postgres = port
            # pgbouncer cannot pass the lock_timeout the app sends as a startup option: the role carries it
            subprocess.run(as_postgres(["psql", "-q", "-h", "127.0.0.1", "-p", str(port), "-U", "memlab",
                                         "-d", "memlab_test", "-c", "ALTER ROLE memlab SET lock_timeout = '10s'"]),
                           check=True, timeout=30)
            self.note(f"PostgreSQL on 127.0.0.1:{port}")

    def _pgbouncer(self) -> None:
        """deploy/pgbouncer.ini with this run's ports, on 127.0.0.1, trusting local connections."""
        text = (DEPLOY / "pgbouncer.ini").read_text()
        local = {"listen_addr": "127.0.0.1", "listen_port": str(self.ports.pgbouncer), "auth_type": "trust",
                 "auth_file": str(self.workdir / "userlist.txt"), "unix_socket_dir": "",
                 "logfile": str(self.workdir / "pgbouncer.log"), "pidfile": ""}
        for key, value in local.items():
            text, n = re.subn(rf"^{key} = .*$", f"{key} = {value}", text, flags=re.M)
            if not n:
                text = text.replace("[pgbouncer]\n", f"[pgbouncer]\n{key} = {value}\n")
        text = text.replace("port=5432 dbname=memlab", f"port={self.ports.postgres} dbname=memlab_test")
        ini = self.workdir / "pgbouncer.ini"
        ini.write_text(text)
        (self.workdir / "userlist.txt").write_text('"memlab" ""\n')
        self.procs["pgbouncer"] = subprocess.Popen(as_postgres(["pgbouncer", str(ini)]), cwd=self.workdir,
                                                   stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        self._wait_port(self.ports.pgbouncer, "pgbouncer")
        self.note(f"pgbouncer (transaction mode) on 127.0.0.1:{self.ports.pgbouncer}")

    def _haproxy(self) -> None:
        env = {**os.environ, "LB_BIND": f"127.0.0.1:{self.ports.balancer}",
               "LB_STATS_BIND": f"127.0.0.1:{self.ports.stats}",
               "APP1": f"127.0.0.1:{self.ports.apps[0]}", "APP2": f"127.0.0.1:{self.ports.apps[1]}"}
        log = open(self.workdir / "haproxy.log", "a")  # noqa: SIM115 - open as long as HAProxy runs
        self.procs["haproxy"] = subprocess.Popen(["haproxy", "-db", "-f", str(DEPLOY / "haproxy.cfg")], env=env,
                                                 stdout=log, stderr=subprocess.STDOUT)
        self._wait_port(self.ports.balancer, "haproxy")
        self.note(f"HAProxy on {self.balancer_url} (statistics: http://127.0.0.1:{self.ports.stats}/stats)")

    def _wait_port(self, port: int, name: str, bound: float = 30) -> None:
        import socket

        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise SystemExit(f"two-hosts: {name} did not listen on 127.0.0.1:{port} within {bound:g} s "
                         f"(see {self.workdir})")

    # -- the hosts ------------------------------------------------------------------------------------------

    def app_url(self, index: int) -> str:
        return f"http://127.0.0.1:{self.ports.apps[index]}"

    def start_app(self, index: int, wait: bool = True) -> None:
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update({"SECRET_KEY": self.secret, "SESSION_COOKIE_SECURE": "0", "WEB_WORKERS": str(self.workers),
                    "WEB_HOSTS": "2", "DB_MAX_CONNECTIONS": "400", "DB_PREPARED_STATEMENTS": "0",
                    "PROXY_HOPS": "1", "DRAIN_SECONDS": "3", "PYTHONUNBUFFERED": "1"}, **self.app_env)
        env.update(DATABASE_URL=self.database_url, HOST="127.0.0.1", PORT=str(self.ports.apps[index]))
        log = open(self.workdir / f"app{index + 1}.log", "a")  # noqa: SIM115 - kept across restarts
        self.procs[f"app{index + 1}"] = subprocess.Popen(
            [sys.executable, "scripts/serve.py"], cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)  # its own process group: kill -9 takes the workers with it, as a host dies
        if wait:
            self.wait_ready(index)
        self.note(f"host app{index + 1} started on {self.app_url(index)}")

    @property
    def secret(self) -> str:  # one SECRET_KEY for both hosts, as deployment requires
        if not hasattr(self, "_secret"):
            self._secret = secrets.token_hex(32)
        return self._secret

    def wait_ready(self, index: int, bound: float = 180) -> None:
        deadline = time.monotonic() + bound
        proc = self.procs[f"app{index + 1}"]
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise SystemExit(f"two-hosts: app{index + 1} stopped; see {self.workdir}/app{index + 1}.log")
            if http_status(self.app_url(index) + "/readyz") == 200:
                return
            time.sleep(0.3)
        raise SystemExit(f"two-hosts: app{index + 1} was not ready within {bound:g} s")

    def kill_app(self, index: int) -> None:
        """kill -9 the host's whole process group: no drain, no goodbye, as when a machine dies."""
        proc = self.procs.pop(f"app{index + 1}")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.note(f"host app{index + 1} killed (SIGKILL to its process group)")

    def stop_app(self, index: int, graceful: bool = True, timeout: float = 60) -> float:
        """SIGTERM (a drain, then gunicorn's graceful stop); the seconds it took to exit."""
        proc = self.procs.pop(f"app{index + 1}")
        started = time.monotonic()
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM if graceful else signal.SIGKILL)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        self.note(f"host app{index + 1} stopped (SIGTERM) in {time.monotonic() - started:.1f} s")
        return time.monotonic() - started

    def balancer_states(self) -> dict[str, str]:
        """The balancer's view of each host (UP, DOWN, ...), from its statistics page."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.ports.stats}/stats;csv", timeout=2) as response:
                rows = response.read().decode().splitlines()
        except OSError:
            return {}
        header = rows[0].lstrip("# ").split(",")
        states = {}
        for row in rows[1:]:
            values = dict(zip(header, row.split(","), strict=False))
            if values.get("pxname") == "memory_lab" and values.get("svname", "").startswith("app"):
                states[values["svname"]] = values.get("status", "")
        return states

    def wait_balanced(self, bound: float = 30) -> None:
        """Until the balancer sends to both hosts."""
        deadline = time.monotonic() + bound
        while time.monotonic() < deadline:
            states = self.balancer_states()
            if len(states) == 2 and all(s == "UP" for s in states.values()):
                return
            time.sleep(0.5)
        raise SystemExit(f"two-hosts: the balancer does not see both hosts up: {json.dumps(self.balancer_states())}")
