#!/bin/bash
# CPU per drained message on a warm embedded server (docs/benchmarks.md,
# "Where a drained message's CPU goes"): starts BIN serve on a fresh data
# directory, drains 50,000 1 KiB messages once to warm it (memtables grown,
# WAL recycled), then three times more, and prints the server's utime+stime
# per message of each of those (send batches of 1,000 and lease(100) + batch
# ack through a plain net/http + encoding/json client) with the drain rate.
# Needs peerbench (cd bench/peers && go build -o /tmp/peerbench ./cmd/peerbench).
# Usage: scripts/bench-warm-drain.sh BIN [PORT] — alternate two builds to
# compare them, the machine's noise is larger than most changes.
set -eu
BIN=${1:?usage: $0 BIN [PORT]}
PORT=${2:-17400}
P=${P:-/tmp/peerbench}
D=$(mktemp -d)
trap 'rm -rf "$D"' EXIT
"$BIN" serve --data "$D/data" --addr "127.0.0.1:$PORT" --log-level warn > "$D/log" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -rf "$D"' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$PID/stat"; }
drain() { "$P" drain --n 50000 --payload 1024 --progress off --target "json+http://127.0.0.1:$PORT" > "$D/run" 2>&1; }
drain
out=""
for _ in 1 2 3; do
  a=$(cpu); drain; b=$(cpu)
  rate=$(grep "drain throughput" "$D/run" | awk -F'|' '{gsub(/ /, "", $3); print $3}')
  out="$out $(( (b - a) * 1000000 / tck / 50000 )) µs/msg ($rate msgs/s);"
done
echo "$(basename "$BIN"):$out"
