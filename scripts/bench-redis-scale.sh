#!/bin/bash
# Redis engine scale-out measurements (docs/benchmarks.md): 1 vs 3 servers on
# one Redis, and one server on a 3-master Redis Cluster. Needs /tmp/delayq
# (go build -o /tmp/delayq ./cmd/delayq), redis-server and redis-cli; uses
# loopback ports 16411, 16421-16423, 17091-17093, 17099 and /tmp/scale.
set -u
rm -rf /tmp/scale/r1 /tmp/scale/c1 /tmp/scale/c2 /tmp/scale/c3  # a rerun must not find old cluster state
mkdir -p /tmp/scale/r1 /tmp/scale/c1 /tmp/scale/c2 /tmp/scale/c3
B=/tmp/delayq
redis-server --port 16411 --bind 127.0.0.1 --save "" --appendonly yes --appendfsync always --dir /tmp/scale/r1 --daemonize yes --logfile /tmp/scale/r1/log
sleep 0.5
pids=()
for i in 1 2 3; do
  $B serve --addr 127.0.0.1:1709$i --redis redis://127.0.0.1:16411/0 --no-dashboard --log-level warn > /tmp/scale/s$i.log 2>&1 &
  pids+=($!)
done
sleep 2
echo "== 1 server"; $B bench drain --target http://127.0.0.1:17091 --n 30000 --progress off 2>&1 | grep "drain throughput"
echo "== 3 servers at once (one bench client each, own topic)"
for i in 1 2 3; do $B bench drain --target http://127.0.0.1:1709$i --n 30000 --progress off > /tmp/scale/d$i.txt 2>&1 & done; wait $(jobs -p | tail -3) 2>/dev/null
sleep 1; grep -h "drain throughput" /tmp/scale/d1.txt /tmp/scale/d2.txt /tmp/scale/d3.txt
for p in "${pids[@]}"; do kill $p; done
redis-cli -p 16411 shutdown nosave >/dev/null 2>&1
echo "== 3-master cluster"
for i in 1 2 3; do
  redis-server --port 1642$i --bind 127.0.0.1 --cluster-enabled yes --cluster-config-file /tmp/scale/c$i/nodes.conf --save "" --appendonly yes --appendfsync always --dir /tmp/scale/c$i --daemonize yes --logfile /tmp/scale/c$i/log
done
sleep 1
redis-cli --cluster create 127.0.0.1:16421 127.0.0.1:16422 127.0.0.1:16423 --cluster-replicas 0 --cluster-yes > /tmp/scale/cluster-create.log 2>&1
for k in $(seq 1 30); do redis-cli -p 16421 cluster info | grep -q "cluster_state:ok" && break; sleep 0.5; done
$B serve --addr 127.0.0.1:17099 --redis redis+cluster://127.0.0.1:16421,127.0.0.1:16422,127.0.0.1:16423 --no-dashboard --log-level warn > /tmp/scale/sc.log 2>&1 &
sp=$!
sleep 2; cat /tmp/scale/sc.log
$B bench drain --target http://127.0.0.1:17099 --n 30000 --progress off 2>&1 | grep "drain throughput"
$B bench lateness --target http://127.0.0.1:17099 --n 20000 --window 10s --consumers 4 --progress off 2>&1 | grep -E "p50|p99 |max|early"
kill $sp
for i in 1 2 3; do redis-cli -p 1642$i shutdown nosave >/dev/null 2>&1; done
echo DONE
