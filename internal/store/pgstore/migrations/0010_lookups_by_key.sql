-- delayq schema, version 10: every message row a queue operation takes
-- or checks is found by its full primary key, however small the tables
-- were when a connection planned the statement.
--
-- A lease, a promotion, a lease expiry and a bulk dead-letter call join
-- the rows they read from a queue table (q_scheduled, q_ready,
-- q_inflight, q_dead) to message; an ack batch locked its messages with
-- "id = ANY (ids)"; a send with the caller's ids looked for their
-- tombstones with a join too. A connection plans these statements at its
-- first calls and keeps the plans until the tables are analyzed again.
-- Planned while a topic held a handful of messages (a new schema, before
-- autovacuum first analyzes it; or a backlog that grew since), the
-- cheapest plans read the topic's messages by its name alone and
-- filtered them by id, or drove the join from every tombstone of the
-- topic, and kept doing so as the topic grew. pgstore's
-- TestOperationsReadByKeyWhenPlannedSmall (3,000 messages scheduled,
-- 1,000 inflight, 1,000 acked): a send of a caller's id read 1,349
-- buffers, a lease of 3 messages 878, their ack 378, an expiry of 2
-- leases 251. Under `peerbench paced` on a fresh schema (1,000 sends/s,
-- about 2,000 messages pending) op_lease_due averaged 2.8-4.1 ms a call.
--
-- Now the message side of each such join is a LATERAL subquery with
-- OFFSET 0, which the planner cannot flatten into the join: it is
-- planned on its own with the queue row's topic and id as parameters (an
-- index lookup of one row), and the outer query can only loop over the
-- queue rows. The checks on the message (state, due_at, seq) sit in the
-- subquery, so FOR UPDATE OF the subquery, which PostgreSQL applies
-- inside it, locks only messages that pass them and re-checks them on
-- the latest version of a row another transaction changed, as before.
-- The queue-head scans run without bitmap scans or sorts where an index
-- gives the order (a bitmap scan reads every entry in range, dead ones
-- included, before the LIMIT can stop it). An ack batch takes its
-- messages one by key in id order (the order that keeps two batches
-- sharing ids from deadlocking) and answers in the order given; a send's
-- tombstone check is one statement per caller's id, by key. The same
-- test: 25, 80, 71 and 67 buffers, whatever the backlog (the ack also
-- adds its batch's counts once, below).
--
-- Signatures, results and grants are unchanged (CREATE OR REPLACE).
-- op_lease and op_promote, which servers no longer call (leases and
-- promotions are op_lease_due and op_promote_grace since version 7), are
-- left as they were. A server of version 9 runs on this schema until it
-- restarts, when it refuses the newer version: upgrade every server.

-- op_lease_due as in version 7, each message found by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_lease_due(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
    v_states smallint[];
    v_dues bigint[];
    v_seqs bigint[];
    n integer;
    n_sched integer := 0;
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
    FOR i IN 1..n LOOP
        IF v_states[i] = 1 THEN
            DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
            n_sched := n_sched + 1;
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
    IF n > 0 THEN
        PERFORM __SCHEMA__.count_add(p_topic, -n_sched, -(n - n_sched), n, 0, 0);
    END IF;
END $$;

-- op_promote_grace as in version 7, each message found by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_promote_grace(p_now bigint, p_topic text, p_max integer, p_grace bigint,
    OUT promoted integer, OUT next_due bigint, OUT held_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $$
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
    FOR i IN 1..promoted LOOP
        DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) VALUES (p_topic, v_dues[i], v_seqs[i], v_ids[i], v_prios[i]);
        UPDATE __SCHEMA__.message x SET state = 2, updated_at = v_now WHERE x.topic = p_topic AND x.id = v_ids[i];
    END LOOP;
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

-- op_ack_many acks each (p_ids[i], p_receipts[i]) and answers their
-- statuses in that order (as ack: 0 acked, 2 missing, 3 not leased with
-- that receipt). The messages are taken in id order (C collation, as
-- message's key): two batches sharing ids wait for each other in one
-- order and cannot deadlock. What ack and dequeue did per message, here
-- inline, with the batch's counts added once (they added to a counter
-- row twice per message: four statements a message).
CREATE OR REPLACE FUNCTION __SCHEMA__.op_ack_many(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
RETURNS SETOF integer LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    n integer := coalesce(array_length(p_ids, 1), 0);
    v_status integer[] := array_fill(NULL::integer, ARRAY[n]);
    v_acked bigint := 0;
    k record;
    l record;
BEGIN
    FOR k IN SELECT u.id, u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id COLLATE "C", u.o LOOP
        l := __SCHEMA__.leased(p_topic, k.id, p_receipts[k.o]);
        IF (l.r).status IS NOT NULL THEN
            v_status[k.o] := (l.r).status;
            CONTINUE;
        END IF;
        DELETE FROM __SCHEMA__.q_inflight q WHERE q.lease_until = (l.m).lease_until AND q.seq = (l.m).seq;
        DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = k.id;
        INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority)
        VALUES (p_topic, k.id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error, (l.m).priority)
        ON CONFLICT (topic, id) DO UPDATE
           SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
               acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
               max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority;
        v_status[k.o] := 0;
        v_acked := v_acked + 1;
    END LOOP;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, -v_acked, 0, v_acked);
    FOR i IN 1..n LOOP
        RETURN NEXT v_status[i];
    END LOOP;
END $$;

-- op_expire as in versions 1 and 4, each message found by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_expire(p_now bigint, p_max integer) RETURNS SETOF __SCHEMA__.rec
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    m __SCHEMA__.message;
BEGIN
    FOR m IN
        SELECT x.* FROM __SCHEMA__.q_inflight q
          CROSS JOIN LATERAL (SELECT y.* FROM __SCHEMA__.message y
                               WHERE y.topic = q.topic AND y.id = q.id
                                 AND y.state = 3 AND y.lease_until = q.lease_until AND y.seq = q.seq OFFSET 0) x
         WHERE q.lease_until <= v_now
         ORDER BY q.lease_until, q.seq
         LIMIT p_max
           FOR UPDATE OF x SKIP LOCKED
    LOOP
        RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.fail(m, v_now, v_now, convert_to('lease expired', 'UTF8')), 0);
    END LOOP;
END $$;

-- op_dead_replay as in version 3, each message found by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_dead_replay(p_now bigint, p_topic text, p_id text, p_max integer)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    m __SCHEMA__.message;
BEGIN
    IF p_id IS NOT NULL THEN
        SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
        IF NOT FOUND OR m.state <> 4 THEN
            RETURN NEXT ROW(2, p_topic, p_id, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL, 0)::__SCHEMA__.rec;
            RETURN;
        END IF;
        RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.replay(m, v_now), 0);
        RETURN;
    END IF;
    FOR m IN
        SELECT x.* FROM __SCHEMA__.q_dead q
          CROSS JOIN LATERAL (SELECT y.* FROM __SCHEMA__.message y
                               WHERE y.topic = q.topic AND y.id = q.id
                                 AND y.state = 4 AND y.dead_at = q.dead_at AND y.seq = q.seq OFFSET 0) x
         WHERE q.topic = p_topic
         ORDER BY q.dead_at, q.seq
         LIMIT p_max
           FOR UPDATE OF x SKIP LOCKED
    LOOP
        RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.replay(m, v_now), 0);
    END LOOP;
END $$;

-- op_dead_delete as in version 1, each message found by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_dead_delete(p_topic text, p_id text, p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    m __SCHEMA__.message;
    n integer := 0;
BEGIN
    IF p_id IS NOT NULL THEN
        SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
        IF NOT FOUND OR m.state <> 4 THEN
            RETURN 0;
        END IF;
        PERFORM __SCHEMA__.dequeue(m);
        DELETE FROM __SCHEMA__.message x WHERE x.topic = m.topic AND x.id = m.id;
        RETURN 1;
    END IF;
    FOR m IN
        SELECT x.* FROM __SCHEMA__.q_dead q
          CROSS JOIN LATERAL (SELECT y.* FROM __SCHEMA__.message y
                               WHERE y.topic = q.topic AND y.id = q.id
                                 AND y.state = 4 AND y.dead_at = q.dead_at AND y.seq = q.seq OFFSET 0) x
         WHERE q.topic = p_topic
         ORDER BY q.dead_at, q.seq
         LIMIT p_max
           FOR UPDATE OF x SKIP LOCKED
    LOOP
        PERFORM __SCHEMA__.dequeue(m);
        DELETE FROM __SCHEMA__.message x WHERE x.topic = m.topic AND x.id = m.id;
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- op_insert as in version 8, its tombstone check one statement per id, by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean, p_priorities smallint[])
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
-- The set-based statement's generic plan is estimated at 10 rows of
-- unnest, so a plan made for the actual (short) arrays looks cheaper and
-- PostgreSQL may plan it again on every call, which costs more than
-- running it (0.8 ms to plan, measured): plan once.
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    n integer := coalesce(array_length(p_ids, 1), 0);
    v_seqs bigint[];
    v_pos integer[];
    v_recs __SCHEMA__.rec[];
    v_check text[];
    v_out __SCHEMA__.rec[];
    v_done boolean;
    i integer;
    v_try integer;
    v_due bigint;
    m __SCHEMA__.message;
    t __SCHEMA__.tombstone;
    v_sched bigint := 0;
    v_ready bigint := 0;
    v_earliest bigint := -1;
    v_min_sched bigint;
    v_any_ready boolean;
    v_missing integer;
    j integer;
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    IF n = 1 THEN
        -- One message (every delayq_send): the same as below, in plain
        -- statements, which cost less than the set-based one's plan.
        PERFORM 1 FROM __SCHEMA__.topic x WHERE x.name = p_topic;
        IF NOT FOUND THEN
            INSERT INTO __SCHEMA__.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING;
        END IF;
        v_seqs := ARRAY[nextval('__SCHEMA__.seq')];
        v_due := CASE WHEN p_relative[1] THEN v_now + p_delay[1] ELSE p_due[1] END;
        INSERT INTO __SCHEMA__.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload, priority)
        VALUES (p_topic, p_ids[1], v_seqs[1], CASE WHEN v_due <= v_now THEN 2 ELSE 1 END, v_due, v_now, v_now,
                p_max_attempts[1], nullif(p_headers[1], ''::bytea), nullif(p_payloads[1], ''::bytea), coalesce(p_priorities[1], 0))
        ON CONFLICT DO NOTHING
        RETURNING * INTO m;
        IF FOUND THEN
            IF m.state = 2 THEN
                INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) VALUES (m.topic, m.due_at, m.seq, m.id, m.priority);
                v_ready := 1;
                v_any_ready := true;
            ELSE
                INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
                v_sched := 1;
                v_min_sched := m.due_at;
            END IF;
            v_pos := ARRAY[1];
            v_recs := ARRAY[__SCHEMA__.rec_msg(m, 0)];
            IF NOT coalesce(p_generated[1], false) THEN
                v_check := ARRAY[m.id];
            END IF;
        END IF;
    ELSE
    -- One statement: the topic row, every message that no row holds yet
    -- (in sorted id order: concurrent batches sharing ids wait for each
    -- other in one order and cannot deadlock), and their queue rows. Seq
    -- is taken in batch order first (s), whatever order rows are written
    -- in. A repeated id of the batch conflicts with its first occurrence
    -- and is left to the loop below, which finds it.
    WITH tp AS (
        INSERT INTO __SCHEMA__.topic (name)
        SELECT p_topic WHERE NOT EXISTS (SELECT 1 FROM __SCHEMA__.topic x WHERE x.name = p_topic)
        ON CONFLICT DO NOTHING),
    s AS MATERIALIZED (
        SELECT u.o, u.id, nextval('__SCHEMA__.seq') AS seq,
               CASE WHEN u.rel THEN v_now + u.delay ELSE u.due END AS due,
               u.payload, u.headers, u.attempts, coalesce(u.pri, 0) AS pri
          FROM unnest(p_ids, p_payloads, p_headers, p_due, p_relative, p_delay, p_max_attempts, p_priorities)
               WITH ORDINALITY AS u(id, payload, headers, due, rel, delay, attempts, pri, o)
         WHERE u.o <= n
         ORDER BY u.o),
    ins AS (
        INSERT INTO __SCHEMA__.message AS x (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload, priority)
        SELECT p_topic, s.id, s.seq, CASE WHEN s.due <= v_now THEN 2 ELSE 1 END, s.due, v_now, v_now,
               s.attempts, nullif(s.headers, ''::bytea), nullif(s.payload, ''::bytea), s.pri
          FROM s ORDER BY s.id, s.o
        ON CONFLICT DO NOTHING
        RETURNING x.seq, x.state, x.due_at, x.id, x.priority, __SCHEMA__.rec_msg(x, 0) AS r),
    qr AS (
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority)
        SELECT p_topic, i.due_at, i.seq, i.id, i.priority FROM ins i WHERE i.state = 2),
    qs AS (
        INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id)
        SELECT p_topic, i.due_at, i.seq, i.id FROM ins i WHERE i.state = 1)
    SELECT (SELECT array_agg(s.seq ORDER BY s.o) FROM s),
           array_agg(s.o), array_agg(i.r),
           array_agg(i.id) FILTER (WHERE NOT coalesce(p_generated[s.o], false)),
           count(*) FILTER (WHERE i.state = 1), count(*) FILTER (WHERE i.state = 2),
           min(i.due_at) FILTER (WHERE i.state = 1), bool_or(i.state = 2)
      INTO v_seqs, v_pos, v_recs, v_check, v_sched, v_ready, v_min_sched, v_any_ready
      FROM ins i JOIN s ON s.seq = i.seq;
    END IF;
    v_out := array_fill(NULL::__SCHEMA__.rec, ARRAY[n]);
    v_missing := n - coalesce(array_length(v_pos, 1), 0);
    FOR i IN 1..coalesce(array_length(v_pos, 1), 0) LOOP
        v_out[v_pos[i]] := v_recs[i];
    END LOOP;
    -- The previous message of an id may have been acked (moved to
    -- tombstone) while the insert waited for it: this statement's
    -- snapshot sees that ack's tombstone. Such a message is taken back
    -- and answered by the loop below. A generated id is new for sure.
    IF v_check IS NOT NULL THEN
        FOR j IN 1..coalesce(array_length(v_check, 1), 0) LOOP
            DELETE FROM __SCHEMA__.message x
             WHERE x.topic = p_topic AND x.id = v_check[j]
               AND EXISTS (SELECT 1 FROM __SCHEMA__.tombstone y WHERE y.topic = p_topic AND y.id = v_check[j])
            RETURNING x.* INTO m;
            CONTINUE WHEN NOT FOUND;
            IF m.state = 2 THEN
                DELETE FROM __SCHEMA__.q_ready q WHERE q.topic = p_topic AND q.due_at = m.due_at AND q.seq = m.seq;
                v_ready := v_ready - 1;
            ELSE
                DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic AND q.due_at = m.due_at AND q.seq = m.seq;
                v_sched := v_sched - 1;
            END IF;
            FOR i IN 1..n LOOP
                IF (v_out[i]).seq = m.seq THEN
                    v_out[i] := NULL;
                    v_missing := v_missing + 1;
                END IF;
            END LOOP;
            -- The earliest due time is recomputed below from what stays.
            v_any_ready := NULL;
        END LOOP;
        IF v_any_ready IS NULL THEN
            v_min_sched := NULL;
            FOR i IN 1..n LOOP
                IF (v_out[i]).status IS NOT NULL THEN
                    IF (v_out[i]).state = 2 THEN
                        v_any_ready := true;
                    ELSIF v_min_sched IS NULL OR (v_out[i]).due_at < v_min_sched THEN
                        v_min_sched := (v_out[i]).due_at;
                    END IF;
                END IF;
            END LOOP;
        END IF;
    END IF;
    IF v_any_ready THEN
        v_earliest := 0;
    ELSIF v_min_sched IS NOT NULL THEN
        v_earliest := v_min_sched;
    END IF;
    IF v_missing > 0 THEN
        -- The per-id loop of version 5, for the ids the statement above
        -- did not insert (or took back), in sorted order.
        FOR i IN SELECT u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id, u.o LOOP
            CONTINUE WHEN (v_out[i]).status IS NOT NULL;
            v_done := false;
            v_due := CASE WHEN p_relative[i] THEN v_now + p_delay[i] ELSE p_due[i] END;
            FOR v_try IN 1..10 LOOP
                SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_ids[i];
                IF FOUND THEN
                    v_out[i] := __SCHEMA__.rec_msg(m, 1);
                    v_done := true;
                    EXIT;
                END IF;
                SELECT * INTO t FROM __SCHEMA__.tombstone x WHERE x.topic = p_topic AND x.id = p_ids[i];
                IF FOUND THEN
                    v_out[i] := __SCHEMA__.rec_tomb(t, 1);
                    v_done := true;
                    EXIT;
                END IF;
                -- A concurrent insert of the same id makes this wait for
                -- its transaction, then do nothing: look again.
                INSERT INTO __SCHEMA__.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload, priority)
                VALUES (p_topic, p_ids[i], v_seqs[i], CASE WHEN v_due <= v_now THEN 2 ELSE 1 END, v_due, v_now, v_now,
                        p_max_attempts[i], nullif(p_headers[i], ''::bytea), nullif(p_payloads[i], ''::bytea), coalesce(p_priorities[i], 0))
                ON CONFLICT DO NOTHING
                RETURNING * INTO m;
                IF NOT FOUND THEN
                    CONTINUE;
                END IF;
                PERFORM 1 FROM __SCHEMA__.tombstone x WHERE x.topic = p_topic AND x.id = p_ids[i];
                IF FOUND THEN
                    DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_ids[i];
                    CONTINUE;
                END IF;
                IF m.state = 2 THEN
                    INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) VALUES (m.topic, m.due_at, m.seq, m.id, m.priority);
                    v_ready := v_ready + 1;
                    v_earliest := 0;
                ELSE
                    INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
                    v_sched := v_sched + 1;
                    IF v_earliest < 0 OR m.due_at < v_earliest THEN
                        v_earliest := m.due_at;
                    END IF;
                END IF;
                v_out[i] := __SCHEMA__.rec_msg(m, 0);
                v_done := true;
                EXIT;
            END LOOP;
            IF NOT v_done THEN
                RAISE EXCEPTION 'delayq: insert %/%: the id kept changing under concurrent sends and acks', p_topic, p_ids[i]
                    USING ERRCODE = '40001';
            END IF;
        END LOOP;
    END IF;
    -- Version 8: a count row of the send's own (see the top of this file).
    IF v_sched <> 0 OR v_ready <> 0 THEN
        INSERT INTO __SCHEMA__.topic_count (topic, stripe, scheduled, ready)
        VALUES (p_topic, nextval('__SCHEMA__.stripe'), v_sched, v_ready);
    END IF;
    -- Only a message due within a minute needs a wake-up (version 5).
    IF p_notify AND v_earliest >= 0 AND v_earliest - v_now < 60000 THEN
        PERFORM pg_notify('__CHANNEL__', p_topic || E'\t' || v_earliest);
    END IF;
    FOR i IN 1..n LOOP
        RETURN NEXT v_out[i];
    END LOOP;
END $$;
