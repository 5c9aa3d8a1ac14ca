#!/bin/sh
# Batched sends over HTTP (peerbench send, 100 per call, 8 callers), two
# delayq builds alternating, each a server of its own on a schema of its
# own of one PostgreSQL of your own; per run the rate, and the CPU per
# message of that PostgreSQL (postmaster and all its processes, reaped
# backends included) and of the delayq server, from /proc. The schemas
# keep what every run sent, so both builds see a table that grows alike.
#   cd bench/peers && go build -o /tmp/pg-h/peerbench ./cmd/peerbench
#   go build -o /tmp/pg-h/delayq-old ./cmd/delayq   (the build before)
#   go build -o /tmp/pg-h/delayq-new ./cmd/delayq
#   PG=postgres://…?sslmode=disable PGDATA=… [BIN=/tmp/pg-h] [R=3] [N=100000] \
#     [PAYLOAD=1024] sh batch-ab.sh
set -e
: "${PG:?a postgres:// URL}" "${PGDATA:?the data directory, for postmaster.pid}"
bin=${BIN:-/tmp/pg-h}; n=${N:-100000}
. "$(dirname "$0")/proccpu.sh"
serve_builds batchab 17600
for r in $(seq "${R:-3}"); do
  for b in $(pair "$r"); do
    eval "pid=\$pid_$b port=\$port_$b"
    c0=$(dbcpu); s0=$(pidcpu "$pid")
    rate=$("$bin/peerbench" send --n "$n" --payload "${PAYLOAD:-1024}" --batch 100 --concurrency 8 --progress off \
      --target "http://127.0.0.1:$port" 2>&1 | grep 'send throughput' | cut -d'|' -f3 | tr -d ' ')
    sleep 1; c1=$(dbcpu); s1=$(pidcpu "$pid")
    echo "$r $b msgs/s=$rate db_cpu_us/msg=$(( (c1 - c0) * 1000000 / tck / n )) delayq_cpu_us/msg=$(( (s1 - s0) * 1000000 / tck / n )) load: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
done
