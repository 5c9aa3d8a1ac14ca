-- Message priority within a topic (store.Record.Priority, 0-255, 0 the
-- default and first): among due ready messages a lease takes (priority,
-- due_at, seq) order; promotion stays (due_at, seq), and priority never
-- makes a message early. Existing rows get priority 0.
--
-- Compatibility: the columns are added with a default (no table rewrite),
-- delayq_send keeps its 7-argument form (and its grants) and gains an
-- 8-argument one that takes a priority, and op_insert keeps its
-- 11-argument form. The rec type gains a last attribute, priority: a
-- server of the previous version still sends, leases and acks on this
-- schema (it names rec's columns), but its message get and list (which
-- read rec_msg(...).*) fail until it is upgraded.

ALTER TABLE __SCHEMA__.message ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE __SCHEMA__.tombstone ADD COLUMN priority smallint NOT NULL DEFAULT 0;
ALTER TABLE __SCHEMA__.q_ready ADD COLUMN priority smallint NOT NULL DEFAULT 0;
-- The lease order: a lease is one range read of this index from the
-- topic's first entry, reading past the rare ready rows not yet due (a
-- promotion judged by a later clock) and stopping after p_max, however
-- many priorities are in use. The primary key (topic, due_at, seq) stays:
-- dequeue deletes by it, and topic_info's oldest_ready (least due_at
-- whatever the priority) is its first entry.
CREATE INDEX q_ready_lease ON __SCHEMA__.q_ready (topic, priority, due_at, seq);

ALTER TYPE __SCHEMA__.rec ADD ATTRIBUTE priority smallint;

CREATE OR REPLACE FUNCTION __SCHEMA__.rec_msg(m __SCHEMA__.message, st integer) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(st, m.topic, m.id, m.seq, m.state, m.due_at, m.created_at, m.updated_at,
               m.deliveries, m.failures, m.max_attempts, m.last_error, m.receipt,
               m.lease_until, m.dead_at, 0::bigint, m.headers, m.payload, m.priority)::__SCHEMA__.rec
$$;

CREATE OR REPLACE FUNCTION __SCHEMA__.rec_tomb(t __SCHEMA__.tombstone, st integer) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(st, t.topic, t.id, t.seq, 5::smallint, t.due_at, t.created_at, t.updated_at,
               t.deliveries, t.failures, t.max_attempts, t.last_error, NULL::text,
               0::bigint, 0::bigint, t.acked_at, NULL::bytea, NULL::bytea, t.priority)::__SCHEMA__.rec
$$;

-- The answer for a message that is not in message: conflict when it is
-- an acked tombstone (the operation needs a live message), else not found.
CREATE OR REPLACE FUNCTION __SCHEMA__.missing(p_topic text, p_id text) RETURNS __SCHEMA__.rec
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM __SCHEMA__.tombstone t WHERE t.topic = p_topic AND t.id = p_id)
                THEN ROW(3, p_topic, p_id, 0, 5, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL, 0)::__SCHEMA__.rec
                ELSE ROW(2, p_topic, p_id, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL, 0)::__SCHEMA__.rec END
$$;

-- enqueue puts a message (already in message, with its new state and
-- times) into the queue of that state and counts it.
CREATE OR REPLACE FUNCTION __SCHEMA__.enqueue(m __SCHEMA__.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    CASE m.state
    WHEN 1 THEN
        INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 1, 0, 0, 0, 0);
    WHEN 2 THEN
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id, priority) VALUES (m.topic, m.due_at, m.seq, m.id, m.priority);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 1, 0, 0, 0);
    WHEN 3 THEN
        INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id) VALUES (m.lease_until, m.seq, m.topic, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 1, 0, 0);
    WHEN 4 THEN
        INSERT INTO __SCHEMA__.q_dead (topic, dead_at, seq, id) VALUES (m.topic, m.dead_at, m.seq, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 0, 1, 0);
    END CASE;
END $$;

-- op_insert inserts messages (store.MessageInsertMany). Arrays are
-- parallel, one element per message; a due time is p_due[i], or now +
-- p_delay[i] when p_relative[i]. p_generated[i] says the id was just
-- generated (new for sure): no duplicate lookups. p_priorities[i] is the
-- priority (NULL or a short array: 0). Answers one rec per
-- message, in order: status 0 new, 1 duplicate (the existing message or
-- tombstone). With p_notify it also notifies (at commit) — the path of
-- delayq_send; the engine notifies after its own commits instead (see the
-- package doc).
CREATE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean, p_priorities smallint[])
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    n integer := coalesce(array_length(p_ids, 1), 0);
    v_seqs bigint[];
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
BEGIN
    IF n = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM __SCHEMA__.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN
        INSERT INTO __SCHEMA__.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING;
    END IF;
    v_out := array_fill(NULL::__SCHEMA__.rec, ARRAY[n]);
    -- Seq in batch order, whatever order the rows are written in.
    FOR i IN 1..n LOOP
        v_seqs[i] := nextval('__SCHEMA__.seq');
    END LOOP;
    -- Ids in sorted order, so that two concurrent inserts sharing ids
    -- wait for each other in one order and cannot deadlock; a repeated
    -- id comes after its first occurrence and finds it.
    FOR i IN SELECT u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id, u.o LOOP
        v_done := false;
        v_due := CASE WHEN p_relative[i] THEN v_now + p_delay[i] ELSE p_due[i] END;
        FOR v_try IN 1..10 LOOP
            IF NOT coalesce(p_generated[i], false) OR v_try > 1 THEN
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
            END IF;
            -- A concurrent insert of the same id makes this wait for its
            -- transaction, then do nothing: look again.
            INSERT INTO __SCHEMA__.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload, priority)
            VALUES (p_topic, p_ids[i], v_seqs[i], CASE WHEN v_due <= v_now THEN 2 ELSE 1 END, v_due, v_now, v_now,
                    p_max_attempts[i], nullif(p_headers[i], ''::bytea), nullif(p_payloads[i], ''::bytea), coalesce(p_priorities[i], 0))
            ON CONFLICT DO NOTHING
            RETURNING * INTO m;
            IF NOT FOUND THEN
                CONTINUE;
            END IF;
            -- The previous message of this id may have been acked (moved to
            -- tombstone) between the lookups above and the insert.
            IF NOT coalesce(p_generated[i], false) THEN
                PERFORM 1 FROM __SCHEMA__.tombstone x WHERE x.topic = p_topic AND x.id = p_ids[i];
                IF FOUND THEN
                    DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_ids[i];
                    CONTINUE;
                END IF;
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
    PERFORM __SCHEMA__.count_add(p_topic, v_sched, v_ready, 0, 0, 0);
    IF p_notify AND v_earliest >= 0 THEN
        PERFORM pg_notify('__CHANNEL__', p_topic || E'\t' || v_earliest);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_out);
END $$;

-- The 11-argument op_insert of schema 2 (servers of the previous
-- version call it): priority 0.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean)
RETURNS SETOF __SCHEMA__.rec LANGUAGE sql AS $$
    SELECT * FROM __SCHEMA__.op_insert(p_now, p_topic, p_ids, p_payloads, p_headers, p_due, p_relative, p_delay,
                                       p_max_attempts, p_generated, p_notify, NULL::smallint[])
$$;

-- op_promote moves up to p_max scheduled messages due by now to ready, in
-- (due_at, seq) order, and answers how many, the earliest due time still
-- scheduled (0: none) and the now it judged by. Messages another
-- transaction holds are skipped (SKIP LOCKED): several servers promote
-- the same topic at once without waiting for each other.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_promote(p_now bigint, p_topic text, p_max integer,
    OUT promoted integer, OUT next_due bigint, OUT now_ms bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
BEGIN
    now_ms := v_now;
    -- Lock first, then change: each statement below reads a fresh
    -- snapshot, in which the locked messages' queue rows are current.
    -- The checks on m are re-evaluated on the latest version of a row
    -- another transaction changed meanwhile.
    SELECT array_agg(s.id) INTO v_ids FROM (
        SELECT m.id FROM __SCHEMA__.q_scheduled q
          JOIN __SCHEMA__.message m ON m.topic = q.topic AND m.id = q.id
         WHERE q.topic = p_topic AND q.due_at <= v_now
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
    next_due := coalesce(next_due, 0);
END $$;

-- op_lease takes up to p_max ready messages due by now, in (priority,
-- due_at, seq) order (q_ready_lease), and makes them inflight until now + p_lease_for, with receipt
-- p_token-deliveries (p_token is unique per call). Messages another
-- transaction holds are skipped, so consumers never wait on each other.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_lease(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_ids text[];
    n integer;
BEGIN
    SELECT array_agg(s.id) INTO v_ids FROM (
        SELECT m.id FROM __SCHEMA__.q_ready q
          JOIN __SCHEMA__.message m ON m.topic = q.topic AND m.id = q.id
         WHERE q.topic = p_topic AND q.due_at <= v_now
           AND m.state = 2 AND m.due_at = q.due_at AND m.seq = q.seq
         ORDER BY q.priority, q.due_at, q.seq
         LIMIT p_max
           FOR UPDATE OF m SKIP LOCKED) s;
    n := coalesce(array_length(v_ids, 1), 0);
    IF n = 0 THEN
        RETURN;
    END IF;
    DELETE FROM __SCHEMA__.q_ready q USING __SCHEMA__.message m
     WHERE m.topic = p_topic AND m.id = ANY (v_ids)
       AND q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
    UPDATE __SCHEMA__.message m
       SET state = 3, deliveries = m.deliveries + 1, lease_until = v_now + p_lease_for,
           receipt = p_token || '-' || (m.deliveries + 1), updated_at = v_now
     WHERE m.topic = p_topic AND m.id = ANY (v_ids);
    INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id)
    SELECT m.lease_until, m.seq, m.topic, m.id FROM __SCHEMA__.message m WHERE m.topic = p_topic AND m.id = ANY (v_ids);
    PERFORM __SCHEMA__.count_add(p_topic, 0, -n, n, 0, 0);
    RETURN QUERY SELECT r.* FROM __SCHEMA__.message m, LATERAL __SCHEMA__.rec_msg(m, 0) r
                  WHERE m.topic = p_topic AND m.id = ANY (v_ids) ORDER BY m.priority, m.due_at, m.seq;
END $$;

-- ack makes a leased message an acked tombstone: it leaves message for
-- tombstone. Answers the status (0, 2 or 3).
CREATE OR REPLACE FUNCTION __SCHEMA__.ack(v_now bigint, p_topic text, p_id text, p_receipt text) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    l record;
BEGIN
    l := __SCHEMA__.leased(p_topic, p_id, p_receipt);
    IF (l.r).status IS NOT NULL THEN
        RETURN (l.r).status;
    END IF;
    PERFORM __SCHEMA__.dequeue(l.m);
    DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id;
    INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority)
    VALUES (p_topic, p_id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error, (l.m).priority)
    ON CONFLICT (topic, id) DO UPDATE
       SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
           acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
           max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, 0, 0, 1);
    RETURN 0;
END $$;

-- op_dead_replay moves dead messages back to ready (due now, failures 0):
-- p_id, or up to p_max of the topic, oldest death first.
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
          JOIN __SCHEMA__.message x ON x.topic = q.topic AND x.id = q.id
         WHERE q.topic = p_topic AND x.state = 4 AND x.dead_at = q.dead_at AND x.seq = q.seq
         ORDER BY q.dead_at, q.seq
         LIMIT p_max
           FOR UPDATE OF x SKIP LOCKED
    LOOP
        RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.replay(m, v_now), 0);
    END LOOP;
END $$;

-- delayq_send sends one message from SQL, inside the caller's
-- transaction: the message exists if and only if that transaction
-- commits, and the running servers are notified at commit (NOTIFY is
-- transactional). Any language with a PostgreSQL driver can use it:
--
--   SELECT * FROM delayq.delayq_send('orders', 'order-42', '\x7b7d'::bytea, 5000);
--   SELECT * FROM delayq.delayq_send(topic => 'orders', id => NULL, payload => convert_to('{}', 'UTF8'),
--                                    headers => '{"content-type": "application/json"}',
--                                    deliver_at => now() + interval '1 hour');
--   SELECT * FROM delayq.delayq_send('orders', NULL, '\x7b7d'::bytea, 0, NULL, NULL, NULL, 5);
--
-- It has two forms: the 7-argument one of schema versions 1-2 (topic to
-- deliver_at, the last four optional), and one of 8 arguments, all to be
-- given (NULL for the defaults), whose last is priority: 0-255, lower
-- first among due messages (0, the 7-argument form's, is the default).
-- Each form needs its own EXECUTE grant.
--
-- topic: 1-200 chars of [A-Za-z0-9._:-]; id: 1-200 chars of
-- [A-Za-z0-9._:@+=-], or NULL for a generated one (a UUID). An id the
-- topic holds (in any state, acked ones during the dedup window
-- included) is not sent again: duplicate is true and due_at is the
-- existing message's. payload: at most 1 MiB (delayq's default
-- --max-payload). delay_ms: 0 to 10 years, or deliver_at instead (not
-- both; a deliver_at in the past is due now). Due times are the
-- database's clock plus the delay, as for every send. headers: a JSON
-- object of strings (at most 64 entries, 8 KiB in all). max_attempts:
-- 1-1000; NULL takes the topic's setting, else 25 (delayq's default; a
-- server started with another --default-max-attempts does not tell the
-- database, so pass it explicitly then).
--
-- Bad arguments raise SQLSTATE 22023 (invalid_parameter_value). The
-- function runs with its owner's rights (SECURITY DEFINER): grant an
-- application role USAGE on the schema and EXECUTE on this function, and
-- it needs no rights on the tables.
CREATE FUNCTION __SCHEMA__.delayq_send(
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
    v_due bigint := 0;
    v_relative boolean := true;
    v_delay bigint := coalesce(delayq_send.delay_ms, 0);
    v_n integer;
    v_size bigint;
    v_settings bytea;
    v_ok boolean;
    r __SCHEMA__.rec;
BEGIN
    IF delayq_send.topic IS NULL OR delayq_send.topic !~ '^[A-Za-z0-9._:-]{1,200}$' THEN
        RAISE EXCEPTION 'delayq_send: topic %: want 1-200 chars of A-Z a-z 0-9 . _ : -', quote_nullable(delayq_send.topic)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF v_id IS NULL THEN
        v_id := gen_random_uuid()::text;
    ELSIF v_id !~ '^[A-Za-z0-9._:@+=-]{1,200}$' THEN
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
        v_relative := false;
        v_delay := 0;
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
    END IF;
    IF v_attempts IS NULL THEN
        SELECT t.settings INTO v_settings FROM __SCHEMA__.topic t WHERE t.name = delayq_send.topic;
        -- The engine's settings blob is JSON; its max_attempts is set
        -- only when the topic overrides the default.
        IF v_settings IS NOT NULL AND octet_length(v_settings) > 0 THEN
            v_attempts := (convert_from(v_settings, 'UTF8')::jsonb ->> 'max_attempts')::integer;
        END IF;
        v_attempts := coalesce(nullif(v_attempts, 0), 25);
    ELSIF v_attempts < 1 OR v_attempts > 1000 THEN
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
    SELECT * INTO r FROM __SCHEMA__.op_insert(NULL, delayq_send.topic, ARRAY[v_id], ARRAY[v_payload], ARRAY[v_headers],
        ARRAY[v_due], ARRAY[v_relative], ARRAY[v_delay], ARRAY[v_attempts], ARRAY[delayq_send.id IS NULL], true,
        ARRAY[delayq_send.priority::smallint]);
    message_id := r.id;
    duplicate := r.status = 1;
    due_at := to_timestamp(r.due_at / 1000.0);
    RETURN NEXT;
END $$;
REVOKE ALL ON FUNCTION __SCHEMA__.delayq_send(text, text, bytea, bigint, jsonb, integer, timestamptz, integer) FROM PUBLIC;

-- The 7-argument form, as before: priority 0. Replaced in place, so the
-- grants made on it stay.
CREATE OR REPLACE FUNCTION __SCHEMA__.delayq_send(
    topic        text,
    id           text,
    payload      bytea,
    delay_ms     bigint DEFAULT 0,
    headers      jsonb DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    deliver_at   timestamptz DEFAULT NULL)
RETURNS TABLE (message_id text, duplicate boolean, due_at timestamptz)
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
    SELECT * FROM __SCHEMA__.delayq_send(topic, id, payload, delay_ms, headers, max_attempts, deliver_at, 0)
$$;
