-- Empties the tables the variants write, so every run starts alike (a
-- larger message primary key means more leaf pages written whole after
-- a checkpoint, which otherwise favours the variant that ran on the
-- smaller table).
TRUNCATE delayq.message, delayq.q_scheduled, delayq.topic_count, pgb.message1;
DO $$ BEGIN
  IF to_regnamespace('dqd') IS NOT NULL THEN TRUNCATE dqd.message, dqd.q_scheduled, dqd.topic_count; END IF;
  IF to_regnamespace('dqn') IS NOT NULL THEN TRUNCATE dqn.message, dqn.q_scheduled, dqn.topic_count; END IF;
  IF to_regnamespace('river') IS NOT NULL THEN TRUNCATE river.river_job; END IF;
END $$;
DO $$ BEGIN
  IF to_regnamespace('dq7') IS NOT NULL THEN TRUNCATE dq7.message, dq7.q_scheduled, dq7.topic_count; END IF;
  IF to_regnamespace('dq8chk') IS NOT NULL THEN TRUNCATE dq8chk.message, dq8chk.q_scheduled, dq8chk.topic_count; END IF;
  IF to_regnamespace('dq9') IS NOT NULL THEN TRUNCATE dq9.message, dq9.q_scheduled, dq9.q_ready, dq9.topic_count; END IF;
  IF to_regnamespace('dq12') IS NOT NULL THEN TRUNCATE dq12.message, dq12.q_scheduled, dq12.q_ready, dq12.topic_count; END IF;
  IF to_regnamespace('dq13') IS NOT NULL THEN TRUNCATE dq13.message, dq13.q_scheduled, dq13.q_ready, dq13.topic_count; END IF;
END $$;
