#!/bin/sh
# Paced runs (peerbench paced: 20,000 single sends at 1,000/s, each due 2
# s ahead, two consumers), two delayq builds alternating, each started by
# peerbench on a fresh schema of one PostgreSQL of your own. Per run: the
# lateness p50 / p99 / max, the benchmark's own sleep overrun p99 (how
# busy the machine was), the delayq server's CPU per message (peerbench's)
# and the PostgreSQL's CPU per message over the run from /proc.
#   cd bench/peers && go build -o /tmp/pg-h/peerbench ./cmd/peerbench
#   go build -o /tmp/pg-h/delayq-old ./cmd/delayq   (the build before)
#   go build -o /tmp/pg-h/delayq-new ./cmd/delayq
#   PG=postgres://…?sslmode=disable PGDATA=… [BIN=/tmp/pg-h] [R=3] sh paced-ab.sh
set -e
: "${PG:?a postgres:// URL}" "${PGDATA:?the data directory, for postmaster.pid}"
bin=${BIN:-/tmp/pg-h}
. "$(dirname "$0")/proccpu.sh"
for r in $(seq "${R:-3}"); do
  for b in $(pair "$r"); do
    c0=$(dbcpu)
    out=$(DELAYQ_BIN="$bin/delayq-$b" "$bin/peerbench" paced --progress off --target "serve-postgres:$PG" 2>&1)
    c1=$(dbcpu)
    cell() { echo "$out" | grep -F "| $1" | head -1 | cut -d'|' -f3 | tr -d ' '; }
    echo "$r $b p50=$(cell 'lateness p50') p99=$(cell 'lateness p99 ') max=$(cell 'lateness max') ms" \
      "sleep_overrun_p99=$(cell 'machine: 1 ms sleep overrun p99') ms delayq_cpu_us/msg=$(cell 'server CPU per message')" \
      "db_cpu_us/msg=$(( (c1 - c0) * 1000000 / tck / 20000 )) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
