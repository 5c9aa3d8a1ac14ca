-- The full delayq_send (schema version 7) with its count write replaced:
-- schema dqd counts with an inserted row of its own (what version 8
-- does), dqn does not count at all. Both made by `delayq migrate
-- --postgres-schema dqd|dqn` first.
CREATE OR REPLACE FUNCTION dqd.count_add(p_topic text, d_sched bigint, d_ready bigint, d_inflight bigint, d_dead bigint, d_acked bigint)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF d_sched = 0 AND d_ready = 0 AND d_inflight = 0 AND d_dead = 0 AND d_acked = 0 THEN RETURN; END IF;
    INSERT INTO dqd.topic_count (topic, stripe, scheduled, ready, inflight, dead, acked)
    VALUES (p_topic, nextval('dqd.stripe'), d_sched, d_ready, d_inflight, d_dead, d_acked);
END $$;
CREATE OR REPLACE FUNCTION dqn.count_add(p_topic text, d_sched bigint, d_ready bigint, d_inflight bigint, d_dead bigint, d_acked bigint)
RETURNS void LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$;
