#!/usr/bin/env bash
# A throwaway PostgreSQL server on 127.0.0.1 for the test suite.
#   scripts/pg_test_server.sh start   -> prints TEST_POSTGRES_URL=... (server running)
#   scripts/pg_test_server.sh stop
# The port is below the kernel's ephemeral range (32768+), where an outgoing connection of an
# earlier test could hold it; if it is taken all the same, the next ports are tried.
set -euo pipefail
DIR=${PG_TEST_DIR:-/tmp/memory-lab-pg}
PORT=${PG_TEST_PORT:-25432}
BIN=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
[ -n "$BIN" ] || { echo "pg_test_server: PostgreSQL is not installed" >&2; exit 1; }
# PostgreSQL refuses to run as root: run it as the 'postgres' system user the package creates.
as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
# A throwaway server: nothing it writes has to survive a crash (no fsync, no full-page images, commits not
# waiting for the log, the least log a server can write), and no JIT compiling of the tests' small queries.
SETTINGS="-c fsync=off -c full_page_writes=off -c synchronous_commit=off -c wal_level=minimal -c max_wal_senders=0 -c jit=off"
case "${1:-start}" in
  start)
    if [ "$(id -u)" -eq 0 ]; then mkdir -p "$DIR"; chown postgres "$DIR"; else mkdir -p "$DIR"; fi
    as_pg "$BIN/pg_ctl" -D "$DIR/data" status >/dev/null 2>&1 && as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null
    rm -rf "$DIR/data"
    as_pg "$BIN/initdb" -D "$DIR/data" -U memlab --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
    for try in 0 1 2 3 4; do
      port=$((PORT + try))
      if as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
          -o "-h 127.0.0.1 -p $port -k $DIR $SETTINGS" start >/dev/null; then
        as_pg "$BIN/createdb" -h 127.0.0.1 -p "$port" -U memlab memlab_test
        echo "TEST_POSTGRES_URL=postgresql+psycopg://memlab@127.0.0.1:$port/memlab_test"
        exit 0
      fi
      echo "pg_test_server: port $port unavailable, trying the next one" >&2
    done
    tail -n 20 "$DIR/server.log" >&2
    exit 1
    ;;
  stop)
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast stop >/dev/null 2>&1 || true
    ;;
esac
