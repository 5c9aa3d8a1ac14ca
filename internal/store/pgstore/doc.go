// Package pgstore is the PostgreSQL backend of store.Store (and
// store.Notifier, store.Clock, store.RateLimiter): delayq's state lives in
// tables of one schema, so any number of delayq servers share one queue,
// and applications can send messages inside their own transactions.
//
//	s, err := pgstore.Open(ctx, pgstore.Options{URL: "postgres://delayq@db:5432/app", Schema: "delayq"})
//
// Options.URL is a pgx connection string (postgres://… or key=value;
// pgx's parameters such as sslmode, connect_timeout and pool_max_conns
// apply), or Options.Pool a ready pgxpool. Errors and logs show the URL
// with its passwords hidden (RedactURL). Connections run in read committed
// isolation (the operations' locking is written for it) with
// application_name "delayq" and, unless the URL sets jit, with JIT off
// (the store's statements read a handful of rows; compiling one costs
// tens of milliseconds). A transaction pooler (pgbouncer in
// transaction mode) cannot carry LISTEN; use session pooling or a direct
// connection.
//
// # Schema
//
// Every object lives in Options.Schema (default "delayq"), created and
// upgraded by embedded, numbered migrations (migrations/*.sql; see
// "Migrations"). The layout is shaped by the classic traps of a queue in
// a table: every message is inserted, updated several times and deleted,
// which leaves dead tuples in the heap and dead entries in every index,
// and the queue's head, where consumers look, is where the dead entries
// pile up.
//
//	message      one row per live message (scheduled, ready, inflight,
//	             dead): payload, headers, state, times, counts, receipt.
//	             Its only index is the primary key (topic, id), which
//	             never changes, so a state change updates unindexed
//	             columns only: a HOT update, which adds no index entries
//	             and whose old version the next visitor of the page prunes,
//	             as long as the page has room (fillfactor 70). A row
//	             past PostgreSQL's TOAST threshold (about 2 KB) has its
//	             payload compressed or moved to TOAST until it is under
//	             toast_tuple_target (256 bytes), so an update of such a
//	             message copies a narrow row; smaller payloads stay in
//	             the row and each update copies them.
//	q_scheduled  (topic, due_at, seq) -> id     the order of each state,
//	q_ready      (topic, due_at, seq) -> id     in narrow tables of their
//	             own; q_ready also (topic, priority, due_at, seq), the
//	             lease order (migrations/0003_priority.sql)
//	q_inflight   (lease_until, seq) -> topic, id; and (topic, lease_until)
//	q_dead       (topic, dead_at, seq) -> id
//	             A state change deletes the message's row from one and
//	             inserts it into another: the churn is confined to these
//	             small tables, which autovacuum visits often (scale factor
//	             0.01, no cost delay).
//	tombstone    acked messages, without payload or headers, kept for the
//	             dedup window, indexed by (acked_at, seq), with the receipt
//	             that acked them (migrations/0011_tombstone_receipt.sql;
//	             none on older tombstones). An ack moves a
//	             message here, so message holds live messages only; the
//	             table fills in ack order and is purged oldest first, in
//	             batches (DedupPurge), so vacuum hands its pages back to
//	             new tombstones.
//	topic        name -> settings (the engine's blob).
//	topic_count  per-state counts, striped (see "Counts").
//	schedule     recurring schedules; rate_bucket: rate-limit buckets.
//	delayq_schema_version  the migrations applied.
//
// Every operation is one call of a PL/pgSQL function of the schema
// (op_insert, op_lease, op_ack_many, …, in migrations/0001_init.sql and
// replaced by later migrations where they changed): one
// round trip, one transaction, every check and write inside it, as the
// Redis store's Lua scripts. They answer rows of the type rec: a status
// (ok, duplicate, not found, conflict) and the record.
//
// # Concurrency
//
// Any number of servers run the same functions on the same rows. The lock
// of a message is its message row. Operations on one message (ack, nack,
// extend, cancel, reschedule, replay) lock it (SELECT … FOR UPDATE) before
// they look at its state or receipt. Operations on "the next n" —
// promote, lease, expire leases, the Max forms of replay and delete, and
// the tombstone purge — lock candidates with FOR UPDATE SKIP LOCKED:
// servers that promote or lease the same topic at once take different
// messages and never wait for each other. A candidate that another
// transaction changed between the snapshot and the lock is re-checked on
// its new version (its state, due time and Seq must still match its queue
// row), so a message is never leased twice. The queue rows of locked
// messages are then changed by separate statements, which read a fresh
// snapshot. Batches that lock several named messages (ack many, insert)
// take them in id order, so two of them do not deadlock. One narrow race
// remains for inserts (schema version 6): a batch goes back, after its
// set-based insert, to an id that a live message held, and inserts it if
// that message was cancelled or deleted in between; if another
// transaction is inserting that id at that moment and waits for one of
// the batch's later ids, PostgreSQL ends one of them with a deadlock
// error (40P01). The store runs such a send again (up to 3 times, as for
// a serialization failure); an application calling delayq_send_many in
// its own transaction retries it as any other deadlock.
//
// Receipts are fenced as on the other engines: a lease's receipt is the
// lease call's random token and the delivery count, and ack, nack and
// extend succeed only while the message is inflight with that receipt, so
// a consumer whose lease expired (and was handed to another) cannot ack
// or nack the new delivery.
//
// # Counts
//
// Counts per state are kept incrementally (TopicGet never scans), but not
// in one row per topic: every send, lease and ack of a topic would queue
// on that row's lock, and a transaction that sent with delayq_send and
// stays open would hold up every other one until it ends. Instead a state
// change adds its deltas to any counter row of the topic that no other
// transaction holds (FOR UPDATE SKIP LOCKED), or inserts a new one; so
// nothing ever waits, and a topic has about as many rows as it had
// concurrent transactions. A send (schema version 8) does not even look
// for a row: it inserts one of its own (a new stripe number), so a send
// reads and locks no counter row. TopicGet sums them. A subscribed store
// (a server's) folds a topic's rows back into one every second once it
// has more than 256 (5,000 per transaction, for at most 0.5 s), and so
// does TopicList when its store has not folded within the second;
// DedupPurge, which the engine runs every minute, folds every topic's.
// The rows are tiny and updated constantly, so the
// table has fillfactor 20 for HOT updates.
//
// # Time
//
// By default (TimeDB) every instant a decision depends on — is a message
// due, has a lease expired, how old is a tombstone, the Created/Updated/
// Dead/AckedAt stamps, a rate bucket's refill — is computed in SQL from
// the database server's clock (now_ms(): clock_timestamp() in ms), read
// inside the function that decides; the call's Now is ignored. Delays,
// retry delays, lease lengths and the dedup window reach the functions as
// durations. Several servers with differently wrong clocks therefore
// agree, and a message is never released before its due time by the
// database's clock. StoreNow reads that clock and PromoteResult.Now
// reports the one a promotion judged by, so the engine aims its timers at
// the database's instants (store.Clock).
//
// TimeCaller uses each call's Now instead. It exists so the conformance
// suite can drive time, and for a single server that prefers its own
// clock. The tests also run the suites on the TimeDB path, by replacing
// now_ms() in the test's schema with a clock the test sets.
//
// # Notifications
//
// Subscribe listens on the channel "<schema>.notify" on a connection of
// its own. After a send, reschedule, nack, replay, lease expiry or
// promotion that leaves messages scheduled or ready, the store sends one
// notification per topic, "topic\tdueMS" with the call's earliest due
// time, 0 meaning ready now (as the Redis store publishes). It sends them
// after its transaction committed, in a transaction of their own:
// PostgreSQL serializes the commits of all notifying transactions on one
// lock held through their WAL flush, so notifying inside every operation
// would line up every commit of every server behind one disk flush at a
// time (measured: concurrent single sends stopped scaling with callers). A
// transaction that only notifies writes no WAL and holds that lock
// briefly. delayq_send does notify inside the caller's transaction, so its
// message is announced exactly when it commits; such sends serialize at
// commit as described, which batching (one transaction, many sends)
// amortizes.
//
// Subscribe reconnects by itself with backoff (100 ms to 5 s, jittered)
// and calls subscribed each time it listens again, so the engine re-reads
// every topic after a gap. Every subscribed store also sends an empty
// heartbeat notification every 10 s, and a listener that hears nothing
// for 30 s takes its connection for dead and reconnects (TCP keepalive
// also probes it). Notifications sent while a listener reconnects are
// lost; the engines' safety sweep (every 5 s) covers them.
//
// # Transactional send
//
// The function delayq_send(topic, id, payload, delay_ms, headers,
// max_attempts, deliver_at) sends one message inside the caller's
// transaction from any language: it exists if and only if that
// transaction commits. It validates its arguments as the HTTP API does
// (SQLSTATE 22023 otherwise) and runs as its owner (SECURITY DEFINER), so
// an application role needs only USAGE on the schema and EXECUTE on it.
// SendTx (pgx.Tx) and SendSQLTx (*sql.Tx, any driver) call it from Go;
// SendManyTx calls delayq_send_many (schema version 6), which sends a
// batch in one call. See docs/postgres.md.
//
// # Migrations
//
// Open creates the schema or upgrades it to SchemaVersion, one migration
// per transaction, holding a session advisory lock so that servers
// starting together migrate once (the others wait, then find it done).
// With Options.NoMigrate it only checks the version and refuses to open a
// schema that is missing or older (run `delayq migrate`); a schema newer
// than the build is refused either way (store.ErrNewerFormat).
//
// # Durability
//
// A call that returned nil committed; whether the commit survives a crash
// is the database's configuration (synchronous_commit, fsync, replication:
// with asynchronous replicas a failover loses what was not replicated).
// Leases, extends, promotions and expiries commit with synchronous_commit
// off for their own transaction (relaxed.go): a crash may undo them, which
// only means a message is promoted, delivered or expired again.
//
// # Unavailability
//
// Each call is bounded by Options.Timeout (default 2 s) as a whole: the
// wait for a pooled connection, connecting, and the statements. A
// database that is down or hung makes calls fail with an error wrapping
// store.ErrUnavailable within about one Timeout, and not with a context
// error (the caller's ctx did not end). Connections also carry a
// statement_timeout of twice Timeout, so a statement abandoned by its
// caller does not run on. A call cut short is ambiguous, as any timeout:
// its transaction may have committed. Nothing is retried.
//
// # Operating notes
//
// A subscribed store (a server's) vacuums the queue tables itself as
// their dead tuples gather (vacuum.go), since autovacuum visits them at
// most once per autovacuum_naptime and a lease passes the dead index
// entries left at the queue's head meanwhile; the other tables rely on
// autovacuum, and keep the churn's dead tuples between two of its visits
// (the churn tests, TestChurnBounded and TestChurnReport, measure both). The queue-head functions carry planner
// settings (migrations 0004, 0010) that keep them on the ordered index
// scan, and every message they take or check is a LATERAL subquery by
// full key (schema version 10): a connection keeps the plans it made at
// its first calls until the next ANALYZE, and plans made while a topic
// was small must not read the whole topic once it is large
// (TestOperationsReadByKeyWhenPlannedSmall). A ready message's q_ready
// row is looked up with its priority too (schema version 18): with
// statistics that say q_ready is empty, as a vacuum after a drain
// records them, a lookup without it could be planned on q_ready_lease,
// where only the topic bounds the scan
// (TestReadyLookupsWhenStatsSayEmpty).
//
// Long-running transactions anywhere in the database (an idle-in-
// transaction session, a long report) keep vacuum from removing the dead
// tuples of the queue tables, and scans of the queue's head slow down
// while they last: watch pg_stat_activity and set
// idle_in_transaction_session_timeout. The notification queue is shared
// by the database cluster; a session that LISTENs and stops reading can
// fill it (pg_notification_queue_usage()), after which notifying
// transactions fail — the store's own listeners always read.
package pgstore
