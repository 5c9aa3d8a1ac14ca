#!/bin/sh
# The database's own time per message of op_lease_due and op_ack_many,
# one session, no server: N messages (1 KiB payloads, due now) sent in
# one call, then leased B at a time and each batch acked at once, a
# commit after each ack, timed with clock_timestamp() around each call.
# Give it schemas of different versions (made by `delayq migrate
# --postgres-schema NAME` of different builds) to compare them; run
# them alternating, a few rounds.
#   PG=postgres://… [N=5000] [B=100] sh ackloop.sh SCHEMA...
set -e
: "${PG:?a postgres:// URL}"
for s in "$@"; do
  psql -X -q "$PG" 2>&1 <<SQL | grep -E 'NOTICE|ERROR'
DO \$\$
DECLARE
  ids text[]; rcs text[]; t0 timestamptz; ack interval := '0'; lease interval := '0';
  n int := 0; i int := 0; nmsg int := ${N:-5000}; b int := ${B:-100};
BEGIN
  PERFORM count(*) FROM "$s".op_insert(NULL, 'ackloop', ARRAY(SELECT 'a' || g || '-' || txid_current() FROM generate_series(1, nmsg) g),
    array_fill(convert_to(repeat('x', 1024), 'UTF8'), ARRAY[nmsg]), array_fill(NULL::bytea, ARRAY[nmsg]), array_fill(0::bigint, ARRAY[nmsg]),
    array_fill(true, ARRAY[nmsg]), array_fill(0::bigint, ARRAY[nmsg]), array_fill(25, ARRAY[nmsg]), array_fill(false, ARRAY[nmsg]), false,
    array_fill(0::smallint, ARRAY[nmsg]));
  COMMIT;
  LOOP
    i := i + 1;
    t0 := clock_timestamp();
    SELECT array_agg(id), array_agg(receipt) INTO ids, rcs FROM "$s".op_lease_due(NULL, 'ackloop', b, 600000, 'tok' || i);
    lease := lease + (clock_timestamp() - t0);
    EXIT WHEN ids IS NULL;
    t0 := clock_timestamp();
    PERFORM count(*) FROM "$s".op_ack_many(NULL, 'ackloop', ids, rcs);
    ack := ack + (clock_timestamp() - t0);
    n := n + cardinality(ids);
    COMMIT;
  END LOOP;
  RAISE NOTICE '% batch %: % msgs, ack % us/msg, lease % us/msg', '$s', b, n,
    round(extract(epoch FROM ack) * 1e6 / n, 1), round(extract(epoch FROM lease) * 1e6 / n, 1);
END \$\$;
SQL
done
