-- delayq_send (through op_insert with p_notify) notifies only for a
-- message due within 60 s (or at once). PostgreSQL serializes the commits
-- of notifying transactions (a lock taken at commit to order the queue of
-- notifications), which held transactional sends with one message each to
-- about a third of the rate of the same transactions without a
-- notification. A message due later is armed by the servers' safety
-- sweep, which reads every topic's next due time every 5 s. CREATE OR
-- REPLACE keeps the function's grants.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_insert(
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
    -- Only a message due within a minute needs a wake-up: the servers'
    -- safety sweep re-reads every topic's next due time every 5 s and arms
    -- its timer. A notifying transaction's commit takes a lock that
    -- serializes it with every other notifying commit, so notifying for
    -- messages due later would cap transactional sends at that rate.
    IF p_notify AND v_earliest >= 0 AND v_earliest - v_now < 60000 THEN
        PERFORM pg_notify('__CHANNEL__', p_topic || E'\t' || v_earliest);
    END IF;
    RETURN QUERY SELECT * FROM unnest(v_out);
END $$;
