-- delayq schema, version 15: an ack batch is three statements, whatever
-- its size, where it was four statements and a function call a message.
--
-- Why: op_ack_many (versions 10 and 11) took each message with leased()
-- (a PL/pgSQL call and a locking read), then deleted its q_inflight and
-- message rows and upserted its tombstone, one statement each. In a
-- paced run (acks of two or three messages) a call took 0.45 ms of the
-- database's time; in a drain (acks of 100) the statements a message
-- made were most of the ack's cost.
--
-- Now: one statement locks the batch's live messages, each by key, in id
-- order (C collation, as message's key: two batches sharing ids wait for
-- each other in one order and cannot deadlock, as before); a second picks
-- each id's acked item, deletes those messages and their q_inflight rows
-- and upserts their tombstones, and answers every item's status; the
-- batch's counts are added once. The message side of each join is a
-- LATERAL subquery with OFFSET 0 (version 10): a lookup by key however
-- small the tables were when the connection planned it.
--
-- The statuses are version 11's, item by item in the order given: 0 for
-- the first item of an id whose receipt is its message's current lease
-- (inflight, receipt equal); 3 for every other item of a live message (a
-- stale or foreign receipt, a message not inflight, the same id again
-- after it was acked: version 11 found the tombstone it had just written)
-- and for an id with a tombstone; 2 for an id with neither. The
-- tombstone keeps the receipt that acked it (version 11).
--
-- Signature, results and grants are unchanged (CREATE OR REPLACE). A
-- server of version 14 runs on this schema (its acks get the same
-- answers) until it restarts, when it refuses the newer version: upgrade
-- every server.

CREATE OR REPLACE FUNCTION __SCHEMA__.op_ack_many(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
RETURNS SETOF integer LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_status integer[];
    v_acked bigint;
BEGIN
    -- Lock first, in id order: the nested loop takes the sorted ids one
    -- by one and locks each message as its lookup finds it.
    PERFORM 1
       FROM (SELECT DISTINCT u.id COLLATE "C" AS id FROM unnest(p_ids) AS u(id) ORDER BY 1) k
       CROSS JOIN LATERAL (SELECT y.id FROM __SCHEMA__.message y
                            WHERE y.topic = p_topic AND y.id = k.id OFFSET 0) x
        FOR UPDATE OF x;

    -- A new statement, a new snapshot: it sees the latest version of each
    -- message locked above, which nothing else can change now. The rows
    -- it deletes it found by key in live, so it deletes them by their
    -- ctid alone (a TID scan): a join, an id list or even a topic
    -- condition beside the ctid lets a plan made on small tables read
    -- the topic's rows by its name (the trap of version 10).
    WITH it AS (
        SELECT u.id COLLATE "C" AS id, u.rc, u.o
          FROM unnest(p_ids, p_receipts) WITH ORDINALITY AS u(id, rc, o)
         WHERE u.o <= cardinality(p_ids)
    ), live AS MATERIALIZED (
        SELECT x.*,
               (SELECT q.ctid FROM __SCHEMA__.q_inflight q
                 WHERE q.lease_until = x.lease_until AND q.seq = x.seq AND x.state = 3) AS qtid
          FROM (SELECT DISTINCT it.id FROM it) k
         CROSS JOIN LATERAL (SELECT y.ctid AS tid, y.* FROM __SCHEMA__.message y
                              WHERE y.topic = p_topic AND y.id = k.id OFFSET 0) x
    ), won AS MATERIALIZED (
        SELECT DISTINCT ON (it.id) it.id, it.o, l.tid, l.qtid
          FROM it JOIN live l ON l.id = it.id
         WHERE l.state = 3 AND l.receipt = it.rc
         ORDER BY it.id, it.o
    ), gone AS (
        DELETE FROM __SCHEMA__.message x
         WHERE x.ctid = ANY (ARRAY(SELECT w.tid FROM won w))
        RETURNING x.*
    ), unqueued AS (
        DELETE FROM __SCHEMA__.q_inflight q
         WHERE q.ctid = ANY (ARRAY(SELECT w.qtid FROM won w WHERE w.qtid IS NOT NULL))
    ), tombs AS (
        INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority, receipt)
        SELECT p_topic, g.id, g.seq, g.due_at, g.created_at, v_now, v_now, g.deliveries, g.failures, g.max_attempts, g.last_error, g.priority, g.receipt
          FROM gone g
        ON CONFLICT (topic, id) DO UPDATE
           SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
               acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
               max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority,
               receipt = EXCLUDED.receipt
    )
    SELECT array_agg(CASE WHEN w.o = it.o THEN 0
                          WHEN l.id IS NOT NULL THEN 3
                          WHEN EXISTS (SELECT 1 FROM __SCHEMA__.tombstone t WHERE t.topic = p_topic AND t.id = it.id) THEN 3
                          ELSE 2 END ORDER BY it.o),
           count(*) FILTER (WHERE w.o = it.o)
      INTO v_status, v_acked
      FROM it LEFT JOIN live l ON l.id = it.id LEFT JOIN won w ON w.id = it.id;

    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, -v_acked, 0, v_acked);
    RETURN QUERY SELECT s FROM unnest(v_status) WITH ORDINALITY AS a(s, o) ORDER BY a.o;
END $$;
