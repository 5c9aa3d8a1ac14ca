#!/bin/sh
# pgbench of one send's row writes, 64 clients, one send per transaction,
# variants alternating. Needs a PostgreSQL of your own (not a shared one):
#   delayq migrate --postgres "$URL" --postgres-schema delayq
#   River's migrations in schema river (rivermigrate, or its .up.sql files
#   with "/* TEMPLATE: schema */" replaced by "river.")
#   psql "$URL" -f setup.sql
#   for send.sql's variants sendd (count row inserted) and sendn (no count):
#   two more schemas dqd and dqn made by `delayq migrate` (version 7), with
#   count_add replaced as in variants.sql; for send7 / send8 / send9:
#   schemas dq7, dq8chk and dq9 made by `delayq migrate` of a version 7,
#   8 and 9 build; for send12 / send13: dq12 and dq13, of a version 12
#   and 13 build (loop.sh times the same calls without clients)
#   PGHOST=127.0.0.1 PGPORT=… PGUSER=… PGDATABASE=… PGDATA=… sh run.sh [rounds] [seconds] [variants…]
# Prints one line per run: variant, tps, WAL bytes per transaction, the
# server's CPU per transaction (postmaster and all its processes, exited
# backends included, from /proc; needs PGDATA for postmaster.pid) and
# the load average. Every run starts on empty tables (reset.sql) after a
# checkpoint (RESET=no: on the tables as they are, e.g. filled by
# fill.sql). On a loaded machine tps follows the load; WAL per
# transaction does not, and CPU per transaction much less.
set -e
cd "$(dirname "$0")"
rounds=${1:-3}; secs=${2:-20}; shift 2 2>/dev/null || true
variants=${*:-v3 v2 vd v1 v1i river send}
pm=$(head -1 "$PGDATA/postmaster.pid")
tck=$(getconf CLK_TCK)
cpu() { # clock ticks of the postmaster, its live children and its reaped ones
  { cat "/proc/$pm/stat"; for c in $(cat /proc/"$pm"/task/*/children); do cat "/proc/$c/stat" 2>/dev/null || true; done; } |
    awk -v pm="$pm" '{ sub(/^.*\) /, ""); t += $12 + $13; if (NR == 1) t += $14 + $15 } END { print t }'
}
for r in $(seq "$rounds"); do
  for v in $variants; do
    [ "${RESET:-}" = no ] || psql -q -f reset.sql >/dev/null
    psql -qAtc checkpoint >/dev/null
    w0=$(psql -qAtc "select pg_current_wal_lsn()")
    c0=$(cpu)
    out=$(pgbench -n -M prepared -c 64 -j 4 -T "$secs" -f "$v.sql" 2>&1)
    sleep 1 # the backends exit and are reaped: their CPU moves to the postmaster
    c1=$(cpu)
    w1=$(psql -qAtc "select pg_current_wal_lsn()")
    n=$(echo "$out" | sed -n 's/^number of transactions actually processed: \([0-9]*\).*/\1/p')
    tps=$(echo "$out" | sed -n 's/^tps = \([0-9]*\).*/\1/p')
    wal=$(psql -qAtc "select round(pg_wal_lsn_diff('$w1', '$w0') / $n)")
    us=$(( (c1 - c0) * 1000000 / tck / n ))
    echo "round $r $v tps=$tps wal_B/tx=$wal cpu_us/tx=$us load=$(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
