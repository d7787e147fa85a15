"""The load balancer's and pgbouncer's configuration in deploy/ (used by scripts/two_hosts.sh and compose.yaml)."""
from __future__ import annotations

import configparser
import os
import shutil
import subprocess

import pytest

from tests.test_server_start import ROOT

DEPLOY = ROOT / "deploy"


@pytest.mark.skipif(shutil.which("haproxy") is None,
                    reason="HAProxy is not installed (scripts/two_hosts.sh installs it: apt-get install haproxy)")
@pytest.mark.parametrize("env", [{}, {"LB_BIND": "127.0.0.1:18100", "APP1": "127.0.0.1:18101",
                                      "APP2": "127.0.0.1:18102", "LB_STATS_BIND": "127.0.0.1:18190"}])
def test_haproxy_config_parses(env):
    result = subprocess.run(["haproxy", "-c", "-f", str(DEPLOY / "haproxy.cfg")], env={**os.environ, **env},
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Configuration file is valid" in result.stdout


def test_haproxy_checks_readiness_and_retries_only_keyed_posts():
    text = (DEPLOY / "haproxy.cfg").read_text()
    assert "uri /readyz" in text and "http-check expect status 200" in text
    assert "disable-l7-retry if METH_POST !{ req.hdr(Idempotency-Key) -m found }" in text
    directives = [line.split()[0] for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    assert "balance" in directives and "cookie" not in directives and "stick" not in directives  # no stickiness


def test_pgbouncer_runs_transaction_pooling_as_the_platform_expects():
    ini = configparser.ConfigParser(inline_comment_prefixes=(";",))
    ini.read(DEPLOY / "pgbouncer.ini")
    pgbouncer = ini["pgbouncer"]
    assert pgbouncer["pool_mode"] == "transaction"
    assert pgbouncer["ignore_startup_parameters"] == "options"  # the app's lock_timeout startup option
    assert int(pgbouncer["default_pool_size"]) < 97 <= int(pgbouncer["max_client_conn"])  # under max_connections
    assert "memlab" in ini["databases"]


@pytest.mark.skipif(shutil.which("haproxy") is None,
                    reason="HAProxy is not installed (scripts/two_hosts.sh installs it: apt-get install haproxy)")
def test_with_no_host_up_the_balancer_answers_like_the_platform_does(tmp_path):
    """A 503 in the platform's JSON error shape with Retry-After, which the page and the bots wait and resend after."""
    import json
    import time
    import urllib.error
    import urllib.request

    from tests.test_server_start import free_port

    ports = [free_port() for _ in range(4)]  # the balancer, its statistics, two hosts that are not running
    env = {**os.environ, "LB_BIND": f"127.0.0.1:{ports[0]}", "LB_STATS_BIND": f"127.0.0.1:{ports[1]}",
           "APP1": f"127.0.0.1:{ports[2]}", "APP2": f"127.0.0.1:{ports[3]}"}
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(DEPLOY / "haproxy.cfg")], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        refused = None
        while refused is None:
            try:
                urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{ports[0]}/api/tasks/T1/messages",
                                                              data=b"{}", method="POST"), timeout=5)
            except urllib.error.HTTPError as exc:
                refused = exc
            except OSError:  # not listening yet
                assert time.monotonic() < deadline, "HAProxy did not start"
                time.sleep(0.2)
        assert refused.code == 503
        assert refused.headers["Retry-After"] == "3" and refused.headers["Content-Type"] == "application/json"
        assert json.loads(refused.read())["details"]["retry_after_seconds"] == 3
    finally:
        proc.terminate()
        proc.wait(10)
