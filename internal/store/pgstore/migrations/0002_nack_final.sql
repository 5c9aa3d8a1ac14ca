-- op_nack_final records a failure of a leased message and moves it to dead
-- letters at once, whatever attempts it has left: a handler that knows a
-- retry cannot succeed ("skip retry"). An addition only: servers of the
-- previous version keep working on this schema.
CREATE FUNCTION __SCHEMA__.op_nack_final(p_now bigint, p_topic text, p_id text, p_receipt text, p_error bytea)
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
    m.receipt := NULL;
    m.lease_until := 0;
    m.updated_at := v_now;
    m.state := 4;
    m.dead_at := v_now;
    PERFORM __SCHEMA__.save(m);
    PERFORM __SCHEMA__.enqueue(m);
    RETURN NEXT __SCHEMA__.rec_msg(m, 0);
END $$;
