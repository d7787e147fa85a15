#!/usr/bin/env bash
# Two `make serve` hosts on one PostgreSQL behind HAProxy, on this machine (scripts/two_hosts.py says how;
# `make two-hosts`). Installs what is missing first: PostgreSQL, pgbouncer and HAProxy (Debian packages),
# as scripts/install_test_deps.sh does; the run itself downloads nothing and binds only to 127.0.0.1.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
command -v pgbouncer >/dev/null 2>&1 || need+=(pgbouncer)
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)
bash scripts/apt_install.sh two_hosts 2 "${need[@]}"
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
# the Python driver stops everything it started on exit, Ctrl-C or SIGTERM; the timeout bounds it in any case
exec timeout --signal=TERM --kill-after=60 "${TWO_HOSTS_TIMEOUT:-3600}" "$PY" scripts/two_hosts.py "${@:-up}"
