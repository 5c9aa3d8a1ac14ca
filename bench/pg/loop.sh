#!/bin/sh
# The database's time per delayq_send call, without commits or clients:
# 20,000 calls in one DO block per schema (generated ids, then ids of the
# caller's), three rounds, the messages truncated before each. Needs
# schemas made by `delayq migrate` (e.g. dq12 and dq13 by a build of each
# version) on a PostgreSQL of your own:
#   PGHOST=127.0.0.1 PGPORT=… PGUSER=… PGDATABASE=… sh loop.sh dq12 dq13
set -e
p='\x7b2230313233343536373839303132333435363738393031323334353637383930313233343536373839303132333435363738393031323334353637383930313233227d'
per_call() { # schema, id expression
  psql -qAt -v ON_ERROR_STOP=1 -c "TRUNCATE $1.message, $1.q_scheduled, $1.q_ready, $1.topic_count" -c '\timing on' \
    -c "DO \$\$ BEGIN FOR i IN 1..20000 LOOP PERFORM * FROM $1.delayq_send('bench', $2, '$p'::bytea, 3600000, NULL, NULL, NULL, 0); END LOOP; END \$\$" |
    sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | awk '{ printf "%.1f", $1 * 1000 / 20000; n++ } END { if (n != 1) exit 1 }'
}
for r in 1 2 3; do
  for s in "$@"; do
    echo "round $r $s: generated id $(per_call "$s" NULL) µs/call, caller's id $(per_call "$s" "'order-' || i") µs/call"
  done
done
