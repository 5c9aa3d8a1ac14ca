// Package pebblestore is the embedded, durable store.Store of delayq, on
// top of github.com/cockroachdb/pebble/v2. It is the default engine store.
//
// # Key layout
//
// One Pebble keyspace; every key starts with a one-letter table name and a
// slash. Topic names ([A-Za-z0-9._:-]) and ids ([A-Za-z0-9._:@+=-]) never
// contain \x00, which therefore ends a topic name inside a key. Times are
// Unix ms as 8 big-endian bytes with the sign bit flipped (so negative
// times sort first); seq is 8 big-endian bytes.
//
//	key                                              value
//	m/ topic \x00 id                                 message state record (see codec.go)
//	b/ topic \x00 id                                 message body: payload, headers (see codec.go)
//	s/ topic \x00 dueAt(8) seq(8)                    id    scheduled, by (DueAt, Seq) (id \x01 prio when prio != 0)
//	r/ topic \x00 dueAt(8) seq(8)                    id    ready, priority 0, lease order (id \x00 promotedAt(8) when promoted)
//	p/ topic \x00 prio(1) dueAt(8) seq(8)            id    ready, priority 1-255, lease order (as r/)
//	i/ topic \x00 leaseUntil(8) seq(8)               id    inflight (NextLeaseExpiry, LeaseExpire)
//	d/ topic \x00 deadAt(8) seq(8)                   id    dead, oldest first (DeadList)
//	a/ ackedAt(8) topic \x00 id                      ""    acked tombstones, all topics (DedupPurge)
//	t/ topic                                         settings blob (TopicSettingsPut)
//	c/ topic                                         counters: 5 × int64 LE, merge operator
//	k/ name                                          recurring schedule (see schedule.go)
//	z/format                                         format version (4; see keys.go)
//	z/seq                                            seq high-water mark, 8 bytes BE
//
// A message has its m/ record, its b/ body unless acked, and exactly the
// index entry of its state (one of s/ r/ p/ i/ d/; a/ when acked). Every
// operation rewrites the record, moves the index entry and merges the
// counter delta in ONE batch, so a crash never leaves them out of step;
// Verify checks that invariant by a full recount. Formats 1 to 3 also
// kept l/, a store-wide index of leases (see formatVersion).
//
// The body is written once, by the send, and deleted with the message
// (cancel, dead-letter delete) or when it is acked (the tombstone keeps
// the state record alone until DedupPurge). A lease, nack, extend, lease
// expiry, reschedule or replay rewrites the state record only: a few dozen
// bytes whatever the payload size (format 3; formats 1 and 2 stored one
// combined record, which every lease rewrote payload included). A lease
// reads the state record and the body (two point reads); an ack reads the
// state record alone. A combined record left by format 1 or 2 is read as
// it is and written split by its first state change (see readRecord and
// txn.put), so the upgrade rewrites z/format alone.
//
// Promotion is the exception: it moves index entries only. Each due s/
// key is replaced by the r/ key with the same suffix, whose value is the
// id, \x00 and the promotion time, and the record (payload included) is
// not read or rewritten: two small keys per message rather than a record
// read and a record write under the topic lock. A record stored as
// scheduled is therefore ready when its r/ entry exists; readers resolve
// it (one more point read, for scheduled records only: MessageGet,
// Cancel, Reschedule, duplicate sends) and take UpdatedAt from the entry.
// The next write of the record (lease, reschedule) stores its real state.
//
// The store is a store.DueLeaser: MessageLeaseDue promotes the due s/
// entries and leases, under one hold of the topic lock (two unsynced
// batches: the lease's iterator does not see an unapplied batch), so a
// long-poll the engine wakes when a timer fires releases the message
// itself; MessagePromoteGrace leaves such newly due entries in s/, and
// answers Busy instead of waiting for a topic another call holds (the
// engine retries). MessageLeaseDue skips its s/ scan when the topic's s/
// low-water mark (at most the first key) is after now. When nothing is
// ready and at most Max are due, it leases them straight from s/ in one
// batch (leaseScheduled): no r/ entry written and deleted again, which on
// a queue whose consumers keep up is every release.
// Layout change of 2026-11-30 (before any release, so no migration): the
// record alone used to carry the state.
//
// Priority (format 2): the lease order is (Priority, DueAt, Seq) among
// due messages. Priority 0, the default and the common case, keeps the
// format-1 layout: r/ keys, version-1 records, bare-id s/ values, so a
// format-1 directory is format-2 data without priorities and Open upgrades
// it by rewriting z/format alone. Other priorities live in p/, ordered by
// (prio, due, seq): a lease takes r/ first, then walks p/ from the lowest
// priority, and within a priority stops at the first entry not yet due
// and seeks to the next priority (a not-due entry never holds back the
// priorities after it). Promotion reads the priority from the s/ value,
// not the record. p/'s low-water mark at its end says "empty": a topic
// that never had another priority pays no iterator, seek or write for it.
// Each priority also has its own mark (topic.prioLW, allocated when p/ is
// first scanned), so leasing priority q starts past q's tombstones, not
// only past the lowest priority's; BenchmarkReleaseStepPriorities (four
// priorities) costs about what BenchmarkReleaseStep (priority 0) does.
//
// Counters (c/) are merged, never read-modified-written: the merge
// operator adds int64 deltas per state, so updates commute and cannot be
// lost. Open reads them (and t/, z/) — never the messages — so opening a
// store with 10M pending messages costs the number of topics plus Pebble's
// WAL replay, not the backlog. In memory the counters are kept per topic
// under the topic lock; TopicGet never scans.
//
// Sequence numbers come from a counter reserved in blocks of 65536: the new
// high-water mark is written with an fsync before any seq of the block is
// used, and Open starts at the stored mark (and reserves the next block),
// so seq never goes backwards after a crash.
//
// # Queues on an LSM: low-water marks
//
// Promotion deletes from the front of s/, leasing from the front of r/,
// acking from the front of i/, purging from the front of a/. In an
// LSM a delete is a tombstone that stays until compaction, and an iterator
// that starts at the front of a prefix steps over every one of them: scan
// cost would grow with everything ever leased or acked. So each index has
// an in-memory low-water mark, the smallest key that may still exist: it
// is lowered whenever a key is added below it and raised, after a scan, to
// the first key the scan left alive (or the end). Scans start there with
// tight LowerBound/UpperBound iterator options, so Pebble skips whole
// tombstoned regions in its seek. Per-topic marks are guarded by the topic
// lock, which every scan and every writer of the topic holds; the global
// a/ mark is advanced by one scanner at a time and any key added
// during a scan is remembered (lowWater.endScan). Marks start at the front
// at Open (the first scan after a restart pays for the tombstones once).
// BenchmarkLeaseAfterAcks shows lease cost flat after 200k acks.
//
// # Durability and group commit
//
// InsertMany, Cancel, Reschedule, Ack, AckMany, Nack, DeadReplay,
// DeadDelete, TopicSettingsPut and the schedule writes return nil only
// after their batch is in the fsync'd WAL. Promote, Lease, Extend,
// LeaseExpire and DedupPurge are applied without fsync (store.Store
// allows their loss); a later durable write syncs them too, since the WAL
// is one ordered log.
//
// Group commit: an operation builds its batch and applies it with
// DB.ApplyNoSyncWait while holding its topic lock (so the next operation on
// the topic reads its writes), releases the lock, and only then waits with
// Batch.SyncWait. Pebble v2's LogWriter (record/log_writer.go, flushLoop)
// syncs all records queued since the last sync with one fsync and then
// wakes every waiter of that sync, so 64 goroutines sending to one hot
// topic share fsyncs instead of queueing behind one another. Reading a
// write that is applied but not yet synced is safe for an operation that
// writes and syncs a batch of its own: the WAL is recovered as a prefix,
// so its fsync made every earlier record durable as well. A send answered
// "duplicate" writes nothing, so it passes a sync barrier (Store.syncBarrier:
// a synced empty LogData record, skipped when no durable batch is
// unsynced) before answering: the send that wrote the id may still be
// waiting for its fsync.
//
// # Storage faults
//
//   - A failed WAL write or fsync is returned by Batch.SyncWait (with
//     ApplyNoSyncWait; DB.Apply with Sync would instead call Logger.Fatalf).
//     The store is then marked failed: every later write returns an error
//     wrapping store.ErrUnavailable until the store is closed and reopened
//     (which replays the WAL). It never retries an fsync and acks. Reads
//     keep working.
//   - Pebble's flusher error is sticky, and a later WAL append may panic
//     inside Pebble; we recover that panic (and Logger.Fatalf, which our
//     logger turns into a panic) around our own calls and fail the store.
//     Known limit: such a panic leaves Pebble's commit mutex locked, so an
//     operation that raced into Pebble at the same instant may block; the
//     process must restart after a storage failure anyway.
//   - Failures in Pebble's background work (flush/compaction MANIFEST
//     write or sync) call Logger.Fatalf in a background goroutine; that
//     panics and ends the process, as Pebble intends ("fatal sync error
//     restarts into WAL recovery").
//   - Disk full: a ballast file (Options.BallastSize, default 32 MiB)
//     is written at Open, before Pebble opens (Pebble preallocates 110%
//     of the memtable for each WAL and ignores a failed preallocation;
//     the other order left no room for the ballast on a small disk).
//     The first ENOSPC (vfs.OnDiskFull) deletes it, and the write that
//     hit ENOSPC is retried by the wrapper; from then on inserts are
//     refused with store.ErrUnavailable wrapping ErrDiskFull, while
//     acks, cancels and deletes still have room. About once a second an
//     insert probes free space and, with room for twice the ballast,
//     re-creates it and accepts inserts again. A second ENOSPC with no
//     ballast left fails the store like any write error.
//   - Corruption: Open wraps store.ErrCorrupt when Pebble reports a
//     corruption error (its message names the file, e.g. "malformed
//     manifest file MANIFEST-000001"). A record that fails its CRC32C is
//     reported as store.ErrCorrupt naming the key when it is read.
//     Detected at Open: damage to the MANIFEST, and to any WAL but the
//     most recent. Damage inside the most recent WAL, which Pebble v2.1.7's
//     replay cannot tell from the torn tail of a power loss (it stops there
//     and opens with a prefix), is caught by the ack marker (ackmark.go,
//     file delayq.ackmark): the Pebble sequence number up to which the WAL
//     was fsync'd, kept outside Pebble without adding an fsync to any
//     commit; Open refuses a database recovered behind it, naming the data
//     dir, the newest WAL and the marker (remove the marker to accept the
//     loss). Coverage: everything after Close, all but the last
//     microseconds after a kill -9, all but the last second after a power
//     loss. sstable blocks are checksummed and fail on read. See
//     corrupt_test.go and ackmark_test.go.
//
// Every insert looks its ids up (dedup) and nearly all lookups miss, so
// every level has a bloom filter; the block cache is sized on top of the
// memtables, which Pebble charges against it (a cache no larger than the
// memtables keeps no filter block, and each lookup re-reads one). Ids the
// engine generated (InsertMessage.Generated) are not looked up. Inserts
// look ids up and build their batch before taking the topic lock, holding
// a claim on each id (inserts.claim) so that two inserts of one id never
// both miss; ids found are read again under the lock.
//
// # Concurrency
//
// Store is safe for concurrent use. Each topic has a mutex held for the
// read-modify-write and the batch apply of every operation on it (never
// across an fsync wait; for inserts, only for the apply); LeaseExpire and DedupPurge, which span topics,
// take the topic locks they need in sorted order. Close waits for the
// operations in progress.
package pebblestore
