"""`make serve`'s connection budget is a formula: WEB_HOSTS x WEB_WORKERS x (DB_POOL_SIZE +
DB_MAX_OVERFLOW + background) + a margin, checked against what PostgreSQL allows (SHOW max_connections
less the superuser reserve) before any worker starts; over it, make serve refuses, saying what to change."""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from config import serving_from_env
from services.hosting.serving import BUDGET_MARGIN, allowed_connections, connection_budget
from tests.test_server_start import ROOT


def test_the_budget_is_hosts_times_workers_times_pools_plus_a_margin():
    default = connection_budget(serving_from_env({}), allowed=97)
    assert default.needed == 1 * 4 * (10 + 5 + 4) + BUDGET_MARGIN
    assert default.problem() is None  # the defaults fit PostgreSQL's default 100 (3 reserved)
    two_hosts = connection_budget(serving_from_env({"WEB_HOSTS": "2"}), allowed=97)
    assert two_hosts.needed == 2 * 4 * 19 + BUDGET_MARGIN
    problem = two_hosts.problem()
    assert problem and "157" in problem and "97" in problem
    assert all(word in problem for word in ("WEB_WORKERS", "DB_POOL_SIZE", "max_connections", "pgbouncer"))


@pytest.mark.postgres
def test_allowed_connections_asks_the_server_unless_a_pooler_is_named(database):
    if not database.url.startswith("postgresql"):
        pytest.skip("SHOW max_connections is PostgreSQL's")
    allowed = allowed_connections(database.engine)
    assert 0 < allowed < 10_000
    assert allowed_connections(database.engine, serving_from_env({"DB_MAX_CONNECTIONS": "400"}).max_connections) == 400


@pytest.mark.postgres
def test_make_serve_refuses_a_budget_the_server_cannot_hold(database):
    if not database.url.startswith("postgresql"):
        pytest.skip("make serve runs on PostgreSQL")
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.update(DATABASE_URL=database.url, SECRET_KEY="budget-test", WEB_HOSTS="3", WEB_WORKERS="4",
               LLM_PROVIDERS="offline", EMBEDDING_PROVIDER="offline", PORT="8149", HOST="127.0.0.1")
    env.pop("DB_MAX_CONNECTIONS", None)
    result = subprocess.run([sys.executable, "scripts/serve.py"], cwd=ROOT, env=env, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "WEB_HOSTS 3 x WEB_WORKERS 4" in result.stderr and "max_connections" in result.stderr
