-- delayq schema, version 1. __SCHEMA__ is the schema (quoted identifier),
-- __CHANNEL__ the LISTEN/NOTIFY channel ("<schema>.notify"). Applied in
-- one transaction by the store's migrator (migrate.go); the package doc
-- (doc.go) explains the layout.
--
-- States (message.state, store.State): 1 scheduled, 2 ready, 3 inflight,
-- 4 dead; acked messages live in tombstone. Times are Unix ms (bigint).

-- The one clock: every instant is computed in SQL from now_ms(), the
-- database server's clock, unless a caller passes its own now (the
-- TimeCaller test mode).
CREATE FUNCTION __SCHEMA__.now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$ SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- Seq: send order, store-wide.
CREATE SEQUENCE __SCHEMA__.seq AS bigint;
CREATE SEQUENCE __SCHEMA__.stripe AS bigint;

CREATE TABLE __SCHEMA__.topic (
    name     text COLLATE "C" PRIMARY KEY,
    settings bytea -- the engine's blob; NULL: never set
);

-- Counts per state, striped: a state change adds to one row of its topic
-- that no other transaction holds (FOR UPDATE SKIP LOCKED), or makes a
-- new row, so that concurrent transactions — an application's long one
-- calling delayq_send included — never queue on one counter row.
-- count_compact folds the rows back. Tiny rows updated all the time:
-- fillfactor leaves room on the page for HOT updates.
CREATE TABLE __SCHEMA__.topic_count (
    topic     text COLLATE "C" NOT NULL,
    stripe    bigint NOT NULL,
    scheduled bigint NOT NULL DEFAULT 0,
    ready     bigint NOT NULL DEFAULT 0,
    inflight  bigint NOT NULL DEFAULT 0,
    dead      bigint NOT NULL DEFAULT 0,
    acked     bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (topic, stripe)
) WITH (fillfactor = 20, autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 200);

-- One row per live message (scheduled, ready, inflight, dead). Its only
-- index is the primary key, which never changes, so every state change is
-- an update of unindexed columns: a HOT update (no new index entries)
-- when the page has room, which fillfactor keeps. Payloads above a few
-- hundred bytes go to TOAST (toast_tuple_target), so a state change
-- copies a narrow row, not the payload.
CREATE TABLE __SCHEMA__.message (
    topic        text COLLATE "C" NOT NULL,
    id           text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL,
    due_at       bigint NOT NULL,
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL,
    lease_until  bigint NOT NULL DEFAULT 0,
    dead_at      bigint NOT NULL DEFAULT 0,
    state        smallint NOT NULL,
    deliveries   integer NOT NULL DEFAULT 0,
    failures     integer NOT NULL DEFAULT 0,
    max_attempts integer NOT NULL,
    receipt      text COLLATE "C",
    last_error   bytea,
    headers      bytea,
    payload      bytea,
    PRIMARY KEY (topic, id)
) WITH (fillfactor = 70, toast_tuple_target = 256,
        autovacuum_vacuum_scale_factor = 0.05, autovacuum_vacuum_insert_scale_factor = 0.05);

-- The queues: one narrow table per state, holding the order that state
-- is worked in. A state change deletes the message's row here and inserts
-- one there, so these tables churn (dead tuples, index entries deleted
-- at the head and added at the tail) while message does not; they are
-- small, so autovacuum is told to visit them often.
CREATE TABLE __SCHEMA__.q_scheduled (
    topic  text COLLATE "C" NOT NULL,
    due_at bigint NOT NULL,
    seq    bigint NOT NULL,
    id     text COLLATE "C" NOT NULL,
    PRIMARY KEY (topic, due_at, seq)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

CREATE TABLE __SCHEMA__.q_ready (
    topic  text COLLATE "C" NOT NULL,
    due_at bigint NOT NULL,
    seq    bigint NOT NULL,
    id     text COLLATE "C" NOT NULL,
    PRIMARY KEY (topic, due_at, seq)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);

-- Store-wide order for LeaseExpire; per topic for NextLeaseExpiry.
CREATE TABLE __SCHEMA__.q_inflight (
    lease_until bigint NOT NULL,
    seq         bigint NOT NULL,
    topic       text COLLATE "C" NOT NULL,
    id          text COLLATE "C" NOT NULL,
    PRIMARY KEY (lease_until, seq)
) WITH (autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0);
CREATE INDEX q_inflight_topic ON __SCHEMA__.q_inflight (topic, lease_until);

CREATE TABLE __SCHEMA__.q_dead (
    topic   text COLLATE "C" NOT NULL,
    dead_at bigint NOT NULL,
    seq     bigint NOT NULL,
    id      text COLLATE "C" NOT NULL,
    PRIMARY KEY (topic, dead_at, seq)
);

-- Acked messages, kept for the dedup window without payload or headers,
-- in their own table: message holds only live messages, and tombstones
-- come and go in ack order (purged oldest first, in batches), so this
-- table is a FIFO whose freed pages vacuum hands back to new tombstones.
CREATE TABLE __SCHEMA__.tombstone (
    topic        text COLLATE "C" NOT NULL,
    id           text COLLATE "C" NOT NULL,
    seq          bigint NOT NULL,
    due_at       bigint NOT NULL,
    created_at   bigint NOT NULL,
    updated_at   bigint NOT NULL,
    acked_at     bigint NOT NULL,
    deliveries   integer NOT NULL,
    failures     integer NOT NULL,
    max_attempts integer NOT NULL,
    last_error   bytea,
    PRIMARY KEY (topic, id)
) WITH (autovacuum_vacuum_scale_factor = 0.02);
CREATE INDEX tombstone_acked ON __SCHEMA__.tombstone (acked_at, seq);

CREATE TABLE __SCHEMA__.schedule (
    name       text COLLATE "C" PRIMARY KEY,
    spec       bytea NOT NULL,
    last_tick  bigint NOT NULL,
    created_at bigint NOT NULL,
    updated_at bigint NOT NULL
);

-- Token buckets of rate-limited topics (store.RateLimiter).
CREATE TABLE __SCHEMA__.rate_bucket (
    topic  text COLLATE "C" PRIMARY KEY,
    tokens double precision NOT NULL,
    ts     bigint NOT NULL
) WITH (fillfactor = 20);

-- What every operation answers: a status and a record.
-- status: 0 ok (or new, for inserts), 1 duplicate, 2 not found, 3 conflict.
CREATE TYPE __SCHEMA__.rec AS (
    status       integer,
    topic        text,
    id           text,
    seq          bigint,
    state        smallint,
    due_at       bigint,
    created_at   bigint,
    updated_at   bigint,
    deliveries   integer,
    failures     integer,
    max_attempts integer,
    last_error   bytea,
    receipt      text,
    lease_until  bigint,
    dead_at      bigint,
    acked_at     bigint,
    headers      bytea,
    payload      bytea
);

CREATE FUNCTION __SCHEMA__.rec_msg(m __SCHEMA__.message, st integer) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(st, m.topic, m.id, m.seq, m.state, m.due_at, m.created_at, m.updated_at,
               m.deliveries, m.failures, m.max_attempts, m.last_error, m.receipt,
               m.lease_until, m.dead_at, 0::bigint, m.headers, m.payload)::__SCHEMA__.rec
$$;

CREATE FUNCTION __SCHEMA__.rec_tomb(t __SCHEMA__.tombstone, st integer) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(st, t.topic, t.id, t.seq, 5::smallint, t.due_at, t.created_at, t.updated_at,
               t.deliveries, t.failures, t.max_attempts, t.last_error, NULL::text,
               0::bigint, 0::bigint, t.acked_at, NULL::bytea, NULL::bytea)::__SCHEMA__.rec
$$;

-- The answer for a message that is not in message: conflict when it is
-- an acked tombstone (the operation needs a live message), else not found.
CREATE FUNCTION __SCHEMA__.missing(p_topic text, p_id text) RETURNS __SCHEMA__.rec
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN EXISTS (SELECT 1 FROM __SCHEMA__.tombstone t WHERE t.topic = p_topic AND t.id = p_id)
                THEN ROW(3, p_topic, p_id, 0, 5, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL)::__SCHEMA__.rec
                ELSE ROW(2, p_topic, p_id, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL)::__SCHEMA__.rec END
$$;

-- count_add adds to the topic's counts (see topic_count).
CREATE FUNCTION __SCHEMA__.count_add(p_topic text, d_sched bigint, d_ready bigint, d_inflight bigint, d_dead bigint, d_acked bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_stripe bigint;
BEGIN
    IF d_sched = 0 AND d_ready = 0 AND d_inflight = 0 AND d_dead = 0 AND d_acked = 0 THEN
        RETURN;
    END IF;
    SELECT c.stripe INTO v_stripe FROM __SCHEMA__.topic_count c
     WHERE c.topic = p_topic ORDER BY c.stripe LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE __SCHEMA__.topic_count c
           SET scheduled = c.scheduled + d_sched, ready = c.ready + d_ready, inflight = c.inflight + d_inflight,
               dead = c.dead + d_dead, acked = c.acked + d_acked
         WHERE c.topic = p_topic AND c.stripe = v_stripe;
    ELSE
        INSERT INTO __SCHEMA__.topic_count (topic, stripe, scheduled, ready, inflight, dead, acked)
        VALUES (p_topic, nextval('__SCHEMA__.stripe'), d_sched, d_ready, d_inflight, d_dead, d_acked);
    END IF;
END $$;

-- count_compact folds each topic's counter rows into one, skipping rows
-- that open transactions hold. Returns how many rows it removed.
CREATE FUNCTION __SCHEMA__.count_compact() RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_topic text;
    v_stripes bigint[];
    s1 bigint; s2 bigint; s3 bigint; s4 bigint; s5 bigint;
    v_removed integer := 0;
BEGIN
    FOR v_topic IN SELECT c.topic FROM __SCHEMA__.topic_count c GROUP BY c.topic HAVING count(*) > 1 LOOP
        SELECT array_agg(x.stripe ORDER BY x.stripe), sum(x.scheduled), sum(x.ready), sum(x.inflight), sum(x.dead), sum(x.acked)
          INTO v_stripes, s1, s2, s3, s4, s5
          FROM (SELECT * FROM __SCHEMA__.topic_count c WHERE c.topic = v_topic FOR UPDATE SKIP LOCKED) x;
        IF coalesce(array_length(v_stripes, 1), 0) > 1 THEN
            UPDATE __SCHEMA__.topic_count c SET scheduled = s1, ready = s2, inflight = s3, dead = s4, acked = s5
             WHERE c.topic = v_topic AND c.stripe = v_stripes[1];
            DELETE FROM __SCHEMA__.topic_count c WHERE c.topic = v_topic AND c.stripe = ANY (v_stripes[2:]);
            v_removed := v_removed + array_length(v_stripes, 1) - 1;
        END IF;
    END LOOP;
    RETURN v_removed;
END $$;

-- enqueue puts a message (already in message, with its new state and
-- times) into the queue of that state and counts it.
CREATE FUNCTION __SCHEMA__.enqueue(m __SCHEMA__.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    CASE m.state
    WHEN 1 THEN
        INSERT INTO __SCHEMA__.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 1, 0, 0, 0, 0);
    WHEN 2 THEN
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 1, 0, 0, 0);
    WHEN 3 THEN
        INSERT INTO __SCHEMA__.q_inflight (lease_until, seq, topic, id) VALUES (m.lease_until, m.seq, m.topic, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 1, 0, 0);
    WHEN 4 THEN
        INSERT INTO __SCHEMA__.q_dead (topic, dead_at, seq, id) VALUES (m.topic, m.dead_at, m.seq, m.id);
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 0, 1, 0);
    END CASE;
END $$;

-- dequeue takes a message (as stored, locked by the caller) out of the
-- queue of its state and uncounts it.
CREATE FUNCTION __SCHEMA__.dequeue(m __SCHEMA__.message) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    CASE m.state
    WHEN 1 THEN
        DELETE FROM __SCHEMA__.q_scheduled q WHERE q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, -1, 0, 0, 0, 0);
    WHEN 2 THEN
        DELETE FROM __SCHEMA__.q_ready q WHERE q.topic = m.topic AND q.due_at = m.due_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, -1, 0, 0, 0);
    WHEN 3 THEN
        DELETE FROM __SCHEMA__.q_inflight q WHERE q.lease_until = m.lease_until AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, -1, 0, 0);
    WHEN 4 THEN
        DELETE FROM __SCHEMA__.q_dead q WHERE q.topic = m.topic AND q.dead_at = m.dead_at AND q.seq = m.seq;
        PERFORM __SCHEMA__.count_add(m.topic, 0, 0, 0, -1, 0);
    END CASE;
END $$;

-- save writes back the mutable fields of a message (a HOT update: none
-- of them is indexed).
CREATE FUNCTION __SCHEMA__.save(m __SCHEMA__.message) RETURNS void LANGUAGE sql AS $$
    UPDATE __SCHEMA__.message x
       SET state = m.state, due_at = m.due_at, updated_at = m.updated_at, lease_until = m.lease_until,
           dead_at = m.dead_at, deliveries = m.deliveries, failures = m.failures,
           receipt = m.receipt, last_error = m.last_error
     WHERE x.topic = m.topic AND x.id = m.id
$$;

-- op_insert inserts messages (store.MessageInsertMany). Arrays are
-- parallel, one element per message; a due time is p_due[i], or now +
-- p_delay[i] when p_relative[i]. p_generated[i] says the id was just
-- generated (new for sure): no duplicate lookups. Answers one rec per
-- message, in order: status 0 new, 1 duplicate (the existing message or
-- tombstone). With p_notify it also notifies (at commit) — the path of
-- delayq_send; the engine notifies after its own commits instead (see the
-- package doc).
CREATE FUNCTION __SCHEMA__.op_insert(
    p_now bigint, p_topic text, p_ids text[], p_payloads bytea[], p_headers bytea[],
    p_due bigint[], p_relative boolean[], p_delay bigint[], p_max_attempts integer[],
    p_generated boolean[], p_notify boolean)
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
            INSERT INTO __SCHEMA__.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, headers, payload)
            VALUES (p_topic, p_ids[i], v_seqs[i], CASE WHEN v_due <= v_now THEN 2 ELSE 1 END, v_due, v_now, v_now,
                    p_max_attempts[i], nullif(p_headers[i], ''::bytea), nullif(p_payloads[i], ''::bytea))
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
                INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
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

-- op_cancel deletes a scheduled, ready or inflight message (no tombstone)
-- and answers it as it was.
CREATE FUNCTION __SCHEMA__.op_cancel(p_topic text, p_id text) RETURNS SETOF __SCHEMA__.rec
LANGUAGE plpgsql AS $$
DECLARE
    m __SCHEMA__.message;
BEGIN
    SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NEXT __SCHEMA__.missing(p_topic, p_id);
        RETURN;
    END IF;
    IF m.state NOT IN (1, 2, 3) THEN
        RETURN NEXT __SCHEMA__.rec_msg(m, 3);
        RETURN;
    END IF;
    PERFORM __SCHEMA__.dequeue(m);
    DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id;
    RETURN NEXT __SCHEMA__.rec_msg(m, 0);
END $$;

-- op_reschedule sets the due time of a scheduled or ready message: p_due,
-- or now + p_delay with p_relative.
CREATE FUNCTION __SCHEMA__.op_reschedule(p_now bigint, p_topic text, p_id text, p_due bigint, p_relative boolean, p_delay bigint)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    m __SCHEMA__.message;
BEGIN
    SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        RETURN NEXT __SCHEMA__.missing(p_topic, p_id);
        RETURN;
    END IF;
    IF m.state NOT IN (1, 2) THEN
        RETURN NEXT __SCHEMA__.rec_msg(m, 3);
        RETURN;
    END IF;
    PERFORM __SCHEMA__.dequeue(m);
    m.due_at := CASE WHEN p_relative THEN v_now + p_delay ELSE p_due END;
    m.state := CASE WHEN m.due_at <= v_now THEN 2 ELSE 1 END;
    m.updated_at := v_now;
    PERFORM __SCHEMA__.save(m);
    PERFORM __SCHEMA__.enqueue(m);
    RETURN NEXT __SCHEMA__.rec_msg(m, 0);
END $$;

-- op_promote moves up to p_max scheduled messages due by now to ready, in
-- (due_at, seq) order, and answers how many, the earliest due time still
-- scheduled (0: none) and the now it judged by. Messages another
-- transaction holds are skipped (SKIP LOCKED): several servers promote
-- the same topic at once without waiting for each other.
CREATE FUNCTION __SCHEMA__.op_promote(p_now bigint, p_topic text, p_max integer,
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
            RETURNING q.topic, q.due_at, q.seq, q.id)
        INSERT INTO __SCHEMA__.q_ready (topic, due_at, seq, id) SELECT * FROM moved;
        UPDATE __SCHEMA__.message m SET state = 2, updated_at = v_now WHERE m.topic = p_topic AND m.id = ANY (v_ids);
        PERFORM __SCHEMA__.count_add(p_topic, -promoted, promoted, 0, 0, 0);
    END IF;
    SELECT q.due_at INTO next_due FROM __SCHEMA__.q_scheduled q WHERE q.topic = p_topic ORDER BY q.due_at, q.seq LIMIT 1;
    next_due := coalesce(next_due, 0);
END $$;

-- op_lease takes up to p_max ready messages due by now, in (due_at, seq)
-- order, and makes them inflight until now + p_lease_for, with receipt
-- p_token-deliveries (p_token is unique per call). Messages another
-- transaction holds are skipped, so consumers never wait on each other.
CREATE FUNCTION __SCHEMA__.op_lease(p_now bigint, p_topic text, p_max integer, p_lease_for bigint, p_token text)
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
         ORDER BY q.due_at, q.seq
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
                  WHERE m.topic = p_topic AND m.id = ANY (v_ids) ORDER BY m.due_at, m.seq;
END $$;

-- leased locks the inflight message whose receipt matches, or answers
-- why not (status 2 not found, 3 conflict) in r.
CREATE FUNCTION __SCHEMA__.leased(p_topic text, p_id text, p_receipt text, OUT m __SCHEMA__.message, OUT r __SCHEMA__.rec)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
    IF NOT FOUND THEN
        r := __SCHEMA__.missing(p_topic, p_id);
    ELSIF m.state <> 3 OR m.receipt IS DISTINCT FROM p_receipt THEN
        r := __SCHEMA__.rec_msg(m, 3);
    END IF;
END $$;

-- ack makes a leased message an acked tombstone: it leaves message for
-- tombstone. Answers the status (0, 2 or 3).
CREATE FUNCTION __SCHEMA__.ack(v_now bigint, p_topic text, p_id text, p_receipt text) RETURNS integer
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
    INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error)
    VALUES (p_topic, p_id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error)
    ON CONFLICT (topic, id) DO UPDATE
       SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
           acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
           max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, 0, 0, 1);
    RETURN 0;
END $$;

-- op_ack_many acks (topic, id, receipt) items in order; one status each.
CREATE FUNCTION __SCHEMA__.op_ack_many(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
RETURNS SETOF integer LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    i integer;
BEGIN
    -- Lock in id order first: two batches sharing ids cannot deadlock.
    PERFORM 1 FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = ANY (p_ids) ORDER BY x.id FOR UPDATE;
    FOR i IN 1..coalesce(array_length(p_ids, 1), 0) LOOP
        RETURN NEXT __SCHEMA__.ack(v_now, p_topic, p_ids[i], p_receipts[i]);
    END LOOP;
END $$;

-- fail counts a failure of a leased message (locked, still enqueued as
-- inflight): dead when failures reach max_attempts (due_at kept), else
-- due again at p_retry_at (ready when that is not after now).
CREATE FUNCTION __SCHEMA__.fail(m __SCHEMA__.message, v_now bigint, p_retry_at bigint, p_error bytea)
RETURNS __SCHEMA__.message LANGUAGE plpgsql AS $$
BEGIN
    PERFORM __SCHEMA__.dequeue(m);
    m.failures := m.failures + 1;
    m.last_error := nullif(p_error, ''::bytea);
    m.receipt := NULL;
    m.lease_until := 0;
    m.updated_at := v_now;
    IF m.failures >= m.max_attempts THEN
        m.state := 4;
        m.dead_at := v_now;
    ELSE
        m.state := CASE WHEN p_retry_at <= v_now THEN 2 ELSE 1 END;
        m.due_at := p_retry_at;
    END IF;
    PERFORM __SCHEMA__.save(m);
    PERFORM __SCHEMA__.enqueue(m);
    RETURN m;
END $$;

-- op_nack records a failure of a leased message; retry at now + p_retry_delay.
CREATE FUNCTION __SCHEMA__.op_nack(p_now bigint, p_topic text, p_id text, p_receipt text, p_retry_delay bigint, p_error bytea)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    l record;
BEGIN
    l := __SCHEMA__.leased(p_topic, p_id, p_receipt);
    IF (l.r).status IS NOT NULL THEN
        RETURN NEXT l.r;
        RETURN;
    END IF;
    RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.fail(l.m, v_now, v_now + p_retry_delay, p_error), 0);
END $$;

-- op_extend sets the lease of a leased message to end at now + p_lease_for.
CREATE FUNCTION __SCHEMA__.op_extend(p_now bigint, p_topic text, p_id text, p_receipt text, p_lease_for bigint)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    l record;
    m __SCHEMA__.message;
BEGIN
    l := __SCHEMA__.leased(p_topic, p_id, p_receipt);
    IF (l.r).status IS NOT NULL THEN
        RETURN NEXT l.r;
        RETURN;
    END IF;
    m := l.m;
    UPDATE __SCHEMA__.q_inflight q SET lease_until = v_now + p_lease_for WHERE q.lease_until = m.lease_until AND q.seq = m.seq;
    m.lease_until := v_now + p_lease_for;
    m.updated_at := v_now;
    PERFORM __SCHEMA__.save(m);
    RETURN NEXT __SCHEMA__.rec_msg(m, 0);
END $$;

-- op_expire fails up to p_max leases (of any topic) that ended by now,
-- earliest first: LastError "lease expired", then dead or ready (due now).
CREATE FUNCTION __SCHEMA__.op_expire(p_now bigint, p_max integer) RETURNS SETOF __SCHEMA__.rec
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    m __SCHEMA__.message;
BEGIN
    FOR m IN
        SELECT x.* FROM __SCHEMA__.q_inflight q
          JOIN __SCHEMA__.message x ON x.topic = q.topic AND x.id = q.id
         WHERE q.lease_until <= v_now
           AND x.state = 3 AND x.lease_until = q.lease_until AND x.seq = q.seq
         ORDER BY q.lease_until, q.seq
         LIMIT p_max
           FOR UPDATE OF x SKIP LOCKED
    LOOP
        RETURN NEXT __SCHEMA__.rec_msg(__SCHEMA__.fail(m, v_now, v_now, convert_to('lease expired', 'UTF8')), 0);
    END LOOP;
END $$;

-- op_dead_replay moves dead messages back to ready (due now, failures 0):
-- p_id, or up to p_max of the topic, oldest death first.
CREATE FUNCTION __SCHEMA__.op_dead_replay(p_now bigint, p_topic text, p_id text, p_max integer)
RETURNS SETOF __SCHEMA__.rec LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    m __SCHEMA__.message;
BEGIN
    IF p_id IS NOT NULL THEN
        SELECT * INTO m FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = p_id FOR UPDATE;
        IF NOT FOUND OR m.state <> 4 THEN
            RETURN NEXT ROW(2, p_topic, p_id, 0, 0, 0, 0, 0, 0, 0, 0, NULL, NULL, 0, 0, 0, NULL, NULL)::__SCHEMA__.rec;
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

CREATE FUNCTION __SCHEMA__.replay(m __SCHEMA__.message, v_now bigint) RETURNS __SCHEMA__.message
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM __SCHEMA__.dequeue(m);
    m.state := 2;
    m.due_at := v_now;
    m.failures := 0;
    m.dead_at := 0;
    m.updated_at := v_now;
    PERFORM __SCHEMA__.save(m);
    PERFORM __SCHEMA__.enqueue(m);
    RETURN m;
END $$;

-- op_dead_delete deletes dead messages: p_id (answers 0 when it is not
-- dead), or up to p_max of the topic, oldest death first.
CREATE FUNCTION __SCHEMA__.op_dead_delete(p_topic text, p_id text, p_max integer) RETURNS integer
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
          JOIN __SCHEMA__.message x ON x.topic = q.topic AND x.id = q.id
         WHERE q.topic = p_topic AND x.state = 4 AND x.dead_at = q.dead_at AND x.seq = q.seq
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

-- op_dedup_purge deletes up to p_max tombstones acked at or before
-- now - p_window, oldest first, then folds the counter rows.
CREATE FUNCTION __SCHEMA__.op_dedup_purge(p_now bigint, p_window bigint, p_max integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_topics text[];
    v_ids text[];
    n integer;
    c record;
BEGIN
    SELECT array_agg(s.topic), array_agg(s.id) INTO v_topics, v_ids FROM (
        SELECT t.topic, t.id FROM __SCHEMA__.tombstone t
         WHERE t.acked_at <= v_now - p_window
         ORDER BY t.acked_at, t.seq
         LIMIT p_max
           FOR UPDATE SKIP LOCKED) s;
    n := coalesce(array_length(v_ids, 1), 0);
    IF n > 0 THEN
        FOR c IN
            WITH gone AS (
                DELETE FROM __SCHEMA__.tombstone t
                 USING unnest(v_topics, v_ids) AS k(topic, id)
                 WHERE t.topic = k.topic AND t.id = k.id
                RETURNING t.topic)
            SELECT g.topic, count(*) AS n FROM gone g GROUP BY g.topic
        LOOP
            PERFORM __SCHEMA__.count_add(c.topic, 0, 0, 0, 0, -c.n);
        END LOOP;
    END IF;
    PERFORM __SCHEMA__.count_compact();
    RETURN n;
END $$;

-- op_rate_take is a token bucket on the database's clock, so a topic's
-- rate limit holds across every server (store.RateLimiter). p_n < 0 gives
-- -p_n tokens back. A clock that went back refills nothing until it
-- passes the stored ts.
CREATE FUNCTION __SCHEMA__.op_rate_take(p_now bigint, p_topic text, p_n integer, p_rate double precision, p_burst integer,
    OUT granted integer, OUT retry_us bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    v_tok double precision;
    v_ts bigint;
BEGIN
    SELECT b.tokens, b.ts INTO v_tok, v_ts FROM __SCHEMA__.rate_bucket b WHERE b.topic = p_topic FOR UPDATE;
    IF NOT FOUND THEN
        INSERT INTO __SCHEMA__.rate_bucket (topic, tokens, ts) VALUES (p_topic, p_burst, v_now) ON CONFLICT DO NOTHING;
        SELECT b.tokens, b.ts INTO v_tok, v_ts FROM __SCHEMA__.rate_bucket b WHERE b.topic = p_topic FOR UPDATE;
    END IF;
    IF v_now > v_ts THEN
        v_tok := least(p_burst, v_tok + (v_now - v_ts) * p_rate / 1000);
        v_ts := v_now;
    END IF;
    granted := 0;
    IF p_n < 0 THEN
        v_tok := least(p_burst, v_tok - p_n);
    ELSE
        granted := least(p_n, floor(v_tok))::integer;
        v_tok := v_tok - granted;
    END IF;
    retry_us := 0;
    IF p_n > 0 AND granted < p_n THEN
        retry_us := ceil((1 - v_tok) * 1000000 / p_rate)::bigint;
    END IF;
    UPDATE __SCHEMA__.rate_bucket b SET tokens = v_tok, ts = v_ts WHERE b.topic = p_topic;
END $$;

-- Topics with their counts and due times: what TopicGet and TopicList read.
CREATE VIEW __SCHEMA__.topic_info AS
SELECT t.name, t.settings,
       coalesce(c.scheduled, 0)::bigint AS scheduled, coalesce(c.ready, 0)::bigint AS ready,
       coalesce(c.inflight, 0)::bigint AS inflight, coalesce(c.dead, 0)::bigint AS dead,
       coalesce(c.acked, 0)::bigint AS acked,
       coalesce((SELECT q.due_at FROM __SCHEMA__.q_scheduled q WHERE q.topic = t.name ORDER BY q.due_at, q.seq LIMIT 1), 0) AS next_due,
       coalesce((SELECT q.due_at FROM __SCHEMA__.q_ready q WHERE q.topic = t.name ORDER BY q.due_at, q.seq LIMIT 1), 0) AS oldest_ready,
       coalesce((SELECT min(q.lease_until) FROM __SCHEMA__.q_inflight q WHERE q.topic = t.name), 0) AS next_lease_expiry
  FROM __SCHEMA__.topic t
  LEFT JOIN LATERAL (
       SELECT sum(x.scheduled) AS scheduled, sum(x.ready) AS ready, sum(x.inflight) AS inflight,
              sum(x.dead) AS dead, sum(x.acked) AS acked
         FROM __SCHEMA__.topic_count x WHERE x.topic = t.name) c ON true;

-- delayq_send sends one message from SQL, inside the caller's
-- transaction: the message exists if and only if that transaction
-- commits, and the running servers are notified at commit (NOTIFY is
-- transactional). Any language with a PostgreSQL driver can use it:
--
--   SELECT * FROM delayq.delayq_send('orders', 'order-42', '\x7b7d'::bytea, 5000);
--   SELECT * FROM delayq.delayq_send(topic => 'orders', id => NULL, payload => convert_to('{}', 'UTF8'),
--                                    headers => '{"content-type": "application/json"}',
--                                    deliver_at => now() + interval '1 hour');
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
    delay_ms     bigint DEFAULT 0,
    headers      jsonb DEFAULT NULL,
    max_attempts integer DEFAULT NULL,
    deliver_at   timestamptz DEFAULT NULL)
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
        ARRAY[v_due], ARRAY[v_relative], ARRAY[v_delay], ARRAY[v_attempts], ARRAY[delayq_send.id IS NULL], true);
    message_id := r.id;
    duplicate := r.status = 1;
    due_at := to_timestamp(r.due_at / 1000.0);
    RETURN NEXT;
END $$;
REVOKE ALL ON FUNCTION __SCHEMA__.delayq_send(text, text, bytea, bigint, jsonb, integer, timestamptz) FROM PUBLIC;
