-- delayq schema, version 18: a ready message's queue row is looked up by
-- its whole key in either of q_ready's indexes: topic, priority, due_at
-- and seq.
--
-- Why: q_ready has two indexes, its primary key (topic, due_at, seq) and
-- q_ready_lease (topic, priority, due_at, seq). The statements that take
-- one message's row out of q_ready (a lease, a nack, a cancel, a
-- reschedule) named topic, due_at and seq. With statistics that say
-- q_ready is empty — what a vacuum records when it runs just after a
-- drain, which the servers' own vacuum (version 17) does all the time —
-- the planner costs both indexes at one row and may pick q_ready_lease,
-- where only topic bounds the scan: every such lookup then reads the
-- topic's whole ready range. Measured (a ready backlog of 50,000 in one
-- topic, q_ready's statistics from an empty table, leases committed one
-- by one): a lease of 100 took 193 ms instead of 2.0, a lease of one
-- 2.3 ms instead of 0.18, and both grow with the backlog, until the next
-- vacuum or analyze of q_ready gives the planner true figures and the
-- plans are made again.
--
-- Now each lookup also names the priority (the message's: a message's
-- priority never changes, and its q_ready row is written with it), so
-- that both indexes find the one row. dequeue and op_lease_due are
-- otherwise as before; op_lease (not a server's: see below) finds its
-- messages anew. op_insert's lookup (taking back a message
-- whose id an ack tombstoned while the insert waited) keeps the old form:
-- a rare race, and the function is long.
--
-- Signatures, results and grants are unchanged (CREATE OR REPLACE; a
-- function's SET clauses are part of its definition and are given again).
-- A server of version 17 runs on this schema until it restarts, when it
-- refuses the newer version: upgrade every server.

-- dequeue takes a message (as stored, locked by the caller) out of the
-- queue of its state and uncounts it.
CREATE OR REPLACE FUNCTION __SCHEMA__.dequeue(m __SCHEMA__.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    CASE m.state
    WHEN 1 THEN
        DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, -1, 0, 0, 0, 0);
    WHEN 2 THEN
        DELETE FROM __SCHEMA__.q_ready q
         WHERE q.topic = m.topic AND q.priority = m.priority AND q.due_at = m.due_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, -1, 0, 0, 0);
    WHEN 3 THEN
        DELETE FROM __SCHEMA__.q_inflight q WHERE q.lease_until = m.lease_until AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, -1, 0, 0);
    WHEN 4 THEN
        DELETE FROM __SCHEMA__.q_dead q WHERE q.topic = m.topic AND q.dead_at = m.dead_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 0, -1, 0);
    END CASE;
END $$;

-- op_lease takes up to p_max ready messages due by now, in (priority,
-- due_at, seq) order (q_ready_lease), and makes them inflight until now +
-- p_lease_for, with receipt p_token-deliveries (p_token is unique per
-- call). Messages another transaction holds are skipped, so consumers
-- never wait on each other. Servers lease through op_lease_due; this is
-- the ready-only lease of the store's interface. Its join of q_ready to
-- message, planned on tables whose statistics say they are empty, read
-- every message of the topic (270,000 buffers for a lease of 3 beside a
-- ready backlog of 30,000): now it finds its messages as op_lease_due
-- does, each by key (a LATERAL subquery with OFFSET 0), and writes them
-- one by one by key.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_lease(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_bitmapscan = off
SET enable_sort = off SET plan_cache_mode = force_generic_plan SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
    v_prios smallint[];
    v_dues bigint[];
    v_seqs bigint[];
    n integer;
    v_m __SCHEMA__.message;
BEGIN
    SELECT array_agg(l.id ORDER BY l.priority, l.due_at, l.seq), array_agg(l.priority ORDER BY l.priority, l.due_at, l.seq),
           array_agg(l.due_at ORDER BY l.priority, l.due_at, l.seq), array_agg(l.seq ORDER BY l.priority, l.due_at, l.seq)
      INTO v_ids, v_prios, v_dues, v_seqs FROM (
        SELECT m.id, m.priority, m.due_at, m.seq FROM (
            SELECT q.id, q.due_at, q.seq FROM __SCHEMA__.q_ready q
             WHERE q.topic = p_topic AND q.due_at <= v_now
             ORDER BY q.priority, q.due_at, q.seq LIMIT p_max) c
          CROSS JOIN LATERAL (SELECT x.id, x.priority, x.due_at, x.seq FROM __SCHEMA__.message x
                               WHERE x.topic = p_topic AND x.id = c.id
                                 AND x.state = 2 AND x.due_at = c.due_at AND x.seq = c.seq OFFSET 0) m
           FOR UPDATE OF m SKIP LOCKED) l;
    n := coalesce(array_length(v_ids, 1), 0);
    FOR i IN 1..n LOOP
        DELETE FROM __SCHEMA__.q_ready q
         WHERE q.topic = p_topic AND q.priority = v_prios[i] AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
        UPDATE __SCHEMA__.message x
           SET state = 3, deliveries = x.deliveries + 1, lease_until = v_now + p_lease_for,
               receipt = p_token || '-' || (x.deliveries + 1), updated_at = v_now
         WHERE x.topic = p_topic AND x.id = v_ids[i]
        RETURNING * INTO v_m;
        INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id) VALUES (v_m.lease_until, v_m.seq, v_m.topic, v_m.id);
        RETURN NEXT __SCHEMA__.rec_msg(v_m, 0);
    END LOOP;
    IF n > 0 THEN
        PERFORM __SCHEMA__.count_add(p_topic, 0, -n, n, 0, 0);
    END IF;
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
    v_prios smallint[];
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
           array_agg(l.due_at ORDER BY l.priority, l.due_at, l.seq), array_agg(l.seq ORDER BY l.priority, l.due_at, l.seq),
           array_agg(l.priority ORDER BY l.priority, l.due_at, l.seq)
      INTO v_ids, v_states, v_dues, v_seqs, v_prios FROM (
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
                DELETE FROM __SCHEMA__.q_ready q
                 WHERE q.topic = p_topic AND q.priority = v_prios[i] AND q.due_at = v_dues[i] AND q.seq = v_seqs[i];
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
                                            WHERE q.topic = p_topic AND q.priority = u.priority
                                              AND q.due_at = u.due_at AND q.seq = u.seq) END AS rtid
          FROM unnest(v_ids, v_states, v_dues, v_seqs, v_prios) AS u(id, state, due_at, seq, priority)
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
