-- A server's own changes announce themselves in the same round trip.
-- Until version 7 a send, reschedule, retry, promotion, expiry or replay
-- committed, then the server sent its notification in a second round
-- trip. Now the operation stages its notification in the session
-- (set_config, undone if its transaction rolls back, so a change that
-- rolls back announces nothing) and the server pipelines announce() after
-- it, in a transaction of its own but the same round trip. Not pg_notify
-- inside the operation's transaction: PostgreSQL serializes the commits
-- of notifying transactions behind one lock held through their WAL
-- flush; measured with pgbench on the development machine (4 clients, an
-- insert per transaction), 700-760 transactions/s with the notification
-- inside against 2,450-3,130 without, below the 1,000 single sends/s of
-- the paced benchmark. A transaction that only notifies writes no WAL and
-- holds that lock for microseconds. The 60 s horizon of version 5 stays.
-- All functions are new: a server of the previous version keeps calling
-- the unchanged ones and notifying on its own.

-- stage_notify adds "p_topic\tp_due" to the session's staged
-- notifications unless p_due (0: ready now) is 60 s or more after p_now.
CREATE FUNCTION __SCHEMA__.stage_notify(p_topic text, p_due bigint, p_now bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v text := coalesce(current_setting('delayq.staged_notify', true), '');
BEGIN
    IF p_due = 0 OR p_due - p_now < 60000 THEN
        PERFORM set_config('delayq.staged_notify', v || CASE WHEN v = '' THEN '' ELSE E'\n' END || p_topic || E'\t' || p_due, false);
    END IF;
END $$;

-- announce sends the session's staged notifications, one NOTIFY each, and
-- clears them. Run in a transaction of its own after the operation's.
CREATE FUNCTION __SCHEMA__.announce() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v text := coalesce(current_setting('delayq.staged_notify', true), '');
    n integer := 0;
    p text;
BEGIN
    IF v = '' THEN
        RETURN 0;
    END IF;
    PERFORM set_config('delayq.staged_notify', '', false);
    FOR p IN SELECT DISTINCT u FROM unnest(string_to_array(v, E'\n')) u LOOP
        PERFORM pg_notify('__CHANNEL__', p);
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- op_insert_staged is op_insert without its own notification, staging
-- the earliest due time of the messages it inserted instead.
CREATE FUNCTION __SCHEMA__.op_insert_staged(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_priorities smallint[])
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    r __SCHEMA__.rec;
    v_due bigint;
    v_earliest bigint := -1;
    v_at bigint;
BEGIN
    FOR r IN SELECT * FROM __SCHEMA__.op_insert(p_now, p_topic, p_ids, p_payloads, p_headers, p_due, p_relative,
                                                p_delay, p_max_attempts, p_generated, false, p_priorities) LOOP
        IF r.status = 0 THEN
            v_due := CASE WHEN r.state = 2 THEN 0 ELSE r.due_at END;
            IF v_earliest < 0 OR v_due < v_earliest THEN
                v_earliest := v_due;
                v_at := r.created_at;
            END IF;
        END IF;
        RETURN NEXT r;
    END LOOP;
    IF v_earliest >= 0 THEN
        PERFORM __SCHEMA__.stage_notify(p_topic, v_earliest, v_at);
    END IF;
END $$;

-- op_reschedule_staged is op_reschedule, staging the new due time.
CREATE FUNCTION __SCHEMA__.op_reschedule_staged(p_now bigint, p_topic text, p_id text, p_due bigint, p_relative boolean, p_delay bigint)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    r __SCHEMA__.rec;
BEGIN
    FOR r IN SELECT * FROM __SCHEMA__.op_reschedule(p_now, p_topic, p_id, p_due, p_relative, p_delay) LOOP
        IF r.status = 0 THEN
            PERFORM __SCHEMA__.stage_notify(p_topic, CASE WHEN r.state = 2 THEN 0 ELSE r.due_at END, r.updated_at);
        END IF;
        RETURN NEXT r;
    END LOOP;
END $$;

-- op_nack_staged is op_nack, staging the retry (not a death).
CREATE FUNCTION __SCHEMA__.op_nack_staged(p_now bigint, p_topic text, p_id text, p_receipt text, p_retry_delay bigint, p_error bytea)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    r __SCHEMA__.rec;
BEGIN
    FOR r IN SELECT * FROM __SCHEMA__.op_nack(p_now, p_topic, p_id, p_receipt, p_retry_delay, p_error) LOOP
        IF r.status = 0 AND r.state IN (1, 2) THEN
            PERFORM __SCHEMA__.stage_notify(p_topic, CASE WHEN r.state = 2 THEN 0 ELSE r.due_at END, r.updated_at);
        END IF;
        RETURN NEXT r;
    END LOOP;
END $$;

-- op_expire_staged is op_expire, staging each topic that got a message
-- ready again.
CREATE FUNCTION __SCHEMA__.op_expire_staged(p_now bigint, p_max integer)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    r __SCHEMA__.rec;
BEGIN
    FOR r IN SELECT * FROM __SCHEMA__.op_expire(p_now, p_max) LOOP
        IF r.state = 2 THEN
            PERFORM __SCHEMA__.stage_notify(r.topic, 0, 0); -- announce() sends each once
        END IF;
        RETURN NEXT r;
    END LOOP;
END $$;

-- op_dead_replay_staged is op_dead_replay, staging the replayed messages
-- (ready now).
CREATE FUNCTION __SCHEMA__.op_dead_replay_staged(p_now bigint, p_topic text, p_id text, p_max integer)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    r __SCHEMA__.rec;
    v_any boolean := false;
BEGIN
    FOR r IN SELECT * FROM __SCHEMA__.op_dead_replay(p_now, p_topic, p_id, p_max) LOOP
        v_any := v_any OR r.status = 0;
        RETURN NEXT r;
    END LOOP;
    IF v_any THEN
        PERFORM __SCHEMA__.stage_notify(p_topic, 0, 0);
    END IF;
END $$;

-- op_promote_grace_staged is op_promote_grace, staging a wake-up of every
-- server's long-polls when it promoted something: other servers armed
-- the same due time, and whichever promotes first must wake theirs too.
CREATE FUNCTION __SCHEMA__.op_promote_grace_staged(p_now bigint, p_topic text, p_max integer, p_grace bigint,
    OUT promoted integer, OUT next_due bigint, OUT held_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT g.promoted, g.next_due, g.held_due, g.now_ms INTO promoted, next_due, held_due, now_ms
      FROM __SCHEMA__.op_promote_grace(p_now, p_topic, p_max, p_grace) g;
    IF promoted > 0 THEN
        PERFORM __SCHEMA__.stage_notify(p_topic, 0, 0);
    END IF;
END $$;

-- op_lease_due_next is op_lease_due followed by one more row, status 4,
-- that tells the server's timer what the lease left: due_at is the
-- earliest scheduled message due by now that it did not take (held by
-- another transaction, or beyond p_max; 0: none), updated_at the earliest
-- due after now (0: none), created_at the now it judged by. When nothing
-- due is left the timer need not run op_promote_grace after its grace.
CREATE FUNCTION __SCHEMA__.op_lease_due_next(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
SET enable_seqscan = off SET jit = off AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_left bigint;
    v_next bigint;
BEGIN
    RETURN QUERY SELECT * FROM __SCHEMA__.op_lease_due(v_now, p_topic, p_max, p_lease_for, p_token);
    SELECT q.due_at INTO v_left FROM __SCHEMA__.q_scheduled q
     WHERE q.topic = p_topic AND q.due_at <= v_now ORDER BY q.due_at, q.seq LIMIT 1;
    SELECT q.due_at INTO v_next FROM __SCHEMA__.q_scheduled q
     WHERE q.topic = p_topic AND q.due_at > v_now ORDER BY q.due_at, q.seq LIMIT 1;
    RETURN NEXT ROW(4, p_topic, NULL::text, 0::bigint, 0::smallint, coalesce(v_left, 0), v_now, coalesce(v_next, 0),
                    0, 0, 0, NULL::bytea, NULL::text, 0::bigint, 0::bigint, 0::bigint, NULL::bytea, NULL::bytea, 0::smallint)::__SCHEMA__.rec;
END $$;
