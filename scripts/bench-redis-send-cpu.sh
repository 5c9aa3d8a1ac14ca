#!/bin/bash
# CPU per batched send on the Redis engine (docs/redis.md, "Round trips"):
# starts a redis-server of its own without persistence (so fsyncs do not
# bound the rate) and BIN serve on it, sends 20,000 1 KiB messages to warm
# them, then three times 50,000 (batches of $BATCH, default 100, from 8
# callers), and prints the delayq server's and redis-server's utime+stime
# per message with the send rate. Needs redis-server and peerbench
# (cd bench/peers && go build -o /tmp/peerbench ./cmd/peerbench).
# Usage: scripts/bench-redis-send-cpu.sh BIN PORT — alternate two builds.
set -eu
BIN=${1:?usage: $0 BIN PORT}; PORT=${2:?usage: $0 BIN PORT}; RP=$((PORT+1000))
P=${P:-/tmp/peerbench}
D=$(mktemp -d)
redis-server --bind 127.0.0.1 --port $RP --dir $D --save "" --appendonly no --daemonize no > $D/redis.log 2>&1 &
RPID=$!
sleep 0.5
$BIN serve --redis redis://127.0.0.1:$RP/0 --addr 127.0.0.1:$PORT --log-level warn > $D/log 2>&1 &
PID=$!
trap 'kill $PID $RPID 2>/dev/null; wait 2>/dev/null; rm -rf $D' EXIT
for _ in $(seq 50); do curl -sf "http://127.0.0.1:$PORT/readyz" > /dev/null && break; sleep 0.1; done
tck=$(getconf CLK_TCK)
cpu() { awk '{print $14 + $15}' "/proc/$1/stat"; }
"$P" send --progress off --n 20000 --batch ${BATCH:-100} --payload 1024 --concurrency 8 --target "http://127.0.0.1:$PORT" > /dev/null 2>&1
out=""
for _ in 1 2 3; do
  a=$(cpu $PID); ra=$(cpu $RPID)
  "$P" send --progress off --n 50000 --batch ${BATCH:-100} --payload 1024 --concurrency 8 --target "http://127.0.0.1:$PORT" > $D/run 2>&1
  b=$(cpu $PID); rb=$(cpu $RPID)
  rate=$(grep "send throughput" $D/run | awk -F'|' '{gsub(/ /, "", $3); print $3}')
  out="$out delayq $(( (b - a) * 1000000 / tck / 50000 )) + redis $(( (rb - ra) * 1000000 / tck / 50000 )) µs/msg ($rate msgs/s);"
done
echo "$(basename $BIN):$out"
