-- delayq schema, version 12: a send's answer leaves out what was just sent.
--
-- op_insert answered every new message with its whole record, payload and
-- headers included, which the server had sent a moment before: a batch of
-- 100 1 KiB messages came back as 100 KiB more to build, send and read.
-- The server answers its own sends without them (it fills them in from
-- the request), so version 12 adds op_insert with a 13th argument,
-- p_echo: false answers a new message's record with NULL headers and
-- payload (rec_sent); a duplicate is answered whole as before (its stored
-- payload may differ from the one sent). With 1 KiB payloads, 100 per
-- call, that took a third to a half of the database's CPU off each sent
-- message (docs/benchmarks.md).
--
-- Compatibility: the 12-argument op_insert of version 10 stays as it is
-- (servers of version 11 keep sending through it until they restart and
-- refuse the newer version: upgrade every server; delayq_send and
-- delayq_send_many call it too). Its body and the one below are the same
-- but for p_echo: a later change to one must be made to both, or make
-- the 12-argument form call this one.

-- rec_sent is rec_msg of a new message (status 0), with its headers and
-- payload only when echo.
CREATE FUNCTION __SCHEMA__.rec_sent(m __SCHEMA__.message, echo boolean) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(0, m.topic, m.id, m.seq, m.state, m.due_at, m.created_at, m.updated_at,
               m.deliveries, m.failures, m.max_attempts, m.last_error, m.receipt,
               m.lease_until, m.dead_at, 0::bigint,
               CASE WHEN echo THEN m.headers END, CASE WHEN echo THEN m.payload END,
               m.priority)::__SCHEMA__.rec
$$;

-- op_insert as in version 10, with p_echo: its three answers of a new
-- message are rec_sent(…, p_echo).
CREATE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean, p_priorities smallint[], p_echo boolean)
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
            v_recs := ARRAY[__SCHEMA__.rec_sent(m, p_echo)];
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
        RETURNING x.seq, x.state, x.due_at, x.id, x.priority, __SCHEMA__.rec_sent(x, p_echo) AS r),
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
                v_out[i] := __SCHEMA__.rec_sent(m, p_echo);
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

