-- delayq schema, version 14: a message whose delivery failed (a nack, a
-- lease that ran out) keeps that delivery's receipt until its next lease.
--
-- Why: a client whose nack was done but whose answer it lost (a timeout,
-- a dropped connection, a server that went down after the commit)
-- retries it with the same receipt. The store answers that second nack
-- "conflict", as for any receipt that is not the current lease's; the
-- engine then reads the message and, when its receipt is the retried one
-- and its last error the retried nack's reason, answers the retry with
-- the message as the first nack left it instead of 409. Only an inflight
-- message's receipt is a lease (leased() checks the state as well), so
-- the receipt kept here acks, nacks and extends nothing.
--
-- fail (nacks and expiries) and op_nack_final are version 1's and 2's
-- without the line that cleared the receipt. Signatures, results and
-- grants are unchanged (CREATE OR REPLACE). A server of version 13 runs on
-- this schema until it restarts, when it refuses the newer version:
-- upgrade every server.

CREATE OR REPLACE FUNCTION __SCHEMA__.fail(m __SCHEMA__.message, v_now bigint, p_retry_at bigint, p_error bytea)
RETURNS __SCHEMA__.message LANGUAGE plpgsql AS $$
BEGIN
    PERFORM __SCHEMA__.dequeue(m);
    m.failures := m.failures + 1;
    m.last_error := nullif(p_error, ''::bytea);
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

CREATE OR REPLACE FUNCTION __SCHEMA__.op_nack_final(p_now bigint, p_topic text, p_id text, p_receipt text, p_error bytea)
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
    PERFORM __SCHEMA__.dequeue(m);
    m.failures := m.failures + 1;
    m.last_error := nullif(p_error, ''::bytea);
    m.lease_until := 0;
    m.updated_at := v_now;
    m.state := 4;
    m.dead_at := v_now;
    PERFORM __SCHEMA__.save(m);
    PERFORM __SCHEMA__.enqueue(m);
    RETURN NEXT __SCHEMA__.rec_msg(m, 0);
END $$;
