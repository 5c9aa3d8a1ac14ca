// Package mysqlstore is the MySQL/MariaDB store.Store: InnoDB tables
// under a table prefix (default "delayq_") in the database the URL names,
// shared by any number of servers. It is also a store.Clock (every
// instant comes from the database's clock) and a store.Notifier (by
// polling per-topic change counters: MySQL has no NOTIFY) and a
// store.RateLimiter (token buckets in a table, on the database's clock).
//
// Schema: versioned SQL files (migrations/), applied under the named lock
// GET_LOCK('<db>.<prefix>migrate') and recorded in <prefix>schema_version.
// A message's row is updated in place for its whole life; narrow
// per-state queue tables clustered in read order ((topic, due, seq) and
// the like; ready in lease order, (topic, priority, due, seq), since a
// secondary key's delete-marked records each cost a look at their row
// until purge removes them) are read with FOR UPDATE SKIP LOCKED; acked
// tombstones live in their own table, purged in batches. Transactions run
// at READ COMMITTED, so no gap locks; deadlocks and lock-wait timeouts are
// retried. The store runs them on a pooled connection itself (conntx), so
// that BEGIN, COMMIT and writes whose results nothing reads ride with
// other statements instead of taking round trips of their own.
//
// Time: with TimeDB (the default) each operation reads
// FLOOR(UNIX_TIMESTAMP(NOW(3))*1000) once, in its transaction, and
// computes every instant from it; the calls' Nows are ignored. TimeCaller
// uses the calls' Nows, for tests that drive time.
//
// Notifications: every change that makes a message scheduled or ready
// bumps its topic's ver in the same transaction; Subscribe polls the
// topics' vers every PollInterval (50 ms), so a change committed anywhere
// is seen within that plus one query.
//
// Transactional send: the stored procedures <prefix>send and, with a
// priority, <prefix>send_priority, and SendTx on an application's *sql.Tx. docs/mysql.md has the operator's view.
package mysqlstore
