-- A lease can take a scheduled message that is due without waiting for
-- its promotion. The release of a due message to a waiting consumer was
-- two transactions, each with its WAL flush: op_promote (scheduled ->
-- ready) by the server's timer, then op_lease by the consumer it woke.
-- Now the timer wakes the waiting consumers first and their op_lease_due
-- moves the message from q_scheduled to inflight in one transaction;
-- op_promote_grace promotes only what stayed unleased past a grace, so
-- it never competes with those leases for the same rows. Both are new
-- functions: a server of the previous version keeps calling op_lease and
-- op_promote, which are unchanged.

-- op_lease_due is op_lease over the ready messages due by now and the
-- scheduled messages due by now, taken as if promoted first: up to p_max
-- in (priority, due_at, seq) order among the first p_max of each queue
-- (promotion takes scheduled messages in (due_at, seq) order, so a
-- scheduled message never overtakes one due earlier in the same queue).
-- Candidates are read from a snapshot, then locked (FOR UPDATE SKIP
-- LOCKED) and re-checked on their latest version: a candidate another
-- transaction promoted, leased or changed meanwhile is skipped.
CREATE FUNCTION __SCHEMA__.op_lease_due(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
    v_sched text[];
    n integer;
    n_sched integer;
BEGIN
    WITH c AS (
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
    SELECT array_agg(l.id), array_agg(l.id) FILTER (WHERE l.state = 1) INTO v_ids, v_sched FROM (
        SELECT m.id, m.state FROM c
          JOIN __SCHEMA__.message m ON m.topic = p_topic AND m.id = c.id
         WHERE m.state = c.state AND m.due_at = c.due_at AND m.seq = c.seq
           FOR UPDATE OF m SKIP LOCKED) l;
    n := coalesce(array_length(v_ids, 1), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    n_sched := coalesce(array_length(v_sched, 1), 0);
    IF n_sched < n THEN
        DELETE FROM __SCHEMA__.q_ready q USING __SCHEMA__.message m
         WHERE m.topic = p_topic AND m.id = ANY (v_ids) AND m.state = 2
           AND q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
    END IF;
    IF n_sched > 0 THEN
        DELETE FROM __SCHEMA__.q_scheduled q USING __SCHEMA__.message m
         WHERE m.topic = p_topic AND m.id = ANY (v_sched)
           AND q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
    END IF;
    UPDATE __SCHEMA__.message m
       SET state = 3, deliveries = m.deliveries + 1, lease_until = v_now + p_lease_for,
           receipt = p_token || '-' || (m.deliveries + 1), updated_at = v_now
     WHERE m.topic = p_topic AND m.id = ANY (v_ids);
    INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id)
    SELECT m.lease_until, m.seq, m.topic, m.id FROM __SCHEMA__.message m WHERE m.topic = p_topic AND m.id = ANY (v_ids);
    PERFORM __SCHEMA__.count_add(p_topic, -n_sched, -(n - n_sched), n, 0, 0);
    RETURN QUERY SELECT r.* FROM __SCHEMA__.message m, LATERAL __SCHEMA__.rec_msg(m, 0) r
                  WHERE m.topic = p_topic AND m.id = ANY (v_ids) ORDER BY m.priority, m.due_at, m.seq;
END $$;

-- op_promote_grace is op_promote of the messages due by now - p_grace:
-- those due more recently are left to the consumers the server woke,
-- whose op_lease_due takes them. held_due is the earliest scheduled
-- message due by now (one of those, or one another transaction holds; 0:
-- none), next_due the earliest due after now (0: none), now_ms the now
-- it judged by (not shifted by p_grace). The server arms its timer at
-- the earlier of next_due and held_due + p_grace: a wake-up for the next
-- message, or the promotion of one the consumers left.
CREATE FUNCTION __SCHEMA__.op_promote_grace(p_now bigint, p_topic text, p_max integer, p_grace bigint,
    OUT promoted integer, OUT next_due bigint, OUT held_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql
SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_sort = off SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_cut bigint := v_now - greatest(p_grace, 0);
    v_ids text[];
BEGIN
    now_ms := v_now;
    SELECT array_agg(s.id) INTO v_ids FROM (
        SELECT m.id FROM __SCHEMA__.q_scheduled q
          JOIN __SCHEMA__.message m ON m.topic = q.topic AND m.id = q.id
         WHERE q.topic = p_topic AND q.due_at <= v_cut
           AND m.state = 1 AND m.due_at = q.due_at AND m.seq = q.seq
         ORDER BY q.due_at, q.seq
         LIMIT p_max
           FOR UPDATE OF m SKIP LOCKED) s;
    promoted := coalesce(array_length(v_ids, 1), 0);
    IF promoted > 0 THEN
        WITH moved AS (
            DELETE FROM __SCHEMA__.q_scheduled q USING __SCHEMA__.message m
             WHERE m.topic = p_topic AND m.id = ANY (v_ids)
               AND q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq
            RETURNING q.topic, q.due_at, q.seq, q.id, m.priority)
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) SELECT * FROM moved;
        UPDATE __SCHEMA__.message m SET state = 2, updated_at = v_now WHERE m.topic = p_topic AND m.id = ANY (v_ids);
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
