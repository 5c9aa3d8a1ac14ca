-- Fills message of dq8chk and dq9 with :n messages of topic bench each,
-- with ids as each version generates them (random UUIDs; version 7
-- UUIDs of the last hour's milliseconds, in send order), for WAL per
-- send on a large table: psql -v n=500000 -f fill.sql, then
-- RESET=no sh run.sh … send8 send9 (run.sh otherwise empties the tables).
TRUNCATE dq8chk.message, dq8chk.q_scheduled, dq8chk.topic_count, dq9.message, dq9.q_scheduled, dq9.q_ready, dq9.topic_count;
INSERT INTO dq8chk.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
SELECT 'bench', gen_random_uuid()::text, nextval('dq8chk.seq'), 1, m + 3600000, m, m, 25, '\x7b7d', 0
  FROM (SELECT dq8chk.now_ms() - 3600000 + g::bigint * 3600000 / :n AS m FROM generate_series(1, :n) g) x;
INSERT INTO dq9.message (topic, id, seq, state, due_at, created_at, updated_at, max_attempts, payload, priority)
SELECT 'bench', dq9.uuid7(m), nextval('dq9.seq'), 1, m + 3600000, m, m, 25, '\x7b7d', 0
  FROM (SELECT dq9.now_ms() - 3600000 + g::bigint * 3600000 / :n AS m FROM generate_series(1, :n) g) x;
VACUUM ANALYZE dq8chk.message, dq9.message;
