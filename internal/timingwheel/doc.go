// Package timingwheel is a hierarchical timing wheel for int64
// unix-millisecond due times. It knows nothing about messages or storage:
// an entry is an opaque uint64 id chosen by the caller plus a due time.
//
// # API
//
// Wheel is the synchronous core, driven by whatever time the caller passes
// to Advance (there is no time.Now in it). Add returns a Handle used by
// Remove and Reschedule; Advance(now, fn) calls fn for every entry with
// due <= now in due order, ties in insertion order. Runner wraps a Wheel
// with a mutex and one goroutine that sleeps on a single time.Timer.
//
// # Levels
//
// Time is counted in ticks (default 1ms). Level L has buckets 256^L ticks
// wide. An entry whose due tick t is after the wheel time cur goes to the
// level of the highest base-256 digit in which t and cur differ, in the
// bucket named by t's digit there (Linux/Kafka-style hashed hierarchy,
// but positioned by digits rather than relative distance), unless that
// bucket is open (below). Due ticks at or before cur go to the "current"
// level-0 bucket. Levels are created on first use; eight levels cover
// every int64, so 1ms to 292 million years all fit, and Add and Remove
// are O(1). Each level has two banks of 256 buckets, picked by the parity
// of the bucket's epoch (its start's digits above the level): one for
// cur's epoch and one for the next, which open buckets move into.
//
// # Cascading ahead
//
// A level-L bucket (L >= 1) must have moved its entries one level down by
// the time cur reaches its start. It is open from one bucket width before
// its start, that is from when cur enters the level-L bucket before it.
// Each Advance that has delivered everything due then moves up to
// Config.CascadeBatch entries (default 512) from the heads of open
// buckets one level down, earliest start first, into the next epoch's
// bank. CascadePending reports that such work is left; the Runner keeps
// stepping, releasing its lock between steps, until it is done, and it
// wakes at level boundaries where a closed bucket may open. An entry
// added into an open bucket's range goes to its tail if it still has
// entries (so it moves after the older ones), or one level down if it is
// empty, repeatedly. So a cascade costs at most CascadeBatch entry moves
// per Advance, interleaved with firing, instead of one burst of the whole
// bucket when its start is reached. If the work is not finished in time
// (a clock jump, Advance not called, CascadeBatch < 0), what is left
// moves at the start, in one step, after what moved before.
//
// Three invariants hold at rest: the ranges of non-empty buckets are
// disjoint or nested (a bucket's children only while it is open); all
// entries with one due at one level are in one bucket; and each bucket
// lists them in insertion order, with older entries of a due at lower
// levels than newer ones.
//
// # No empty ticking
//
// Non-empty buckets, not timers, sit in a small binary heap keyed by
// bucket start (at most 8*512 items whatever the number of
// timers). Advance pops buckets whose start has been reached, so a jump
// of days costs one step per non-empty bucket, never one per tick, and a
// driver can sleep exactly until the first bucket needs work.
//
// # Never early
//
// Reaching a level-0 bucket's start does not fire it: only entries whose
// exact due is <= now are delivered. With the default 1ms tick a future
// level-0 bucket holds a single due, so it is delivered by splicing the
// whole list. Otherwise (coarser tick, entries added in the past, clock
// stepped back) the bucket is stable-sorted by due into a reused scratch
// slice; entries due later stay in the bucket. NextDue is exact, never
// truncated to the tick. When the first bucket is open, entries already
// moved below it may be due earlier than its own, so NextDue also visits
// the buckets nested in its range.
//
// # Slab layout
//
// Entries live in fixed chunks of 4096 slots, never moved, linked by int32
// indexes. A link that is negative is ^k, naming list k itself, so a node
// can be unlinked without knowing its bucket:
//
//	chunks  [ *chunk ][ *chunk ] ...          chunk = [4096]node
//	node    | next i32 | prev i32 | due 2xu32 | id 2xu32 | gen u32 |  = 28 B
//
//	bucket k: head ──► [7] ◄──► [12] ◄──► [3] ──► ^k
//	          tail ───────────────────────────┘
//	free list: free ──► [5] ──► [9] ──► -1      (prev = freeMark)
//
// A Handle is slot index | generation<<32; the generation is bumped when a
// slot is released, so Remove of a fired or removed entry returns false.
// Memory is 28 bytes per pending timer plus one partly used chunk; there is
// no per-timer heap object, closure or map entry, and steady-state Add,
// Remove, Reschedule and Advance do not allocate.
//
// # Callbacks
//
// Inside Advance's fn the wheel may be used, except that Advance itself
// panics. Removing an entry not yet delivered prevents its delivery.
// Entries added with due <= now are delivered by the next Advance, not
// the current one, so a callback that re-adds itself cannot loop forever.
// A panic in fn leaves the undelivered entries in the wheel.
//
// # Concurrency
//
// A Wheel is not safe for concurrent use. A Runner is: its methods take a
// mutex, and its goroutine takes at most RunnerConfig.Batch entries per
// lock hold, plus at most RunnerConfig.CascadeBatch cascade moves when
// nothing more is due, and calls the fire callback with the lock released, so fire
// may call Add, Remove and Reschedule. Remove returning true guarantees fire
// is not called for that entry. The runner sleeps with one time.Timer
// until the next bucket that needs work, computing the duration from a
// fresh clock reading and re-reading the clock after waking; an Add with
// an earlier due wakes it through a channel. Stop waits for the goroutine.
//
// # Remaining limits
//
// Cascading ahead bounds the work per Advance when Advance is called
// often (the Runner does). A jump of the clock past the start of a large,
// partly moved bucket still moves the rest in one step. The work itself
// is unchanged (each entry moves once per level), only spread out; a
// bucket that opens with millions of entries keeps the runner busy in
// CascadeBatch-sized steps until it is done. See docs/benchmarks-wheel.md.
package timingwheel
