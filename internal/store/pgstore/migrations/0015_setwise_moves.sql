-- delayq schema, version 15: an ack batch of three or more, and a lease
-- or a promotion of six or more, are a few statements whatever their
-- size, where each made three or four statements a message.
--
-- Why: op_ack_many (versions 10 and 11) took each message with leased()
-- (a PL/pgSQL call and a locking read), then deleted its q_inflight and
-- message rows and upserted its tombstone, one statement each;
-- op_lease_due (version 10) deleted each message's queue row, updated
-- the message, inserted its q_inflight row and answered it, one by one.
-- In a drain (leases and acks of 100) these statements were most of the
-- database's time per message.
--
-- Now an ack batch (ack_many_set): one statement locks the batch's live
-- messages, each by key, in id order (C collation, as message's key: two
-- batches sharing ids wait for each other in one order and cannot
-- deadlock, as before); a second reads each item's message, picks each
-- id's acking item, deletes those messages and their q_inflight rows,
-- upserts their tombstones and answers every item's status; the batch's
-- counts are added once. A lease finds and locks its messages as before,
-- then one statement does the writes. Each message a statement reads it
-- reads by key (a LATERAL subquery with OFFSET 0, as in version 10), and
-- the rows it writes it writes by the ctid that read found.
--
-- Smaller batches keep the statement-per-message loops: timed in the
-- database (bench/pg/ackloop.sh), the set-based statements' fixed cost
-- made an ack of one message about 20 µs and a lease of one to three
-- 15-60 µs slower per message, where batches of ten gained a third.
--
-- The statuses are version 11's, item by item in the order given: 0 for
-- the first item of an id whose receipt is its message's current lease
-- (inflight, receipt equal); 3 for every other item of a live message (a
-- stale or foreign receipt, a message not inflight, the same id again
-- after it was acked: version 11 found the tombstone it had just written)
-- and for an id with a tombstone; 2 for an id with neither. The
-- tombstone keeps the receipt that acked it (version 11). A lease
-- answers what version 10 answered, in the same order.
--
-- Signatures, results and grants are unchanged (CREATE OR REPLACE). A
-- server of version 14 runs on this schema (its calls get the same
-- answers) until it restarts, when it refuses the newer version: upgrade
-- every server.

-- ack_many_set is op_ack_many for a batch of three or more.
CREATE FUNCTION __SCHEMA__.ack_many_set(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
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
    -- message locked above, which nothing else can change now. It reads
    -- each item's message by key (per item: the batch's items are few,
    -- and a join of the items to the messages read would be a nested
    -- loop over both, the hash and merge joins being off). The rows it
    -- deletes it found that way, so it deletes them by their
    -- ctid alone (a TID scan): a join, an id list or even a topic
    -- condition beside the ctid lets a plan made on small tables read
    -- the topic's rows by its name (the trap of version 10).
    WITH item AS MATERIALIZED (
        SELECT u.id COLLATE "C" AS id, u.o, x.tid, x.qtid,
               coalesce(x.state = 3 AND x.receipt = u.rc, false) AS leased
          FROM unnest(p_ids, p_receipts) WITH ORDINALITY AS u(id, rc, o)
          LEFT JOIN LATERAL (
                SELECT y.ctid AS tid, y.state, y.receipt,
                       (SELECT q.ctid FROM __SCHEMA__.q_inflight q
                         WHERE q.lease_until = y.lease_until AND q.seq = y.seq AND y.state = 3) AS qtid
                  FROM __SCHEMA__.message y
                 WHERE y.topic = p_topic AND y.id = u.id OFFSET 0) x ON true
         WHERE u.o <= cardinality(p_ids)
    ), judged AS MATERIALIZED (
        -- Of an id's items whose receipt is its lease, the first acks it.
        SELECT i.*, i.leased AND row_number() OVER (PARTITION BY i.id, i.leased ORDER BY i.o) = 1 AS won
          FROM item i
    ), gone AS (
        DELETE FROM __SCHEMA__.message x
         WHERE x.ctid = ANY (ARRAY(SELECT j.tid FROM judged j WHERE j.won))
        RETURNING x.*
    ), unqueued AS (
        DELETE FROM __SCHEMA__.q_inflight q
         WHERE q.ctid = ANY (ARRAY(SELECT j.qtid FROM judged j WHERE j.won AND j.qtid IS NOT NULL))
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
    SELECT array_agg(CASE WHEN j.won THEN 0
                          WHEN j.tid IS NOT NULL THEN 3
                          WHEN EXISTS (SELECT 1 FROM __SCHEMA__.tombstone t WHERE t.topic = p_topic AND t.id = j.id) THEN 3
                          ELSE 2 END ORDER BY j.o),
           count(*) FILTER (WHERE j.won)
      INTO v_status, v_acked
      FROM judged j;

    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, -v_acked, 0, v_acked);
    RETURN QUERY SELECT s FROM unnest(v_status) WITH ORDINALITY AS a(s, o) ORDER BY a.o;
END $$;


-- op_ack_many: one or two items as in version 11, one statement each
-- (cheaper than the set-based statements' fixed cost), more through
-- ack_many_set. No SET clauses here: each costs the call a save and a
-- restore.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_ack_many(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
RETURNS SETOF integer LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint;
    n integer := coalesce(array_length(p_ids, 1), 0);
    v_status integer[];
    v_acked bigint := 0;
    k record;
    l record;
BEGIN
    IF n > 2 THEN
        RETURN QUERY SELECT * FROM __SCHEMA__.ack_many_set(p_now, p_topic, p_ids, p_receipts);
        RETURN;
    END IF;
    v_now := coalesce(p_now, __SCHEMA__.now_ms());
    v_status := array_fill(NULL::integer, ARRAY[n]);
    FOR k IN SELECT u.id, u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id COLLATE "C", u.o LOOP
        l := __SCHEMA__.leased(p_topic, k.id, p_receipts[k.o]);
        IF (l.r).status IS NOT NULL THEN
            v_status[k.o] := (l.r).status;
            CONTINUE;
        END IF;
        DELETE FROM __SCHEMA__.q_inflight q WHERE q.lease_until = (l.m).lease_until AND q.seq = (l.m).seq;
        DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = k.id;
        INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority, receipt)
        VALUES (p_topic, k.id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error, (l.m).priority, (l.m).receipt)
        ON CONFLICT (topic, id) DO UPDATE
           SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
               acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
               max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority,
               receipt = EXCLUDED.receipt;
        v_status[k.o] := 0;
        v_acked := v_acked + 1;
    END LOOP;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, -v_acked, 0, v_acked);
    FOR i IN 1..n LOOP
        RETURN NEXT v_status[i];
    END LOOP;
END $$;
-- op_lease_due as in version 10 (which messages, the locks, the order of
-- the answer), with the writes of six or more messages set-based: one
-- statement takes their queue rows, marks them leased and queues them in
-- q_inflight. As in ack_many_set the rows written are read by key first
-- and written by ctid.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_lease_due(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
    v_states smallint[];
    v_dues bigint[];
    v_seqs bigint[];
    n integer;
    n_sched integer;
    v_m __SCHEMA__.message;
BEGIN
    WITH c AS MATERIALIZED (
        SELECT * FROM (
            (SELECT q.id, 2::smallint AS state, q.priority, q.due_at, q.seq FROM __SCHEMA__.q_ready q
              WHERE q.topic = p_topic AND q.due_at <= v_now
              ORDER BY q.priority, q.due_at, q.seq LIMIT p_max)
            UNION ALL
            (SELECT q.id, 1::smallint, m.priority, q.due_at, q.seq FROM __SCHEMA__.q_scheduled q
               CROSS JOIN LATERAL (SELECT x.priority FROM __SCHEMA__.message x
                                    WHERE x.topic = q.topic AND x.id = q.id OFFSET 0) m
              WHERE q.topic = p_topic AND q.due_at <= v_now
              ORDER BY q.due_at, q.seq LIMIT p_max)) u
         ORDER BY u.priority, u.due_at, u.seq LIMIT p_max)
    SELECT array_agg(l.id ORDER BY l.priority, l.due_at, l.seq), array_agg(l.state ORDER BY l.priority, l.due_at, l.seq),
           array_agg(l.due_at ORDER BY l.priority, l.due_at, l.seq), array_agg(l.seq ORDER BY l.priority, l.due_at, l.seq)
      INTO v_ids, v_states, v_dues, v_seqs FROM (
        SELECT m.id, m.state, m.priority, m.due_at, m.seq FROM c
          CROSS JOIN LATERAL (SELECT x.id, x.state, x.priority, x.due_at, x.seq FROM __SCHEMA__.message x
                               WHERE x.topic = p_topic AND x.id = c.id
                                 AND x.state = c.state AND x.due_at = c.due_at AND x.seq = c.seq OFFSET 0) m
           FOR UPDATE OF m SKIP LOCKED) l;
    n := coalesce(array_length(v_ids, 1), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    n_sched := cardinality(array_positions(v_states, 1::smallint));
    IF n <= 5 THEN
        -- Few: a statement each, as version 10 (cheaper than the
        -- set-based statement's fixed cost).
        FOR i IN 1..n LOOP
            IF v_states[i] = 1 THEN
                DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
            ELSE
                DELETE FROM __SCHEMA__.q_ready q WHERE q.topic = p_topic AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
            END IF;
            UPDATE __SCHEMA__.message x
               SET state = 3, deliveries = x.deliveries + 1, lease_until = v_now + p_lease_for,
                   receipt = p_token || '-' || (x.deliveries + 1), updated_at = v_now
             WHERE x.topic = p_topic AND x.id = v_ids[i]
            RETURNING * INTO v_m;
            INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id) VALUES (v_m.lease_until, v_m.seq, v_m.topic, v_m.id);
            RETURN NEXT __SCHEMA__.rec_msg(v_m, 0);
        END LOOP;
        PERFORM __SCHEMA__.count_add(p_topic, -n_sched, -(n - n_sched), n, 0, 0);
        RETURN;
    END IF;

    -- A new snapshot: the locked messages as they are now (unchanged
    -- since the lock: the state, due_at and seq it checked still hold).
    RETURN QUERY
    WITH k AS MATERIALIZED (
        SELECT x.tid,
               CASE WHEN u.state = 1 THEN (SELECT q.ctid FROM __SCHEMA__.q_scheduled q
                                            WHERE q.topic = p_topic AND q.due_at = u.due_at AND q.seq = u.seq) END AS stid,
               CASE WHEN u.state = 2 THEN (SELECT q.ctid FROM __SCHEMA__.q_ready q
                                            WHERE q.topic = p_topic AND q.due_at = u.due_at AND q.seq = u.seq) END AS rtid
          FROM unnest(v_ids, v_states, v_dues, v_seqs) AS u(id, state, due_at, seq)
         CROSS JOIN LATERAL (SELECT y.ctid AS tid FROM __SCHEMA__.message y
                              WHERE y.topic = p_topic AND y.id = u.id OFFSET 0) x
    ), unscheduled AS (
        DELETE FROM __SCHEMA__.q_scheduled q WHERE q.ctid = ANY (ARRAY(SELECT k.stid FROM k WHERE k.stid IS NOT NULL))
    ), unready AS (
        DELETE FROM __SCHEMA__.q_ready q WHERE q.ctid = ANY (ARRAY(SELECT k.rtid FROM k WHERE k.rtid IS NOT NULL))
    ), leased AS (
        UPDATE __SCHEMA__.message x
           SET state = 3, deliveries = x.deliveries + 1, lease_until = v_now + p_lease_for,
               receipt = p_token || '-' || (x.deliveries + 1), updated_at = v_now
         WHERE x.ctid = ANY (ARRAY(SELECT k.tid FROM k))
        RETURNING x AS m
    ), inflight AS (
        INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id)
        SELECT (l.m).lease_until, (l.m).seq, (l.m).topic, (l.m).id FROM leased l
    )
    SELECT r.* FROM leased l CROSS JOIN LATERAL __SCHEMA__.rec_msg(l.m, 0) r
     ORDER BY (l.m).priority, (l.m).due_at, (l.m).seq;

    PERFORM __SCHEMA__.count_add(p_topic, -n_sched, -(n - n_sched), n, 0, 0);
END $$;

-- op_promote_grace as in version 10, with the writes of six or more
-- messages set-based as in op_lease_due: one statement deletes their
-- q_scheduled rows, inserts their q_ready rows and marks them ready
-- (the timer promotes up to 1,000 at a time: a burst that came due while
-- no consumer waited).
CREATE OR REPLACE FUNCTION __SCHEMA__.op_promote_grace(p_now bigint, p_topic text, p_max integer, p_grace bigint,
    OUT promoted integer, OUT next_due bigint, OUT held_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_cut bigint := v_now - greatest(p_grace, 0);
    v_ids text[];
    v_dues bigint[];
    v_seqs bigint[];
    v_prios smallint[];
BEGIN
    now_ms := v_now;
    -- Lock first, then change; the checks on m are re-evaluated on the
    -- latest version of a row another transaction changed meanwhile.
    SELECT array_agg(s.id ORDER BY s.due_at, s.seq), array_agg(s.due_at ORDER BY s.due_at, s.seq),
           array_agg(s.seq ORDER BY s.due_at, s.seq), array_agg(s.priority ORDER BY s.due_at, s.seq)
      INTO v_ids, v_dues, v_seqs, v_prios FROM (
        SELECT m.id, m.due_at, m.seq, m.priority FROM __SCHEMA__.q_scheduled q
          CROSS JOIN LATERAL (SELECT x.id, x.due_at, x.seq, x.priority FROM __SCHEMA__.message x
                               WHERE x.topic = q.topic AND x.id = q.id
                                 AND x.state = 1 AND x.due_at = q.due_at AND x.seq = q.seq OFFSET 0) m
         WHERE q.topic = p_topic AND q.due_at <= v_cut
         ORDER BY q.due_at, q.seq
         LIMIT p_max
           FOR UPDATE OF m SKIP LOCKED) s;
    promoted := coalesce(array_length(v_ids, 1), 0);
    IF promoted <= 5 THEN
        FOR i IN 1..promoted LOOP
            DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
            INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) VALUES (p_topic, v_dues[i], v_seqs[i], v_ids[i], v_prios[i]);
            UPDATE __SCHEMA__.message x SET state = 2, updated_at = v_now WHERE x.topic = p_topic AND x.id = v_ids[i];
        END LOOP;
    ELSE
        -- A new snapshot: the locked messages and their q_scheduled rows
        -- as they are now, which nothing else can change.
        WITH k AS MATERIALIZED (
            SELECT x.tid, (SELECT q.ctid FROM __SCHEMA__.q_scheduled q
                            WHERE q.topic = p_topic AND q.due_at = u.due_at AND q.seq = u.seq) AS stid
              FROM unnest(v_ids, v_dues, v_seqs) AS u(id, due_at, seq)
             CROSS JOIN LATERAL (SELECT y.ctid AS tid FROM __SCHEMA__.message y
                                  WHERE y.topic = p_topic AND y.id = u.id OFFSET 0) x
        ), unscheduled AS (
            DELETE FROM __SCHEMA__.q_scheduled q WHERE q.ctid = ANY (ARRAY(SELECT k.stid FROM k WHERE k.stid IS NOT NULL))
        ), readied AS (
            INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority)
            SELECT p_topic, u.due_at, u.seq, u.id, u.priority FROM unnest(v_ids, v_dues, v_seqs, v_prios) AS u(id, due_at, seq, priority)
        )
        UPDATE __SCHEMA__.message x SET state = 2, updated_at = v_now WHERE x.ctid = ANY (ARRAY(SELECT k.tid FROM k));
    END IF;
    IF promoted > 0 THEN
        PERFORM __SCHEMA__.count_add(p_topic, -promoted, promoted, 0, 0, 0);
    END IF;
    SELECT q.due_at INTO next_due FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic ORDER BY q.due_at, q.seq LIMIT 1;
    held_due := 0;
    IF next_due <= v_now THEN
        held_due := next_due;
        next_due := NULL;
        SELECT q.due_at INTO next_due FROM __SCHEMA__.q_scheduled q
         WHERE q.topic = p_topic AND q.due_at > v_now ORDER BY q.due_at, q.seq LIMIT 1;
    END IF;
    next_due := coalesce(next_due, 0);
END $$;
