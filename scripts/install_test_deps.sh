#!/usr/bin/env bash
# What the tests need beyond the Python packages: Debian's chromium (browser tests), PostgreSQL (database
# tests), R with lme4, lmerTest and jsonlite (the pre-registration bundle's R script, tests/services/reporting),
# HAProxy (its configuration check), node (the JavaScript unit tests, tests/js), and axe-core from npm (the accessibility scan,
# tests/browser/test_accessibility.py) in the project-local, untracked .cache/axe. Installs only what is missing; needs root (or passwordless sudo) for
# apt-get. Nothing is downloaded when the tests run.
set -euo pipefail
cd "$(dirname "$0")/.."
AXE_VERSION="4.10.2"
if [ ! -f .cache/axe/node_modules/axe-core/axe.min.js ]; then
  if command -v npm >/dev/null 2>&1; then
    echo "install_test_deps: installing axe-core@$AXE_VERSION into .cache/axe"
    npm install --prefix .cache/axe --no-audit --no-fund --no-save "axe-core@$AXE_VERSION" >/dev/null \
      || echo "install_test_deps: npm could not install axe-core (the accessibility scan will say why it skips)" >&2
  else
    echo "install_test_deps: npm is missing; cannot install axe-core (the accessibility scan will say why it skips)" >&2
  fi
fi
need=()
command -v chromium >/dev/null 2>&1 || need+=(chromium)
[ -x /usr/lib/postgresql/15/bin/initdb ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
if ! command -v Rscript >/dev/null 2>&1 || ! Rscript -e 'library(lmerTest); library(jsonlite)' >/dev/null 2>&1; then
  need+=(r-base-core r-cran-lme4 r-cran-lmertest r-cran-jsonlite)
fi
command -v haproxy >/dev/null 2>&1 || need+=(haproxy)  # `haproxy -c` checks deploy/haproxy.cfg (small package)
command -v node >/dev/null 2>&1 || need+=(nodejs)  # node --test runs the pages' JavaScript unit tests (tests/js)
bash scripts/apt_install.sh install_test_deps 0 "${need[@]}"
