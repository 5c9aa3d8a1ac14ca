// Package redisstore is the Redis backend of store.Store (and
// store.Notifier): delayq's state lives in Redis or Redis Cluster, so any
// number of delayq servers share one queue.
//
//	s, err := redisstore.Open(ctx, redisstore.Options{URL: "redis://127.0.0.1:6379/0"})
//
// Operators: URL forms, the Redis settings delayq needs, durability per
// persistence mode, memory and failure behaviour are in docs/redis.md.
// This comment is the design, for whoever changes the code.
//
// # Key layout
//
// A topic's messages are spread over P partitions (Options.Partitions,
// default 4 on a Cluster and 1 on one server, fixed at the first Open of
// a prefix) by FNV-1a(id) mod P, so
// a hot topic uses P Cluster slots and dedup by id stays inside one
// partition. Every key of a partition carries the hash tag {topic#p};
// topic names and ids have no '{', '}' or '#', so no user input can move a
// key to another slot. With prefix "dq":
//
//	dq:{orders#2}:sched   ZSET   scheduled  score DueAt       member ctr62 .. id
//	dq:{orders#2}:ready   ZSET   ready      score DueAt       member  "
//	                             (priority 0; before priorities, all)
//	dq:{orders#2}:ready:7 ZSET   ready of priority 7 (any p > 0), as ready
//	dq:{orders#2}:ready:prios ZSET the priorities p > 0 whose ready:p is
//	                             not empty (score and member p)
//	dq:{orders#2}:lease   ZSET   inflight   score LeaseUntil  member  "
//	dq:{orders#2}:dead    ZSET   dead       score DeadAt      member  "
//	dq:{orders#2}:acked   ZSET   tombstones score AckedAt     member  "
//	dq:{orders#2}:m:<id>  STRING the message: a 46-byte binary header
//	                             (state, Seq, times, counts), a priority
//	                             byte only when not 0, a sized area
//	                             holding receipt and last error,
//	                             headers, then the payload (recHeader
//	                             in codec.go)
//	dq:{orders}:meta      HASH   seq (the topic's Seq counter), tn (its
//	                             topic number), settings (the engine's blob)
//	dq:{orders}:rate      HASH   tok, ts: the topic's rate-limit token bucket
//	dq:{#sched}:names     SET    every recurring schedule's name
//	dq:{#sched}:s:<name>  HASH   spec, last (LastTick), cat, uat
//	dq:topics             SET    every topic name (the registry)
//	dq:tn                 STRING topic-number counter
//	dq:config             HASH   partitions, format ("2")
//	dq:notify             Pub/Sub channel (not a key)
//
// Memory shaped the message keys: one STRING per message, because a
// payload above hash-max-listpack-value turns a hash into a hashtable with
// two SDS strings per field. The id is in the key and the index member
// only. ctr62 is the topic-local part of Seq in an order-preserving base-62
// form ('0' + digit count, then the digits), so each index, ordered by
// score and then member bytes, is in (time, Seq) order. Times are 6 signed
// bytes: instants beyond ±2^47 ms are refused. Counts per state are the
// indexes' ZCARDs, which cannot drift because every state change moves the
// member inside its script.
//
// # Scripts
//
// Every state transition of a partition is one Lua script, sent as its
// function in delayq's function library (FCALL; library.go: loaded when a
// server lacks it, and EVALSHA/EVAL where functions are refused),
// documented with its KEYS, ARGV and reply beside the Go method that
// runs it (insert, send, cancel and
// reschedule in message.go; promote in promote.go; lease, ack, nack,
// extend and expire in lease.go; the single-server promote and lease over
// all partitions in oneserver.go; the lease of due scheduled messages
// (store.DueLeaser) in leasedue.go; dead letters and the dedup purge in
// dead.go; topic info in topic.go; peeks in merge.go; the rate limiter in
// ratelimit.go; schedules in schedule.go). All keys a script that may run
// on a Cluster touches share the partition's hash tag, so none is
// CROSSSLOT; there Redis 7 checks that the message keys a script names
// from ARGV are in the declared slot. Only the single-server scripts
// (sendScript, oneserver.go) span slots. Scripts validate before they
// write. At maxmemory only the insert scripts are refused (flags in
// lua.go): the others move existing messages, so consumers can drain a
// full Redis.
//
// On a single server (Store.oneServer: a *redis.Client whose server is
// not in Cluster mode), where a script may touch keys of any slot, a send
// (sendScript), a promotion and a lease (oneserver.go) are each one script
// over all the topic's partitions: atomic, and the lease and promotion
// merge partitions exactly. A send and a promotion are one round trip,
// and so is a lease when a Redis TIME answered within the last second
// is kept; otherwise it peeks first (read-only, one script over all
// partitions: peekAnyScript). Either gives the lease script a run-by
// instant on Redis's clock, after which it leases nothing (runby.go): a
// script sent to a Redis that stopped answering would otherwise run when
// Redis resumed and lease messages to a caller long gone. On a Cluster
// they keep to one partition's slot per script, as follows.
//
// The store is a store.DueLeaser: MessageLeaseDue's script (the same
// way) takes scheduled messages due by its now straight to
// inflight, as if promoted first, so a message released to a waiting
// long-poll costs one write script instead of a promotion and a lease;
// MessagePromoteGrace (the promotion scripts with a grace) promotes only
// what was left unleased for longer than the engine's grace.
//
// A promotion rewrites only the head of the record's header (state
// through UpdatedAt, SETRANGE), never the payload. A lease, an extension,
// a nack, a lease expiry, a reschedule and a dead replay rewrite the
// header and the receipt area (SETRANGE of the record's first ~100
// bytes) whenever the new receipt and last error fit the area, and
// otherwise the whole record once, with a larger area; an ack writes a
// small tombstone (the header, the receipt that acked it and the last
// error) from the record's first bytes (GETRANGE), never reading the
// payload. The scripts that answer the record still read it whole
// (GET): the caller gets the payload. Records written by format-2 builds
// (no area; formatVersion) are read as they are and rewritten whole, in
// the current layout, by their first such change.
//
// Not atomic on a Cluster, by design: registering a topic and reserving
// Seq numbers before an insert (other slots; a failure leaves an empty
// topic or a gap in Seq), and the settings put. A call that spans
// partitions there (an insert or ack batch, a lease of Max messages) is
// atomic per partition only.
//
// # Order
//
// Seq is tn<<44 | ctr: ctr counts the topic's inserts (one HINCRBY on the
// meta hash reserves a block per insert call), tn is the topic's number
// from dq:tn, so Seq is unique store-wide while a send touches only the
// topic's slots. Within a partition, promote takes messages in (DueAt,
// Seq) order and lease in (Priority, DueAt, Seq) order among those due,
// inside one script; a lease reads each priority's ready index (those
// listed in ready:prios) by score up to now, so a not-yet-due entry holds
// nothing back. Across partitions, on a single server, one script reads
// every partition's due heads, sorts them (comparing Seq counters as
// numbers: Lua compares strings by the server's locale) and takes the
// first; on a Cluster they peek at every head, merge in the same order and
// take each partition's share, and with several servers racing a peeked
// head may be gone, so the cross-partition order is best effort there.
//
// Priority 0 keeps the layout from before priorities (the ready key, no
// priority byte), so old data needs no migration. Per-priority keys
// rather than one ZSET scored priority·2^k + DueAt: a double holds 53
// bits, and DueAt (±2^47) with 8 bits of priority needs 56; and the
// ready index's head stays the oldest DueAt within each priority.
//
// # Time
//
// With TimeRedis (the default) every "now" a decision depends on is Redis
// TIME read inside the deciding script, and the Now of the call is
// ignored; instants that follow from it (a relative delay's due time, a
// retry time, a lease's end, the dedup cutoff) reach the scripts as
// durations. PromoteResult.Now reports the Redis time a promotion judged
// by, so the engine aims its timers by Redis's clock. TimeCaller uses each
// call's Now: for the conformance suite, and a single server that prefers
// its own clock.
//
// # Unavailability
//
// Each Store call derives one context deadline, now + Options.Timeout, at
// entry, and go-redis applies it to the pool wait, a new connection's
// handshake and every read and write (ContextTimeoutEnabled), so a call
// that makes several round trips still fails within one Timeout with
// store.ErrUnavailable. The calls that read every topic (LeaseExpire,
// DedupPurge, TopicList) get one Timeout per round trip instead. Nothing
// is retried: MaxRetries is -1 and every script call is a NoRetry command
// (a ClusterClient would otherwise resend on a read timeout), because a
// script whose answer was lost may have run. MOVED and ASK are followed.
// The clients Open builds from a URL dial afresh on every call while Redis
// is down, so the first call after it returns succeeds.
//
// # Cluster
//
// With one master down, lease, promotion and lease expiry treat
// partitions independently: each master's share is its own pipeline (in
// one pipeline go-redis would fail every call when one master is down),
// the peeks get half the call's time so a hung master leaves time to act
// on the others, and a failed partition is left out and logged (skipped).
// A lease returns every record it leased and fails only when it leased
// nothing; a promotion's NextDue is capped at Now + 1 s so the missing
// partitions are retried. Sends, ack batches, counts and dead-letter calls
// stay all-or-nothing.
//
// # Notifications
//
// After a call that leaves messages scheduled or ready, "topic\tdueMS"
// is published on "<prefix>:notify"; Subscribe hands them to the engine,
// and reports when it is live so the engine re-reads every topic. The
// insert, promote and lease expiry scripts publish it themselves (PUBLISH names no key,
// so a script on a Cluster may call it, and it reaches every node's
// subscribers), saving a round trip per send and per promotion: one
// notification per script that inserted (on a Cluster, one per partition
// of a batch) or promoted something, none for duplicates. Redis writes
// the AOF (with appendfsync always, fsyncs it) before it sends any client
// output, Pub/Sub messages included, so nobody hears of a write that is
// not yet durable. Promotions publish because every server arms the same
// due time and only the first promotes. The lease expiry script publishes
// too. Reschedule, nack, dead replay and settings changes still PUBLISH
// from the client; on a Cluster go-redis sends that keyless command to
// the masters in turn, so while one is down some of those notifications
// wait for the call's bound and are lost. The engine's 5 s safety sweep
// covers lost notifications.
package redisstore
