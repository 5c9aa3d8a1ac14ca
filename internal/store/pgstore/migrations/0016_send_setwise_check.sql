-- delayq schema, version 16: a batched send with the caller's ids checks
-- their tombstones in one statement, where it made one statement an id;
-- delayq_send_many no longer has op_insert answer it with the payloads
-- it sent.
--
-- Why: after its set-based insert, op_insert looks for a tombstone of each
-- id it inserted (an ack of the id's previous message may have committed
-- while the insert waited for it; such a message is taken back and
-- answered as a duplicate of the tombstone). Version 10 made that one
-- DELETE per id, by key. And delayq_send_many called the 12-argument
-- op_insert, whose answers carry each new message's payload, which
-- op_insert's PL/pgSQL copies from array to array.
--
-- Now one statement looks up each inserted id's tombstone by key and, for
-- the few that have one, its message (LATERAL subqueries with OFFSET 0, as
-- version 10 made every such lookup), and deletes the messages to take
-- back by the ctid it found; what follows for each is unchanged. The
-- function runs without sequential scans: planned on a small table, that
-- delete by ctid was a sequential scan of message. delayq_send_many calls
-- the 13-argument op_insert with p_echo false.
--
-- The 12-argument op_insert (servers of version 11, and delayq_send when
-- its own insert races) is left as it was: the same answers, the check one
-- statement an id. Signatures, results and grants are unchanged (CREATE
-- OR REPLACE). A server of version 15 runs on this schema until it
-- restarts, when it refuses the newer version: upgrade every server.

-- op_insert as in version 12, the tombstone check in one statement.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean, p_priorities smallint[], p_echo boolean)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql
-- The set-based statement's generic plan is estimated at 10 rows of
-- unnest, so a plan made for the actual (short) arrays looks cheaper and
-- PostgreSQL may plan it again on every call, which costs more than
-- running it (0.8 ms to plan, measured): plan once. Without sequential
-- scans: planned on a small table, the tombstone check's delete by ctid
-- read the whole table (163 buffers where 25 do, and growing).
SET plan_cache_mode = force_generic_plan SET enable_seqscan = off AS $$
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
    -- One statement for all the ids (version 15 made one each): each
    -- id's tombstone looked up by key, then, for the few that have one,
    -- the message inserted above; the rows to take back deleted by the
    -- ctid found (rows this transaction inserted, which no other can
    -- change). Both lookups are LATERAL subqueries with OFFSET 0: an
    -- EXISTS here may be planned as a join reading the topic's
    -- tombstones (the trap of version 10).
    IF v_check IS NOT NULL THEN
        FOR m IN
            DELETE FROM __SCHEMA__.message x
             WHERE x.ctid = ANY (ARRAY(
                   SELECT y.tid FROM unnest(v_check) AS c(id)
                    CROSS JOIN LATERAL (SELECT 1 FROM __SCHEMA__.tombstone tb
                                         WHERE tb.topic = p_topic AND tb.id = c.id OFFSET 0) tb
                    CROSS JOIN LATERAL (SELECT z.ctid AS tid FROM __SCHEMA__.message z
                                         WHERE z.topic = p_topic AND z.id = c.id OFFSET 0) y))
            RETURNING x.*
        LOOP
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

-- delayq_send_many as in version 13, through the 13-argument op_insert
-- without the echo: it answers ids, duplicates and due times, and the
-- records op_insert built and passed back with every payload cost it
-- more the bigger the payloads.
CREATE OR REPLACE FUNCTION __SCHEMA__.delayq_send_many(
    topic        text,
    ids          text[],
    payloads     bytea[],
    delays_ms    bigint[] DEFAULT NULL,
    headers      jsonb[] DEFAULT NULL,
    max_attempts integer[] DEFAULT NULL,
    deliver_at   timestamptz[] DEFAULT NULL,
    priorities   integer[] DEFAULT NULL)
RETURNS TABLE (message_id text, duplicate boolean, due_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c_max_delay constant bigint := 315360000000; -- 10 years, delayq's default --max-delay
    v_now bigint := __SCHEMA__.now_ms();
    n integer := coalesce(array_length(payloads, 1), 0);
    v_ids text[];
    v_payloads bytea[];
    v_headers bytea[];
    v_dues bigint[];
    v_relative boolean[];
    v_delays bigint[];
    v_attempts integer[];
    v_generated boolean[];
    v_priorities smallint[];
    v_default_attempts integer;
    v_settings bytea;
    v_id text;
    v_delay bigint;
    v_due bigint;
    v_pri integer;
    v_att integer;
    v_h jsonb;
    v_enc bytea;
    v_n integer;
    v_size bigint;
    v_ok boolean;
    i integer;
    r __SCHEMA__.rec;
BEGIN
    IF delayq_send_many.topic IS NULL OR length(delayq_send_many.topic) > 200 OR delayq_send_many.topic !~ '^[A-Za-z0-9._:-]+$' THEN
        RAISE EXCEPTION 'delayq_send_many: topic %: want 1-200 chars of A-Z a-z 0-9 . _ : -', quote_nullable(delayq_send_many.topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF (ids IS NOT NULL AND coalesce(array_length(ids, 1), 0) <> n)
       OR (delays_ms IS NOT NULL AND coalesce(array_length(delays_ms, 1), 0) <> n)
       OR (headers IS NOT NULL AND coalesce(array_length(headers, 1), 0) <> n)
       OR (max_attempts IS NOT NULL AND coalesce(array_length(max_attempts, 1), 0) <> n)
       OR (deliver_at IS NOT NULL AND coalesce(array_length(deliver_at, 1), 0) <> n)
       OR (priorities IS NOT NULL AND coalesce(array_length(priorities, 1), 0) <> n)
       OR array_ndims(payloads) > 1 THEN
        RAISE EXCEPTION 'delayq_send_many: want one-dimensional arrays as long as payloads (%), or NULL', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF n = 0 THEN
        RETURN;
    END IF;
    IF n > 10000 THEN
        RAISE EXCEPTION 'delayq_send_many: % messages, the limit is 10000 per call', n
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOR i IN 1..n LOOP
        v_id := ids[i];
        v_generated[i] := v_id IS NULL;
        IF v_id IS NULL THEN
            v_id := __SCHEMA__.uuid7(v_now);
        ELSIF length(v_id) > 200 OR v_id !~ '^[A-Za-z0-9._:@+=-]+$' THEN
            RAISE EXCEPTION 'delayq_send_many: message %: id %: want 1-200 chars of A-Z a-z 0-9 . _ : @ + = -', i, quote_literal(v_id)
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_ids[i] := v_id;
        v_payloads[i] := coalesce(payloads[i], ''::bytea);
        IF octet_length(v_payloads[i]) > 1048576 THEN
            RAISE EXCEPTION 'delayq_send_many: message %: payload is % bytes, the limit is 1048576', i, octet_length(v_payloads[i])
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_pri := coalesce(priorities[i], 0);
        IF v_pri < 0 OR v_pri > 255 THEN
            RAISE EXCEPTION 'delayq_send_many: message %: priority %: want 0 to 255', i, v_pri
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_priorities[i] := v_pri;
        v_delay := coalesce(delays_ms[i], 0);
        v_due := 0;
        v_relative[i] := true;
        IF deliver_at[i] IS NOT NULL THEN
            IF v_delay <> 0 THEN
                RAISE EXCEPTION 'delayq_send_many: message %: give either delay_ms or deliver_at, not both', i
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- Rounded up: sub-millisecond precision never makes it early.
            v_due := ceil(extract(epoch FROM deliver_at[i]) * 1000)::bigint;
            v_relative[i] := false;
            IF v_due < 0 THEN
                RAISE EXCEPTION 'delayq_send_many: message %: deliver_at % is before 1970', i, deliver_at[i]
                    USING ERRCODE = 'invalid_parameter_value';
            ELSIF v_due - v_now > c_max_delay THEN
                RAISE EXCEPTION 'delayq_send_many: message %: deliver_at % is beyond the maximum delay of 10 years', i, deliver_at[i]
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
        ELSIF v_delay < 0 OR v_delay > c_max_delay THEN
            RAISE EXCEPTION 'delayq_send_many: message %: delay_ms %: want 0 to % (10 years)', i, v_delay, c_max_delay
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_dues[i] := v_due;
        v_delays[i] := v_delay;
        v_att := max_attempts[i];
        IF v_att IS NULL THEN
            IF v_default_attempts IS NULL THEN
                SELECT t.settings INTO v_settings FROM __SCHEMA__.topic t WHERE t.name = delayq_send_many.topic;
                -- The engine's settings blob is JSON; its max_attempts is
                -- set only when the topic overrides the default.
                IF v_settings IS NOT NULL AND octet_length(v_settings) > 0 THEN
                    v_default_attempts := (convert_from(v_settings, 'UTF8')::jsonb ->> 'max_attempts')::integer;
                END IF;
                v_default_attempts := coalesce(nullif(v_default_attempts, 0), 25);
            END IF;
            v_att := v_default_attempts;
        ELSIF v_att < 1 OR v_att > 1000 THEN
            RAISE EXCEPTION 'delayq_send_many: message %: max_attempts %: want 1 to 1000', i, v_att
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        v_attempts[i] := v_att;
        v_h := headers[i];
        v_enc := NULL;
        IF v_h IS NOT NULL AND v_h <> 'null'::jsonb THEN
            IF jsonb_typeof(v_h) <> 'object' THEN
                RAISE EXCEPTION 'delayq_send_many: message %: headers must be a JSON object of strings', i
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            SELECT count(*), coalesce(sum(octet_length(convert_to(h.key, 'UTF8')) + octet_length(convert_to(h.value #>> '{}', 'UTF8'))), 0),
                   bool_and(jsonb_typeof(h.value) = 'string') AND bool_and(h.key <> '' AND h.key !~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
              INTO v_n, v_size, v_ok
              FROM jsonb_each(v_h) h;
            IF v_n > 64 OR v_size > 8192 THEN
                RAISE EXCEPTION 'delayq_send_many: message %: headers have % entries, % bytes; the limits are 64 and 8192', i, v_n, v_size
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            IF v_n > 0 AND NOT v_ok THEN
                RAISE EXCEPTION 'delayq_send_many: message %: headers must map non-empty keys without control characters or line separators to strings', i
                    USING ERRCODE = 'invalid_parameter_value';
            END IF;
            -- The store's header encoding, as delayq_send's.
            SELECT string_agg(int4send(octet_length(convert_to(h.key, 'UTF8'))) || convert_to(h.key, 'UTF8')
                              || int4send(octet_length(convert_to(h.value, 'UTF8'))) || convert_to(h.value, 'UTF8'),
                              ''::bytea ORDER BY convert_to(h.key, 'UTF8'))
              INTO v_enc FROM jsonb_each_text(v_h) h;
        END IF;
        v_headers[i] := v_enc;
    END LOOP;
    FOR r IN SELECT * FROM __SCHEMA__.op_insert(NULL, delayq_send_many.topic, v_ids, v_payloads, v_headers,
        v_dues, v_relative, v_delays, v_attempts, v_generated, true, v_priorities, false)
    LOOP
        message_id := r.id;
        duplicate := r.status = 1;
        due_at := to_timestamp(r.due_at / 1000.0);
        RETURN NEXT;
    END LOOP;
END $$;
