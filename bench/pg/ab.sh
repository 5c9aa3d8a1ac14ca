#!/bin/sh
# peerbench send, one message per application transaction from 64
# callers, two delayq builds and River alternating, on a PostgreSQL of
# your own; beside peerbench's throughput and call p50/p99, the CPU of
# that PostgreSQL (postmaster and all its processes, reaped backends
# included) per message, which the machine's load moves less.
#   cd bench/peers && go build -o /tmp/pg-h/peerbench ./cmd/peerbench
#   go build -o /tmp/pg-h/delayq-old ./cmd/delayq   (the build before)
#   go build -o /tmp/pg-h/delayq-new ./cmd/delayq
#   PG=postgres://…?sslmode=disable PGDATA=… [BIN=/tmp/pg-h] [R=3] [N=6000] \
#     [ARMS="old new river"] [NICE="nice -n -10"] sh ab.sh
set -e
: "${PG:?a postgres:// URL}" "${PGDATA:?the data directory, for postmaster.pid}"
bin=${BIN:-/tmp/pg-h}; n=${N:-6000}
. "$(dirname "$0")/proccpu.sh"
for r in $(seq "${R:-3}"); do
  for b in ${ARMS:-old new river}; do
    if [ "$b" = river ]; then t="river:$PG:tx"; else t="serve-postgres:$PG:tx"; fi
    c0=$(dbcpu)
    out=$(DELAYQ_BIN="$bin/delayq-$b" ${NICE:-} "$bin/peerbench" send --n "$n" --batch 1 --concurrency 64 --progress off --target "$t" 2>&1)
    sleep 1; c1=$(dbcpu)
    echo "$r $b msgs/s,p50,p99: $(echo "$out" | grep -E 'send throughput|p50|p99' | tr -s ' ' | cut -d'|' -f3 | tr '\n' ' ')" \
      "db_cpu_us/msg=$(( (c1 - c0) * 1000000 / tck / n )) load: $(echo "$out" | grep 'load average' | sed 's/.*: //')"
  done
done
