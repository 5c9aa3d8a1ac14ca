-- A lease can take a scheduled message that is due without waiting for
-- its promotion. The release of a due message to a waiting consumer was
-- two transactions, each with its WAL flush: op_promote (scheduled ->
-- ready) by the server's timer, then op_lease by the consumer it woke.
-- Now the timer wakes the waiting consumers first and their op_lease_due
-- moves the message from q_scheduled to inflight in one transaction;
-- op_promote_grace promotes only what stayed unleased past a grace, so
-- it never competes with those leases for the same rows (and, with no
-- grace, is the store's promotion). Both are new functions: a server of
-- the previous version keeps calling op_lease and op_promote, which are
-- unchanged.

-- op_lease_due is op_lease over the ready messages due by now and the
-- scheduled messages due by now, taken as if promoted first: up to p_max
-- in (priority, due_at, seq) order among the first p_max of each queue
-- (promotion takes scheduled messages in (due_at, seq) order, so a
-- scheduled message never overtakes one due earlier in the same queue).
-- Candidates are read from a snapshot, then locked (FOR UPDATE SKIP
-- LOCKED) and re-checked on their latest version: a candidate another
-- transaction promoted, leased or changed meanwhile is skipped.
--
-- The locked messages are then changed one by one, each statement by a
-- full primary key. The set-based form of op_lease and op_promote
-- (m.topic = p_topic AND m.id = ANY (v_ids)) is planned from the table's
-- statistics: without them (a new schema, autovacuum off or behind) the
-- planner expects a topic to hold a handful of messages and reads all of
-- its message index entries, then all of its q_scheduled rows in a
-- nested loop, for each statement. Measured on a 2,000-message topic:
-- 12 ms for the delete of 58 queue rows, against microseconds per row
-- by key.
CREATE FUNCTION __SCHEMA__.op_lease_due(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET jit = off AS $$
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
               JOIN __SCHEMA__.message m ON m.topic = q.topic AND m.id = q.id
              WHERE q.topic = p_topic AND q.due_at <= v_now
              ORDER BY q.due_at, q.seq LIMIT p_max)) u
         ORDER BY u.priority, u.due_at, u.seq LIMIT p_max)
    SELECT array_agg(l.id ORDER BY l.priority, l.due_at, l.seq), array_agg(l.state ORDER BY l.priority, l.due_at, l.seq),
           array_agg(l.due_at ORDER BY l.priority, l.due_at, l.seq), array_agg(l.seq ORDER BY l.priority, l.due_at, l.seq)
      INTO v_ids, v_states, v_dues, v_seqs FROM (
        SELECT m.id, m.state, m.priority, m.due_at, m.seq FROM c
          JOIN __SCHEMA__.message m ON m.topic = p_topic AND m.id = c.id
         WHERE m.state = c.state AND m.due_at = c.due_at AND m.seq = c.seq
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

-- op_promote_grace is op_promote of the messages due by now - p_grace,
-- changed one by one by key as in op_lease_due (the store's promotion
-- calls it with p_grace 0). Those due more recently are left to the
-- consumers the server woke, whose op_lease_due takes them. held_due is
-- the earliest scheduled message due by now (one of those, or one
-- another transaction holds; 0: none), next_due the earliest due after
-- now (0: none), now_ms the now it judged by (not shifted by p_grace).
-- The server arms its timer at the earlier of next_due and held_due +
-- p_grace: a wake-up for the next message, or the promotion of one the
-- consumers left.
CREATE FUNCTION __SCHEMA__.op_promote_grace(p_now bigint, p_topic text, p_max integer, p_grace bigint,
    OUT promoted integer, OUT next_due bigint, OUT held_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_sort = off SET jit = off AS $$
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
          JOIN __SCHEMA__.message m ON m.topic = q.topic AND m.id = q.id
         WHERE q.topic = p_topic AND q.due_at <= v_cut
           AND m.state = 1 AND m.due_at = q.due_at AND m.seq = q.seq
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
