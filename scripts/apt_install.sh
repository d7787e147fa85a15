#!/usr/bin/env bash
# Installs Debian packages for the project's scripts: apt_install.sh NAME NO_ROOT_EXIT PACKAGE...
# Uses sudo -n when not root. Without root or passwordless sudo it prints what it could not install and exits
# NO_ROOT_EXIT: 0 where the callers' tests then say why they skip (install_test_deps.sh), non-zero where the
# caller cannot go on without them (two_hosts.sh). The packages' own services are disabled: the project's
# scripts start their own servers on their own ports.
set -euo pipefail
name=$1 no_root_exit=$2
shift 2
[ $# -gt 0 ] || exit 0
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO="sudo -n"; else
    echo "$name: not root and no sudo; cannot install $*" >&2
    exit "$no_root_exit"
  fi
fi
echo "$name: installing $*"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "$@" >/dev/null
for service in postgresql pgbouncer haproxy; do
  case " $* " in *" $service "*) $SUDO systemctl disable --now "$service" >/dev/null 2>&1 || true ;; esac
done
