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
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
      echo "two_hosts: not root and no sudo; install ${need[*]} first" >&2
      exit 2
    fi
  fi
  echo "two_hosts: installing ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  # the packages' own services are not wanted: this script runs its own, on its own ports
  for service in pgbouncer haproxy; do $SUDO systemctl disable --now "$service" >/dev/null 2>&1 || true; done
fi
PY=${PY:-.venv/bin/python}
[ -x "$PY" ] || PY=python3
# the Python driver stops everything it started on exit, Ctrl-C or SIGTERM; the timeout bounds it in any case
exec timeout --signal=TERM --kill-after=60 "${TWO_HOSTS_TIMEOUT:-3600}" "$PY" scripts/two_hosts.py "${@:-up}"
