#!/bin/sh
# A drain after a pause: one delayq server on a schema of its own, two
# drains (peerbench drain: a due backlog filled in batches, 4 consumers
# with lease(100) + batch ack), and between them a VACUUM ANALYZE of the
# emptied q_ready, as autovacuum makes within a minute of a drain's end: it
# records the table as empty and makes every connection plan its
# statements again. The second drain runs on plans made with those
# statistics. Prints each drain's rate and q_ready's statistics before
# the second. Give it builds to compare, each run in turn on a schema
# of its own.
#   cd bench/peers && go build -o /tmp/pg-h/peerbench ./cmd/peerbench
#   PG=postgres://… [P=/tmp/pg-h/peerbench] [N1=20000] [N2=50000] \
#     sh redrain.sh /path/to/delayq-old /path/to/delayq-new
set -e
: "${PG:?a postgres:// URL}"
port=17560
for bin in "$@"; do
  schema=redrain_$$_$port
  "$bin" serve --postgres "$PG" --postgres-schema "$schema" --addr 127.0.0.1:$port >/dev/null 2>&1 &
  pid=$!
  sleep 2
  stats() {
    psql -X -At "$PG" -c "SELECT 'q_ready: ' || relpages || ' pages, ' || reltuples || ' tuples by its statistics' FROM pg_class WHERE oid = '$schema.q_ready'::regclass"
  }
  drain() {
    "${P:-/tmp/pg-h/peerbench}" drain --n "$1" --consumers 4 --progress off --target "http://127.0.0.1:$port" 2>&1 |
      grep 'drain throughput' | cut -d'|' -f3 | tr -d ' '
  }
  echo "$bin: first drain of ${N1:-20000}: $(drain "${N1:-20000}") msgs/s"
  sleep 5 # past the server's own vacuum, which looks 3 s after its last call
  psql -X -q "$PG" -c "VACUUM ANALYZE $schema.q_ready"
  stats
  echo "$bin: second drain of ${N2:-50000}: $(drain "${N2:-50000}") msgs/s"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  psql -X -q "$PG" -c "SET client_min_messages = warning" -c "DROP SCHEMA $schema CASCADE"
  port=$((port + 1))
done
