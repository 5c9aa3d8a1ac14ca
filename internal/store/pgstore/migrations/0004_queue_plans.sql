-- delayq schema, version 4: the plans of the queue-head scans are pinned.
--
-- Lease, promotion and lease expiry read a queue table's head in order
-- and join each row to its message by primary key, stopping after the
-- batch. The join's checks (m.due_at = q.due_at AND m.seq = q.seq)
-- repeat what the key already pairs, but the planner multiplies their
-- selectivities and expects about one row, so a LIMIT saves nothing in
-- its eyes: once a topic's queue rows are a large part of their table
-- (a backlog, or statistics taken during one), it chose a hash join over
-- a sequential scan of message — every live message of every topic and
-- every dead tuple since the last vacuum — then a sort. Measured by the
-- churn report (pgstore TestChurnReport, docs/benchmarks.md "Table
-- bloat"): a lease of a drained queue read 4,677 buffers (the whole
-- message heap) instead of 2, and the cost grows with the number of
-- scheduled messages. The functions now plan without hash and merge
-- joins, sequential scans and sorts where an alternative exists: the
-- ordered index scan of the queue, a nested loop on message's primary
-- key, stopping at the batch size. (A sort the result needs and no index
-- gives — the rows op_lease returns — still happens, at a cost the
-- setting inflates past jit_above_cost: JIT is off in these functions,
-- or it compiles that sort for seconds on every call.)
ALTER FUNCTION __SCHEMA__.op_lease(bigint, text, integer, bigint, text)
    SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_sort = off SET jit = off;
ALTER FUNCTION __SCHEMA__.op_promote(bigint, text, integer)
    SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_sort = off SET jit = off;
ALTER FUNCTION __SCHEMA__.op_expire(bigint, integer)
    SET enable_hashjoin = off SET enable_mergejoin = off SET enable_seqscan = off SET enable_sort = off SET jit = off;
