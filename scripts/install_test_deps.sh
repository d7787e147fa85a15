#!/usr/bin/env bash
# System packages the tests need: Debian's chromium (browser tests) and PostgreSQL (database tests).
# Installs only what is missing; needs root (or passwordless sudo) for apt-get.
set -euo pipefail
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if [ ${#need[@]} -eq 0 ]; then
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "install_test_deps: not root and no sudo; cannot install ${need[*]} (those tests will say why they skip)" >&2
    exit 0
  fi
fi
echo "install_test_deps: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
