-- delayq schema, version 11: an acked tombstone keeps the receipt that
-- acked it (store.Record.Receipt of an acked record; LeaseUntil stays
-- zero).
--
-- Why: a client whose ack was done but whose answer it lost (a timeout, a
-- dropped connection, a server that went down after the commit) retries
-- it with the same receipt. The store still answers that second ack
-- "conflict"; the engine then reads the tombstone and, when its receipt
-- is the retried one, answers the retry as the first ack was (ok) instead
-- of 409, which would tell the client the message was handed out again. A
-- receipt of another delivery is still a conflict.
--
-- tombstone gains a nullable receipt column (no default: a catalog change,
-- no table rewrite). Tombstones written before this version, and any not
-- made by an ack, have none (NULL, read as an empty receipt). The ack
-- paths write (l.m).receipt, the receipt leased() just matched, and
-- rec_tomb (message get, a send's duplicate of an acked id) answers it.
--
-- Signatures, results, attributes and grants are unchanged (CREATE OR
-- REPLACE); the rec type is unchanged. A server of version 10 runs on
-- this schema (its acks write the receipt through these functions, its
-- gets read it) until it restarts, when it refuses the newer version:
-- upgrade every server.

ALTER TABLE __SCHEMA__.tombstone ADD COLUMN receipt text;

-- rec_tomb as in version 3, with the tombstone's receipt.
CREATE OR REPLACE FUNCTION __SCHEMA__.rec_tomb(t __SCHEMA__.tombstone, st integer) RETURNS __SCHEMA__.rec
LANGUAGE sql IMMUTABLE AS $$
    SELECT ROW(st, t.topic, t.id, t.seq, 5::smallint, t.due_at, t.created_at, t.updated_at,
               t.deliveries, t.failures, t.max_attempts, t.last_error, t.receipt,
               0::bigint, 0::bigint, t.acked_at, NULL::bytea, NULL::bytea, t.priority)::__SCHEMA__.rec
$$;

-- ack as in version 3, keeping the receipt. No function of the schema
-- calls it since version 10 (op_ack_many acks inline); it is kept in step
-- so that no ack path writes a tombstone without its receipt.
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
    INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority, receipt)
    VALUES (p_topic, p_id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error, (l.m).priority, (l.m).receipt)
    ON CONFLICT (topic, id) DO UPDATE
       SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
           acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
           max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority,
           receipt = EXCLUDED.receipt;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, 0, 0, 1);
    RETURN 0;
END $$;

-- op_ack_many as in version 10, keeping the receipt.
CREATE OR REPLACE FUNCTION __SCHEMA__.op_ack_many(p_now bigint, p_topic text, p_ids text[], p_receipts text[])
RETURNS SETOF integer LANGUAGE plpgsql AS $$
DECLARE
    v_now bigint := coalesce(p_now, __SCHEMA__.now_ms());
    n integer := coalesce(array_length(p_ids, 1), 0);
    v_status integer[] := array_fill(NULL::integer, ARRAY[n]);
    v_acked bigint := 0;
    k record;
    l record;
BEGIN
    FOR k IN SELECT u.id, u.o FROM unnest(p_ids) WITH ORDINALITY AS u(id, o) ORDER BY u.id COLLATE "C", u.o LOOP
        l := __SCHEMA__.leased(p_topic, k.id, p_receipts[k.o]);
        IF (l.r).status IS NOT NULL THEN
            v_status[k.o] := (l.r).status;
            CONTINUE;
        END IF;
        DELETE FROM __SCHEMA__.q_inflight q WHERE q.lease_until = (l.m).lease_until AND q.seq = (l.m).seq;
        DELETE FROM __SCHEMA__.message x WHERE x.topic = p_topic AND x.id = k.id;
        INSERT INTO __SCHEMA__.tombstone AS t (topic, id, seq, due_at, created_at, updated_at, acked_at, deliveries, failures, max_attempts, last_error, priority, receipt)
        VALUES (p_topic, k.id, (l.m).seq, (l.m).due_at, (l.m).created_at, v_now, v_now, (l.m).deliveries, (l.m).failures, (l.m).max_attempts, (l.m).last_error, (l.m).priority, (l.m).receipt)
        ON CONFLICT (topic, id) DO UPDATE
           SET seq = EXCLUDED.seq, due_at = EXCLUDED.due_at, created_at = EXCLUDED.created_at, updated_at = EXCLUDED.updated_at,
               acked_at = EXCLUDED.acked_at, deliveries = EXCLUDED.deliveries, failures = EXCLUDED.failures,
               max_attempts = EXCLUDED.max_attempts, last_error = EXCLUDED.last_error, priority = EXCLUDED.priority,
               receipt = EXCLUDED.receipt;
        v_status[k.o] := 0;
        v_acked := v_acked + 1;
    END LOOP;
    PERFORM __SCHEMA__.count_add(p_topic, 0, 0, -v_acked, 0, v_acked);
    FOR i IN 1..n LOOP
        RETURN NEXT v_status[i];
    END LOOP;
END $$;
