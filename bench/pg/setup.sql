-- pgbench variants of one send's row writes, on delayq's real tables
-- (schema "delayq", made by `delayq migrate`) and River's river_job
-- (schema "river", River's own migrations): see run.sh.
-- Each variant is one function call, as delayq_send is one call.
DROP SCHEMA IF EXISTS pgb CASCADE;
CREATE SCHEMA pgb;

-- What op_insert does for one message with a generated id (schema 7):
-- topic lookup, seq, message row, q_scheduled row, count stripe
-- (count_add: SELECT … FOR UPDATE SKIP LOCKED, then UPDATE).
CREATE FUNCTION pgb.v3(p_topic text, p_payload bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE m delayq.message; v_now bigint := delayq.now_ms();
BEGIN
    PERFORM 1 FROM delayq.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN INSERT INTO delayq.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING; END IF;
    INSERT INTO delayq.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
    VALUES (p_topic, gen_random_uuid()::text, nextval('delayq.seq'), 1, v_now + 3600000, v_now, v_now, 25, p_payload, 0)
    ON CONFLICT DO NOTHING RETURNING * INTO m;
    INSERT INTO delayq.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
    PERFORM delayq.count_add(p_topic, 1, 0, 0, 0, 0);
END $$;

-- (i) message + queue row, no count write.
CREATE FUNCTION pgb.v2(p_topic text, p_payload bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE m delayq.message; v_now bigint := delayq.now_ms();
BEGIN
    PERFORM 1 FROM delayq.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN INSERT INTO delayq.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING; END IF;
    INSERT INTO delayq.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
    VALUES (p_topic, gen_random_uuid()::text, nextval('delayq.seq'), 1, v_now + 3600000, v_now, v_now, 25, p_payload, 0)
    ON CONFLICT DO NOTHING RETURNING * INTO m;
    INSERT INTO delayq.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
END $$;

-- (ii) one row: the message row only (as if it were the queue row too;
-- a real one would carry a second index, (topic, state, due_at, seq) —
-- v1i adds it).
CREATE FUNCTION pgb.v1(p_topic text, p_payload bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_now bigint := delayq.now_ms();
BEGIN
    PERFORM 1 FROM delayq.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN INSERT INTO delayq.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING; END IF;
    INSERT INTO delayq.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
    VALUES (p_topic, gen_random_uuid()::text, nextval('delayq.seq'), 1, v_now + 3600000, v_now, v_now, 25, p_payload, 0)
    ON CONFLICT DO NOTHING;
END $$;

-- (iii) message + queue row + an insert-only count row (a stripe number
-- of its own, folded later by count_compact).
CREATE FUNCTION pgb.vd(p_topic text, p_payload bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE m delayq.message; v_now bigint := delayq.now_ms();
BEGIN
    PERFORM 1 FROM delayq.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN INSERT INTO delayq.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING; END IF;
    INSERT INTO delayq.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
    VALUES (p_topic, gen_random_uuid()::text, nextval('delayq.seq'), 1, v_now + 3600000, v_now, v_now, 25, p_payload, 0)
    ON CONFLICT DO NOTHING RETURNING * INTO m;
    INSERT INTO delayq.q_scheduled (topic, due_at, seq, id) VALUES (m.topic, m.due_at, m.seq, m.id);
    INSERT INTO delayq.topic_count (topic, stripe, scheduled) VALUES (p_topic, nextval('delayq.stripe'), 1);
END $$;

-- (ii) with the index a queue-row-in-the-message-row design needs (the
-- order a lease works in): a copy of message with one more index.
CREATE TABLE pgb.message1 (LIKE delayq.message INCLUDING ALL);
CREATE INDEX message1_queue ON pgb.message1 (topic, state, priority, due_at, seq);
CREATE FUNCTION pgb.v1i(p_topic text, p_payload bytea) RETURNS void LANGUAGE plpgsql AS $$
DECLARE v_now bigint := delayq.now_ms();
BEGIN
    PERFORM 1 FROM delayq.topic x WHERE x.name = p_topic;
    IF NOT FOUND THEN INSERT INTO delayq.topic (name) VALUES (p_topic) ON CONFLICT DO NOTHING; END IF;
    INSERT INTO pgb.message1 (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
    VALUES (p_topic, gen_random_uuid()::text, nextval('delayq.seq'), 1, v_now + 3600000, v_now, v_now, 25, p_payload, 0)
    ON CONFLICT DO NOTHING;
END $$;
