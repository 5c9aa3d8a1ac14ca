-- delayq schema, version 17: vacuum never truncates the tables that churn.
--
-- Why: a vacuum that finds empty pages at the end of a table truncates
-- them, and for that takes an ACCESS EXCLUSIVE lock on the table: every
-- send, lease and ack touching it waits (up to 20 ms before vacuum gives
-- way, and vacuum first retries the lock every 50 ms for up to 5 s). The
-- queue tables empty their ends all the time — their rows are deleted in
-- queue order and their freed pages are filled again by the next sends —
-- so the truncation buys nothing that lasts, and it is a lock on the hot
-- path at every autovacuum visit (one manual VACUUM of q_scheduled under
-- 1,000 sends/s took 0.21 s to truncate 32 pages; with TRUNCATE false,
-- under 0.01 s). The space a burst leaves stays in the table and is
-- reused by the next messages; VACUUM (TRUNCATE true) returns it to the
-- operating system when wanted.
--
-- Storage parameters only: no function or result changes. A server of
-- version 16 runs on this schema until it restarts, when it refuses the
-- newer version: upgrade every server.
ALTER TABLE __SCHEMA__.message SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.q_scheduled SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.q_ready SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.q_inflight SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.q_dead SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.tombstone SET (vacuum_truncate = false);
ALTER TABLE __SCHEMA__.topic_count SET (vacuum_truncate = false);
