# Sourced by the A/B scripts here (ab.sh, batch-ab.sh, drain-ab.sh,
# paced-ab.sh).
# dbcpu prints the CPU ticks of the PostgreSQL whose data directory is
# $PGDATA: the postmaster and all its processes, reaped backends
# included. pidcpu prints process $1's. Divide by $tck for seconds.
pm=$(head -1 "$PGDATA/postmaster.pid"); tck=$(getconf CLK_TCK)
dbcpu() { { cat "/proc/$pm/stat"; for c in $(cat /proc/"$pm"/task/*/children); do cat "/proc/$c/stat" 2>/dev/null || true; done; } |
    awk '{ sub(/^.*\) /, ""); t += $12 + $13; if (NR == 1) t += $14 + $15 } END { print t }'; }
pidcpu() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }

# pair R prints the order of round R's two runs: old first in odd rounds,
# new first in even ones, so that neither build always runs second: in
# eight paced pairs of two builds with the same paced path, the second
# run's p99 was the higher in all eight (by 0.06-2.6 ms), whichever build
# it was.
pair() { if [ $(($1 % 2)) -eq 1 ]; then echo old new; else echo new old; fi; }

# serve_builds PREFIX PORT starts $bin/delayq-old and $bin/delayq-new, each
# on schema PREFIX_old / PREFIX_new of $PG and ports PORT+1, PORT+2, sets
# pid_old, port_old, pid_new, port_new, and stops both when the script
# exits.
serve_builds() {
  pids="" port=$2
  for b in old new; do
    port=$((port + 1))
    "$bin/delayq-$b" serve --postgres "$PG" --postgres-schema "$1_$b" --addr "127.0.0.1:$port" --log-level warn &
    pids="$pids $!"
    eval "pid_$b=$! port_$b=$port"
  done
  trap 'kill $pids 2>/dev/null || true' EXIT
  sleep 3
}
