#!/bin/sh
# Drains (peerbench drain: a due backlog filled in batches, consumed by 4
# consumers with lease(100) + batch ack), two delayq builds alternating,
# each a server of its own on a schema of its own of one PostgreSQL of
# your own. Per run: the drain rate, the CPU per message of that
# PostgreSQL and of the delayq server over the whole run (fill included)
# from /proc, and the database's own time per acked message in
# op_ack_many and per leased message in op_lease_due, from
# pg_stat_user_functions (the script sets track_functions = 'pl').
#   cd bench/peers && go build -o /tmp/pg-h/peerbench ./cmd/peerbench
#   go build -o /tmp/pg-h/delayq-old ./cmd/delayq   (the build before)
#   go build -o /tmp/pg-h/delayq-new ./cmd/delayq
#   PG=postgres://…?sslmode=disable PGDATA=… [BIN=/tmp/pg-h] [R=3] [N=20000] \
#     [PAYLOAD=1024] sh drain-ab.sh
set -e
: "${PG:?a postgres:// URL}" "${PGDATA:?the data directory, for postmaster.pid}"
bin=${BIN:-/tmp/pg-h}; n=${N:-20000}
. "$(dirname "$0")/proccpu.sh"
# fnms prints the total milliseconds spent in schema $1's function $2.
fnms() { psql -X -At "$PG" -c "SELECT coalesce(sum(total_time), 0)::bigint FROM pg_stat_user_functions WHERE schemaname = '$1' AND funcname = '$2'"; }
psql -X -q "$PG" -c "ALTER SYSTEM SET track_functions = 'pl'" -c "SELECT pg_reload_conf()" >/dev/null
serve_builds drainab 17700
for r in $(seq "${R:-3}"); do
  for b in $(pair "$r"); do
    eval "pid=\$pid_$b port=\$port_$b"
    a0=$(fnms "drainab_$b" op_ack_many); l0=$(fnms "drainab_$b" op_lease_due)
    c0=$(dbcpu); s0=$(pidcpu "$pid")
    rate=$("$bin/peerbench" drain --n "$n" --payload "${PAYLOAD:-1024}" --consumers 4 --progress off \
      --target "http://127.0.0.1:$port" 2>&1 | grep 'drain throughput' | cut -d'|' -f3 | tr -d ' ')
    sleep 1; c1=$(dbcpu); s1=$(pidcpu "$pid")
    a1=$(fnms "drainab_$b" op_ack_many); l1=$(fnms "drainab_$b" op_lease_due)
    echo "$r $b msgs/s=$rate db_cpu_us/msg=$(( (c1 - c0) * 1000000 / tck / n )) delayq_cpu_us/msg=$(( (s1 - s0) * 1000000 / tck / n )) ack_db_us/msg=$(( (a1 - a0) * 1000 / n )) lease_db_us/msg=$(( (l1 - l0) * 1000 / n )) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
