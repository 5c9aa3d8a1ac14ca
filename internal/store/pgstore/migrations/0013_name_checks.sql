-- delayq schema, version 13: delayq_send and delayq_send_many check names
-- without a bounded repetition in their regular expressions.
--
-- A topic and an id were checked with '^[…]{1,200}$'. PostgreSQL's regex
-- compiler expands {1,200} into 200 copies of the bracket, and the match
-- sets up work areas of that size each time: ≈ 25 µs of the database's
-- CPU per check, more than the message row's insert — a third of a
-- one-message delayq_send with a generated id, half of one with an id of
-- the caller's, and once per id in delayq_send_many. The same rule, 1 to
-- 200 of those characters, is now length(x) > 200 OR x !~ '^[…]+$': the
-- same strings pass and fail, with the same errors.
--
-- The bodies are otherwise version 9's; signatures, results, errors and
-- grants are unchanged (CREATE OR REPLACE keeps the EXECUTE grants).
-- Servers do not call these functions, so a version 12 server keeps
-- running on a version 13 schema until it restarts.

CREATE OR REPLACE FUNCTION __SCHEMA__.delayq_send(
    topic        text,
    id           text,
    payload      bytea,
    delay_ms     bigint,
    headers      jsonb,
    max_attempts integer,
    deliver_at   timestamptz,
    priority     integer)
RETURNS TABLE (message_id text, duplicate boolean, due_at timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    c_max_delay constant bigint := 315360000000; -- 10 years, delayq's default --max-delay
    v_now bigint := __SCHEMA__.now_ms();
    v_id text := delayq_send.id;
    v_payload bytea := coalesce(delayq_send.payload, ''::bytea);
    v_attempts integer := delayq_send.max_attempts;
    v_headers bytea;
    v_due bigint;
    v_delay bigint := coalesce(delayq_send.delay_ms, 0);
    v_n integer;
    v_size bigint;
    v_settings bytea;
    v_ok boolean;
    v_seq bigint;
    v_state smallint;
    r __SCHEMA__.rec;
BEGIN
    -- The checks and their order are version 3's.
    IF delayq_send.topic IS NULL OR length(delayq_send.topic) > 200 OR delayq_send.topic !~ '^[A-Za-z0-9._:-]+$' THEN
        RAISE EXCEPTION 'delayq_send: topic %: want 1-200 chars of A-Z a-z 0-9 . _ : -', quote_nullable(delayq_send.topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_id IS NULL THEN
        v_id := __SCHEMA__.uuid7(v_now);
    ELSIF length(v_id) > 200 OR v_id !~ '^[A-Za-z0-9._:@+=-]+$' THEN
        RAISE EXCEPTION 'delayq_send: id %: want 1-200 chars of A-Z a-z 0-9 . _ : @ + = -', quote_literal(v_id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delayq_send.priority IS NULL OR delayq_send.priority < 0 OR delayq_send.priority > 255 THEN
        RAISE EXCEPTION 'delayq_send: priority %: want 0 to 255', quote_nullable(delayq_send.priority)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF octet_length(v_payload) > 1048576 THEN
        RAISE EXCEPTION 'delayq_send: payload is % bytes, the limit is 1048576', octet_length(v_payload)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delayq_send.deliver_at IS NOT NULL THEN
        IF v_delay <> 0 THEN
            RAISE EXCEPTION 'delayq_send: give either delay_ms or deliver_at, not both'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- Rounded up: sub-millisecond precision never makes it early.
        v_due := ceil(extract(epoch FROM delayq_send.deliver_at) * 1000)::bigint;
        IF v_due < 0 THEN
            RAISE EXCEPTION 'delayq_send: deliver_at % is before 1970', delayq_send.deliver_at
                USING ERRCODE = 'invalid_parameter_value';
        ELSIF v_due - v_now > c_max_delay THEN
            RAISE EXCEPTION 'delayq_send: deliver_at % is beyond the maximum delay of 10 years', delayq_send.deliver_at
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
    ELSIF v_delay < 0 OR v_delay > c_max_delay THEN
        RAISE EXCEPTION 'delayq_send: delay_ms %: want 0 to % (10 years)', v_delay, c_max_delay
            USING ERRCODE = 'invalid_parameter_value';
    ELSE
        v_due := v_now + v_delay;
    END IF;
    IF v_attempts IS NOT NULL AND (v_attempts < 1 OR v_attempts > 1000) THEN
        RAISE EXCEPTION 'delayq_send: max_attempts %: want 1 to 1000', v_attempts
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF delayq_send.headers IS NOT NULL AND delayq_send.headers <> 'null'::jsonb THEN
        IF jsonb_typeof(delayq_send.headers) <> 'object' THEN
            RAISE EXCEPTION 'delayq_send: headers must be a JSON object of strings'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        SELECT count(*), coalesce(sum(octet_length(convert_to(h.key, 'UTF8')) + octet_length(convert_to(h.value #>> '{}', 'UTF8'))), 0),
               bool_and(jsonb_typeof(h.value) = 'string') AND bool_and(h.key <> '' AND h.key !~ '[\x01-\x1f\x7f-\x9f\u2028\u2029]')
          INTO v_n, v_size, v_ok
          FROM jsonb_each(delayq_send.headers) h;
        IF v_n > 64 OR v_size > 8192 THEN
            RAISE EXCEPTION 'delayq_send: headers have % entries, % bytes; the limits are 64 and 8192', v_n, v_size
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        IF v_n > 0 AND NOT v_ok THEN
            RAISE EXCEPTION 'delayq_send: headers must map non-empty keys without control characters or line separators to strings'
                USING ERRCODE = 'invalid_parameter_value';
        END IF;
        -- The store's header encoding (codec.go): per key, in key order,
        -- 4-byte big-endian length and bytes of the key, then of the value.
        SELECT string_agg(int4send(octet_length(convert_to(h.key, 'UTF8'))) || convert_to(h.key, 'UTF8')
                          || int4send(octet_length(convert_to(h.value, 'UTF8'))) || convert_to(h.value, 'UTF8'),
                          ''::bytea ORDER BY convert_to(h.key, 'UTF8'))
          INTO v_headers FROM jsonb_each_text(delayq_send.headers) h;
    END IF;

    -- One read of the topic row: it exists, and its settings (the
    -- engine's JSON blob; max_attempts is set only when the topic
    -- overrides the default).
    SELECT t.settings INTO v_settings FROM __SCHEMA__.topic t WHERE t.name = delayq_send.topic;
    IF NOT FOUND THEN
        INSERT INTO __SCHEMA__.topic (name) VALUES (delayq_send.topic) ON CONFLICT DO NOTHING;
    END IF;
    IF v_attempts IS NULL THEN
        IF v_settings IS NOT NULL AND octet_length(v_settings) > 0 THEN
            v_attempts := (convert_from(v_settings, 'UTF8')::jsonb ->> 'max_attempts')::integer;
        END IF;
        v_attempts := coalesce(nullif(v_attempts, 0), 25);
    END IF;

    INSERT INTO __SCHEMA__.message AS x (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload, priority)
    VALUES (delayq_send.topic, v_id, nextval('__SCHEMA__.seq'), CASE WHEN v_due <= v_now THEN 2 ELSE 1 END, v_due, v_now, v_now,
            v_attempts, nullif(v_headers, ''::bytea), nullif(v_payload, ''::bytea), delayq_send.priority::smallint)
    ON CONFLICT DO NOTHING
    RETURNING x.seq, x.state INTO v_seq, v_state;
    -- The id's previous message may have been acked (moved to tombstone)
    -- while the insert waited for it: this statement's snapshot sees that
    -- ack's tombstone. Such a message is taken back. A generated id is
    -- new for sure.
    IF v_seq IS NOT NULL AND delayq_send.id IS NOT NULL THEN
        PERFORM 1 FROM __SCHEMA__.tombstone y WHERE y.topic = delayq_send.topic AND y.id = v_id;
        IF FOUND THEN
            DELETE FROM __SCHEMA__.message x WHERE x.topic = delayq_send.topic AND x.id = v_id;
            v_seq := NULL;
        END IF;
    END IF;
    IF v_seq IS NULL THEN
        -- Held by a message or a tombstone, or raced: op_insert's per-id
        -- loop answers (the duplicate, or a new message if the holder
        -- went away meanwhile).
        SELECT * INTO r FROM __SCHEMA__.op_insert(v_now, delayq_send.topic, ARRAY[v_id], ARRAY[v_payload], ARRAY[v_headers],
            ARRAY[v_due], ARRAY[false], ARRAY[0::bigint], ARRAY[v_attempts], ARRAY[delayq_send.id IS NULL], true,
            ARRAY[delayq_send.priority::smallint]);
        message_id := r.id;
        duplicate := r.status = 1;
        due_at := to_timestamp(r.due_at / 1000.0);
        RETURN NEXT;
        RETURN;
    END IF;
    -- The queue row and the send's count row (version 8).
    IF v_state = 2 THEN
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority)
        VALUES (delayq_send.topic, v_due, v_seq, v_id, delayq_send.priority::smallint);
        INSERT INTO __SCHEMA__.topic_count (topic, stripe, scheduled, ready)
        VALUES (delayq_send.topic, nextval('__SCHEMA__.stripe'), 0, 1);
    ELSE
        INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id) VALUES (delayq_send.topic, v_due, v_seq, v_id);
        INSERT INTO __SCHEMA__.topic_count (topic, stripe, scheduled, ready)
        VALUES (delayq_send.topic, nextval('__SCHEMA__.stripe'), 1, 0);
    END IF;
    -- Only a message due within a minute needs a wake-up (version 5): 0
    -- for one due now, else its due time.
    IF v_due - v_now < 60000 THEN
        PERFORM pg_notify('__CHANNEL__', delayq_send.topic || E'\t' || CASE WHEN v_state = 2 THEN 0 ELSE v_due END);
    END IF;
    message_id := v_id;
    duplicate := false;
    due_at := to_timestamp(v_due / 1000.0);
    RETURN NEXT;
END $$;

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
        v_dues, v_relative, v_delays, v_attempts, v_generated, true, v_priorities)
    LOOP
        message_id := r.id;
        duplicate := r.status = 1;
        due_at := to_timestamp(r.due_at / 1000.0);
        RETURN NEXT;
    END LOOP;
END $$;
