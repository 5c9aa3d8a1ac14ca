package pebblestore

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// Options configure Open. The zero value means defaults.
type Options struct {
	// FS is the file system. Default vfs.Default (the OS). Tests pass
	// vfs.NewMem, vfs.NewCrashableMem or an errorfs wrapper.
	FS vfs.FS
	// Logger receives Pebble's messages and the store's alarms (failed
	// fsync, disk full). Default slog.Default().
	Logger *slog.Logger
	// NoSync commits every write without fsync. UNSAFE: a machine crash
	// loses acknowledged messages. For benchmarks only.
	NoSync bool
	// CacheSize is Pebble's block cache in bytes, on top of the memtables
	// that Pebble charges against the cache. Default 64 MiB.
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes. Default 64 MiB.
	MemTableSize uint64
	// BallastSize is the size of a file reserved in dir at open and deleted
	// when the disk fills up, so that acks, cancels and deletes can still be
	// written while new inserts are refused with ErrDiskFull. Default
	// 32 MiB; negative disables the ballast.
	BallastSize int64
}

// seqBlock is how many sequence numbers are reserved durably at a time.
const seqBlock = 1 << 16

const ballastName = "delayq.ballast"

// Store is the Pebble-backed store.Store. It is safe for concurrent use.
type Store struct {
	db      *pebble.DB
	fs      vfs.FS
	dir     string
	log     *slog.Logger
	noSync  bool
	ballast int64

	// closeMu is held shared by every operation and exclusively by Close,
	// so Close waits for operations in progress.
	closeMu sync.RWMutex
	closed  bool // guarded by closeMu

	ack *ackMark // acknowledged-sequence marker (ackmark.go)

	// failed is set once, by the first write or fsync error: from then on
	// every write returns store.ErrUnavailable (never "retry and ack").
	failed   atomic.Pointer[error]
	diskFull atomic.Bool
	// unsynced counts durable batches applied (visible to reads) whose
	// fsync has not returned yet; see syncBarrier.
	unsynced atomic.Int64
	// lastSpaceCheck is the Unix nanos of the last free-space probe.
	lastSpaceCheck atomic.Int64

	topicsMu sync.RWMutex
	topics   map[string]*topic // never shrinks

	seqMu   sync.Mutex
	nextSeq uint64 // guarded by seqMu
	seqHW   uint64 // guarded by seqMu: durable high-water; seqs < seqHW may be used

	expireMu sync.Mutex // serialises LeaseExpire sweeps
	schedMu  sync.Mutex // serialises read-modify-writes of k/ (schedules)
	purgeMu  sync.Mutex // serialises DedupPurge scans of a/
	ackedLW  lowWater   // low-water of the global a/ index

	txnBuffers chan txnBuffers // kept for the next txns (see txnBuffers)
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.DueLeaser = (*Store)(nil)
)

// Per-topic index numbers for topic.lw.
const (
	ixScheduled = iota
	ixReady
	ixInflight
	ixDead
	ixReadyPrio // ready messages of priority 1-255 (p/); ixReady holds priority 0
	numIx
)

var ixPrefix = [numIx]byte{pfxScheduled, pfxReady, pfxInflight, pfxDead, pfxReadyPrio}

// topic is the in-memory state of one topic.
type topic struct {
	name string
	// mu serialises every read-modify-write of the topic's messages and
	// every scan of its indexes (so low-water marks need no other lock).
	mu       sync.Mutex
	ins      inserts // ids claimed by inserts in progress (message.go)
	known    bool    // has a c/ or t/ key
	deleted  bool    // has an x/ key: TopicDelete forgot it (topic.go)
	settings []byte  // nil if never set
	counts   store.Counts
	// lw[i] is the smallest {t}{seq} suffix ({prio}{t}{seq} for p/) that
	// may still exist in index i (nil: the start of the index). Lowered when a key is added below
	// it, raised after a scan found the first live key.
	lw [numIx][]byte
	// prioLW[q] is the {t}{seq} mark of priority q within p/ (nil: not
	// known yet; endSuffix: empty), so that each priority's scan starts
	// past its own tombstones, not only the lowest one's. Allocated when
	// p/ is first scanned: topics that only use priority 0 never pay it.
	prioLW *[256][]byte
}

// lower makes sure lw of index ix is at most suffix.
func (t *topic) lower(ix int, suffix []byte) {
	if t.lw[ix] != nil && bytes.Compare(suffix, t.lw[ix]) < 0 {
		t.lw[ix] = suffix
	}
	if ix == ixReadyPrio && t.prioLW != nil {
		if m := &t.prioLW[suffix[0]]; *m != nil && bytes.Compare(suffix[1:], *m) < 0 {
			*m = suffix[1:]
		}
	}
}

// lowerKey is lower for a full per-topic index key.
func (t *topic) lowerKey(ix int, key []byte) { t.lower(ix, key[len(key)-suffixLen(ix):]) }

// lowWater is a low-water mark of a global index, scanned by one goroutine at
// a time but added to by any topic's operations.
type lowWater struct {
	mu       sync.Mutex
	key      []byte // nil: the start of the index
	scanning bool
	minSince []byte // smallest key added since the scan started
}

// lower is called after a batch adding key was applied.
func (w *lowWater) lower(key []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.key != nil && bytes.Compare(key, w.key) < 0 {
		w.key = key
	}
	if w.scanning && (w.minSince == nil || bytes.Compare(key, w.minSince) < 0) {
		w.minSince = key
	}
}

func (w *lowWater) startScan() []byte {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scanning, w.minSince = true, nil
	return w.key
}

// endScan sets the mark to next (the first key the scan left in place),
// unless a key below next was added while the scan ran: an add applied
// after our iterator was created is invisible to the scan, and setting the
// mark past it would hide it forever. lower records such adds in minSince.
func (w *lowWater) endScan(next []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scanning = false
	if next == nil {
		return
	}
	if w.minSince != nil && bytes.Compare(w.minSince, next) < 0 {
		next = w.minSince
	}
	if w.key == nil || bytes.Compare(next, w.key) > 0 {
		w.key = next
	}
	w.minSince = nil
}

// Open opens (creating if needed) the store in dir.
func Open(dir string, opts Options) (*Store, error) {
	s := &Store{
		fs:      cmp.Or[vfs.FS](opts.FS, vfs.Default),
		dir:     dir,
		log:     cmp.Or(opts.Logger, slog.Default()),
		noSync:  opts.NoSync,
		ballast: cmp.Or(opts.BallastSize, 32<<20),
		topics:  make(map[string]*topic),

		txnBuffers: make(chan txnBuffers, keptTxnBuffers),
	}
	if err := s.fs.MkdirAll(dir, 0o750); err != nil { // not world-readable: it holds every payload
		return nil, fmt.Errorf("pebblestore: create %s: %w: %w", dir, store.ErrUnavailable, err)
	}
	fs := s.fs
	if s.ballast > 0 {
		fs = vfs.OnDiskFull(s.fs, s.onDiskFull)
		// Before Pebble: its WAL preallocates 110% of the memtable (71 MiB
		// by default) and ignores a failed preallocation, so reserving the
		// ballast first keeps the reserve when the disk is small.
		if err := s.makeBallast(); err != nil {
			s.log.Warn("pebblestore: cannot reserve the ballast file", "err", err)
		}
	}
	memTable := cmp.Or(opts.MemTableSize, 64<<20)
	// Pebble charges its memtables (the mutable one and one being flushed)
	// against the block cache: a cache no larger than them caches nothing,
	// and every dedup lookup then re-reads and re-checksums filter blocks.
	cache := pebble.NewCache(cmp.Or(opts.CacheSize, 64<<20) + 2*int64(memTable)) // #nosec G115 -- a memtable size is bytes of RAM, far below 2^63
	defer cache.Unref()
	po := &pebble.Options{
		FS:           fs,
		Cache:        cache,
		MemTableSize: memTable,
		Merger:       countersMerger,
		Logger:       pebbleLogger{s.log},
		EventListener: &pebble.EventListener{
			BackgroundError: func(err error) {
				s.log.Error("pebblestore: background error", "err", err)
			},
			DataCorruption: func(info pebble.DataCorruptionInfo) {
				s.log.Error("pebblestore: data corruption", "path", info.Path, "err", info.Details)
			},
		},
	}
	// Bloom filters on every level: every insert looks its id up (dedup),
	// and nearly all of those lookups miss; without filters each miss
	// reads an index and a data block per sstable.
	for i := range po.Levels {
		po.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
		po.Levels[i].FilterType = pebble.TableFilter
		// 32 KiB data blocks (Pebble's default is 4 KiB, CockroachDB's
		// 32 KiB). A drain reads the backlog's bodies in due order from
		// the sstables they were flushed to: a block-cache miss each
		// block, and each miss has a fixed cost (a block allocated
		// through cgo, a read, a checksum, an index seek) that a 4 KiB
		// block shared among three 1 KiB bodies. A point read of a small
		// record still scans at most one restart interval (16 keys).
		po.Levels[i].BlockSize = 32 << 10
	}
	if s.fs == vfs.Default {
		removeBackupLeftovers(dir)
	}
	wals := listWALs(s.fs, dir)
	db, err := openDB(dir, po)
	if err != nil {
		return nil, err
	}
	// Before any write: refuse a WAL that lost acknowledged writes.
	if err := checkAckMark(s.fs, dir, db, wals); err != nil {
		_ = db.Close()
		return nil, err
	}
	recovered := visibleSeqNum(db) // durable: Open flushed the replayed WAL
	s.db = db
	if err := s.load(); err != nil {
		_ = db.Close()
		return nil, err
	}
	if s.ack, err = openAckMark(s.fs, dir, s.log, recovered); err != nil {
		_ = db.Close()
		return nil, err
	}
	return s, nil
}

// openDB opens Pebble, classifying errors: corruption wraps
// store.ErrCorrupt (Pebble's message names the file, e.g. "000002.log" or
// "MANIFEST-000001"); anything else wraps store.ErrUnavailable.
func openDB(dir string, po *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		// Pebble reports some corruption found during open through
		// Logger.Fatalf, which panics with errFatal.
		if r := recover(); r != nil {
			f, ok := r.(errFatal)
			if !ok {
				panic(r)
			}
			db, err = nil, fmt.Errorf("pebblestore: open %s: %w: %s", dir, store.ErrCorrupt, f.msg)
		}
	}()
	db, err = pebble.Open(dir, po)
	switch {
	case err == nil:
		return db, nil
	case pebble.IsCorruptionError(err):
		return nil, fmt.Errorf("pebblestore: open %s: %w: %w", dir, store.ErrCorrupt, err)
	case errors.Is(err, syscall.EWOULDBLOCK):
		// Pebble's lock file: flock says only "resource temporarily
		// unavailable".
		return nil, fmt.Errorf("pebblestore: open %s: %w: the directory is in use by another process (another delayq server with the same --data, or one still shutting down): %w", dir, store.ErrUnavailable, err)
	default:
		return nil, fmt.Errorf("pebblestore: open %s: %w: %w", dir, store.ErrUnavailable, err)
	}
}

// load reads the meta keys, the topics' settings and counters (never the
// messages: open time does not grow with the backlog), and reserves the
// next block of sequence numbers durably.
func (s *Store) load() error {
	v, err := s.get(keyFormat)
	switch {
	case errors.Is(err, store.ErrNotFound):
		if err := s.db.Set(keyFormat, []byte{formatVersion}, pebble.Sync); err != nil {
			return fmt.Errorf("pebblestore: write format: %w: %w", store.ErrUnavailable, err)
		}
	case err != nil:
		return err
	case len(v) == 1 && v[0] > formatVersion:
		// Before any write (the sequence reservation below is one).
		return fmt.Errorf("pebblestore: %s is in store format %d, this build reads formats %d to %d: %w",
			s.dir, v[0], oldestFormat, formatVersion, store.ErrNewerFormat)
	case len(v) != 1 || v[0] < oldestFormat:
		return fmt.Errorf("pebblestore: key %q: unsupported format %x: %w", keyFormat, v, store.ErrCorrupt)
	case v[0] < formatVersion:
		// Older data reads as it is (see formatVersion): record the new
		// version so that an older binary refuses the directory from now on,
		// and drop the l/ index format 4 no longer keeps, in one batch.
		b := s.db.NewBatch()
		_ = b.DeleteRange([]byte{pfxLease, '/'}, []byte{pfxLease, '/' + 1}, nil)
		_ = b.Set(keyFormat, []byte{formatVersion}, nil)
		err := b.Commit(pebble.Sync)
		_ = b.Close()
		if err != nil {
			return fmt.Errorf("pebblestore: upgrade format %d to %d: %w: %w", v[0], formatVersion, store.ErrUnavailable, err)
		}
		s.log.Info("pebblestore: data format upgraded", "dir", s.dir, "from", v[0], "to", formatVersion)
	}
	if v, err := s.get(keySeqHighWater); err == nil {
		if len(v) != 8 {
			return fmt.Errorf("pebblestore: key %q: %d bytes: %w", keySeqHighWater, len(v), store.ErrCorrupt)
		}
		s.nextSeq = beUint64(v)
		s.seqHW = s.nextSeq
	} else if !errors.Is(err, store.ErrNotFound) {
		return err
	}
	if s.nextSeq == 0 {
		s.nextSeq, s.seqHW = 1, 1
	}
	if err := s.reserveSeqs(0); err != nil {
		return err
	}
	return s.loadTopics()
}

func (s *Store) loadTopics() error {
	for _, p := range []byte{pfxCounters, pfxTopic, pfxDeleted} {
		lo := []byte{p, '/'}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			return fmt.Errorf("pebblestore: load topics: %w: %w", store.ErrUnavailable, err)
		}
		for it.First(); it.Valid(); it.Next() {
			name := string(it.Key()[2:])
			val, err := it.ValueAndErr()
			if err != nil {
				_ = it.Close()
				return fmt.Errorf("pebblestore: key %q: %w: %w", it.Key(), store.ErrCorrupt, err)
			}
			t := s.topic(name)
			if p == pfxDeleted {
				t.deleted = true
				continue
			}
			t.known = true
			if p == pfxTopic {
				t.settings = bytes.Clone(val)
				continue
			}
			if t.counts, err = decodeCounts(val); err != nil {
				_ = it.Close()
				return fmt.Errorf("pebblestore: key %q: %w", it.Key(), err)
			}
		}
		if err := it.Close(); err != nil {
			return classify("load topics", err)
		}
	}
	return nil
}

// reserveSeqs makes sure n more sequence numbers are below the durable
// high-water mark, writing a new mark (fsync'd, before any of them is used)
// if not. Since the WAL is recovered as a prefix, any batch that uses a seq
// comes after the mark that covers it, so seqs never go backwards after a
// crash. Called with seqMu held or before the store is shared.
func (s *Store) reserveSeqs(n uint64) error {
	hw := s.nextSeq + n + seqBlock
	if err := s.db.Set(keySeqHighWater, beAppend(nil, hw), s.writeOpts()); err != nil {
		return fmt.Errorf("pebblestore: reserve sequence numbers: %w: %w", store.ErrUnavailable, err)
	}
	s.seqHW = hw
	return nil
}

// allocSeqs returns the first of n fresh sequence numbers.
func (s *Store) allocSeqs(n int) (uint64, error) {
	s.seqMu.Lock()
	defer s.seqMu.Unlock()
	un := uint64(n) // #nosec G115 -- n is a batch length, never negative
	if s.nextSeq+un >= s.seqHW {
		if err := s.checkWritable(); err != nil {
			return 0, err
		}
		if err := s.reserveSeqs(un); err != nil {
			s.fail(err)
			return 0, err
		}
	}
	first := s.nextSeq
	s.nextSeq += un
	return first, nil
}

func (s *Store) writeOpts() *pebble.WriteOptions {
	if s.noSync {
		return pebble.NoSync
	}
	return pebble.Sync
}

// topic returns the in-memory state of name, creating it (unknown) if
// needed.
func (s *Store) topic(name string) *topic {
	s.topicsMu.RLock()
	t := s.topics[name]
	s.topicsMu.RUnlock()
	if t != nil {
		return t
	}
	s.topicsMu.Lock()
	defer s.topicsMu.Unlock()
	if t = s.topics[name]; t == nil {
		t = &topic{name: name}
		s.topics[name] = t
	}
	return t
}

// lookupTopic returns the topic or nil; it never creates one.
func (s *Store) lookupTopic(name string) *topic {
	s.topicsMu.RLock()
	defer s.topicsMu.RUnlock()
	return s.topics[name]
}

// begin starts an operation: it fails with store.ErrClosed after Close.
// The returned func ends it.
func (s *Store) begin() (func(), error) {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return nil, store.ErrClosed
	}
	return s.closeMu.RUnlock, nil
}

// Close closes the store. Operations in progress finish first.
func (s *Store) Close() error {
	s.closeMu.Lock()
	defer s.closeMu.Unlock()
	if s.closed {
		return store.ErrClosed
	}
	s.closed = true
	if err := s.failedErr(); err != nil {
		// Pebble's WAL writer is poisoned; Close would try to flush and
		// sync it again. Report the original failure instead.
		_ = s.closeDB()
		_ = s.ack.close(false)
		return fmt.Errorf("pebblestore: close after write failure: %w", err)
	}
	if err := s.closeDB(); err != nil {
		_ = s.ack.close(false)
		return fmt.Errorf("pebblestore: close: %w", err)
	}
	// The WAL is closed (synced): record the final value.
	if err := s.ack.close(true); err != nil {
		return fmt.Errorf("pebblestore: close: %w", err)
	}
	return nil
}

func (s *Store) closeDB() (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble close panicked: %v", r)
		}
	}()
	return s.db.Close()
}

// failedErr returns the error that failed the store for writes, or nil.
func (s *Store) failedErr() error {
	if p := s.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// fail marks the store failed for writes after a write or sync error. We
// must not retry: after a failed fsync the kernel may have dropped the dirty
// pages, so a later successful fsync would prove nothing ("fsyncgate").
// The process has to reopen the store, which replays the WAL.
func (s *Store) fail(cause error) {
	err := fmt.Errorf("%w: write failed, store must be reopened: %w", store.ErrUnavailable, cause)
	if s.failed.CompareAndSwap(nil, &err) {
		s.log.Error("pebblestore: write failed; refusing all further writes until reopened", "err", cause)
	}
}

func (s *Store) checkWritable() error {
	if err := s.failedErr(); err != nil {
		return err
	}
	return nil
}

// apply makes b visible (memtable) and queues it in the WAL. It is called
// with the topic lock(s) held, so the next operation on the topic reads this
// batch's writes. For a durable batch it does NOT wait for the fsync: call
// wait after releasing the locks. This is what keeps group commit alive
// with a hot topic: many goroutines apply under the lock one after another
// in microseconds, then all wait for the same WAL fsync (Pebble's LogWriter
// syncs every record queued so far in one fsync and wakes every waiter).
//
// Reading an applied but not yet synced write is safe: the WAL is written
// and recovered in order, so an operation whose own sync succeeded also made
// every earlier record durable; and if a sync fails, Pebble's WAL error is
// sticky, so every later waiter fails too and the store is marked failed.
func (s *Store) apply(b *pebble.Batch, durable bool) (err error) {
	if err := s.checkWritable(); err != nil {
		return err
	}
	if durable && !s.noSync {
		// Counted before the batch can be read; wait uncounts it. This
		// defer runs after the recover below has set err.
		s.unsynced.Add(1)
		defer func() {
			if err != nil {
				s.unsynced.Add(-1)
			}
		}()
	}
	defer func() {
		// Pebble panics (or calls Logger.Fatalf, which panics with
		// errFatal) when its WAL writer has a sticky error.
		if r := recover(); r != nil {
			err = fmt.Errorf("pebble panicked: %v", r)
			s.fail(err)
			err = s.failedErr()
		}
	}()
	if durable && !s.noSync {
		err = s.db.ApplyNoSyncWait(b, pebble.Sync)
	} else {
		err = s.db.Apply(b, pebble.NoSync)
	}
	if err != nil {
		s.fail(err)
		return s.failedErr()
	}
	return nil
}

// wait waits for the fsync of a durable batch applied by apply, then
// releases the batch. Call it without locks.
func (s *Store) wait(b *pebble.Batch, durable bool) error {
	if durable && !s.noSync {
		err := b.SyncWait()
		if err != nil {
			s.fail(err)
		}
		// After fail: syncBarrier reads the count, then the failure.
		s.unsynced.Add(-1)
		if err != nil {
			_ = b.Close()
			return s.failedErr()
		}
		s.ack.advanceBatch(b)
	}
	return b.Close()
}

// syncBarrier returns once every write visible now is durable. An answer
// read from another operation's write and not backed by a write of its own
// (a duplicate send: the id is there, nothing is written) must wait for
// that write's fsync: until then a power loss can undo it. The barrier is
// a synced, empty WAL record (LogData): the WAL is written and synced in
// order, and a visible batch was written to it before the barrier, so the
// barrier's fsync covers it (as the first batch's own fsync would). When
// no durable batch is unsynced, there is nothing to wait for: a
// decremented count means that batch's fsync returned, or failed and
// failed the store first.
func (s *Store) syncBarrier() error {
	if s.noSync {
		return nil
	}
	if s.unsynced.Load() == 0 {
		return s.failedErr()
	}
	b := s.db.NewBatch()
	_ = b.LogData(nil, nil)
	return s.commit(b, true)
}

// commit is apply+wait, for callers that hold no lock across it.
func (s *Store) commit(b *pebble.Batch, durable bool) error {
	if err := s.apply(b, durable); err != nil {
		return err
	}
	return s.wait(b, durable)
}

// get reads a key; missing → store.ErrNotFound.
func (s *Store) get(key []byte) ([]byte, error) {
	v, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, classify(fmt.Sprintf("read %q", key), err)
	}
	v = bytes.Clone(v)
	_ = closer.Close()
	return v, nil
}

// classify wraps a Pebble read error.
func classify(what string, err error) error {
	if pebble.IsCorruptionError(err) {
		return fmt.Errorf("pebblestore: %s: %w: %w", what, store.ErrCorrupt, err)
	}
	return fmt.Errorf("pebblestore: %s: %w: %w", what, store.ErrUnavailable, err)
}

// getRecord reads a message with its payload and headers; missing →
// store.ErrNotFound; a value that fails to decode → store.ErrCorrupt
// naming the key.
//
// MessageGet calls it without the topic lock, and a split record is two
// reads (state, then body): an ack or cancel applied between them deletes
// the body of the state just read. So a missing body is read again from
// the state record: if that changed, the message moved on and the new
// state is the answer (acked, gone, or read again with its body); only a
// record unchanged without its body is damage.
func (s *Store) getRecord(topic, id string) (*store.Record, error) {
	k := messageKey(topic, id)
	var prev []byte
	for {
		v, err := s.get(k)
		if err != nil {
			return nil, err
		}
		r, split, err := decodeRecord(v, topic, id)
		if err != nil {
			return nil, fmt.Errorf("pebblestore: key %q: %w: %w", k, store.ErrCorrupt, err)
		}
		if !split || r.State == store.StateAcked {
			return r, nil
		}
		err = s.readBody(nil, r)
		if err == nil {
			return r, nil
		}
		if !errors.Is(err, errBodyMissing) || bytes.Equal(v, prev) {
			return nil, err
		}
		prev = v
	}
}

// errBodyMissing is in the error of a read that found a split record
// without its body.
var errBodyMissing = errors.New("the body is missing")

// readRecord reads a message's record and, if withBody, its body: one
// point read for a combined record (formats 1 and 2) or an acked one, two
// for a split one. A writer passes its txn, which notes the combined
// records it read (their first rewrite must write the body); it holds
// the topic lock, so the two reads agree.
func (s *Store) readRecord(x *txn, topic, id string, withBody bool) (*store.Record, error) {
	k := messageKey(topic, id)
	v, closer, err := s.pointGet(x, readRecords, k, len(k)-len(id))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, store.ErrNotFound
	}
	if err != nil {
		return nil, classify(fmt.Sprintf("read %q", k), err)
	}
	// decodeRecord copies every field it keeps, so it reads Pebble's buffer
	// in place: the payload is copied once per read, not twice (every
	// lease reads its body).
	r, split, err := decodeRecord(v, topic, id)
	_ = closer.Close()
	if err != nil {
		return nil, fmt.Errorf("pebblestore: key %q: %w: %w", k, store.ErrCorrupt, err)
	}
	if !split {
		if x != nil {
			x.noteCombined(r)
		}
		return r, nil
	}
	if !withBody || r.State == store.StateAcked {
		return r, nil
	}
	if err := s.readBody(x, r); err != nil {
		return nil, err
	}
	return r, nil
}

// pointGet reads key, whose first prefixLen bytes are its topic's m/ or
// b/ prefix: through x's ordered reader if it has one (see
// txn.readInOrder), else by DB.Get. Missing: pebble.ErrNotFound. The
// value is valid until closer is called.
func (s *Store) pointGet(x *txn, kind int, key []byte, prefixLen int) ([]byte, io.Closer, error) {
	if x != nil && x.reads != nil {
		v, ok, err := x.reads.get(kind, key[:prefixLen], key)
		if err == nil && !ok {
			err = pebble.ErrNotFound
		}
		return v, nopCloser{}, err
	}
	return s.db.Get(key)
}

type nopCloser struct{}

func (nopCloser) Close() error { return nil }

// readBody reads the b/ body of split record r into it. A missing body is
// damage: the store writes and deletes it with the record.
func (s *Store) readBody(x *txn, r *store.Record) error {
	k := bodyKey(r.Topic, r.ID)
	v, closer, err := s.pointGet(x, readBodies, k, len(k)-len(r.ID))
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("pebblestore: key %q: %w: %w (the message is %s)", k, store.ErrCorrupt, errBodyMissing, r.State)
	}
	if err != nil {
		return classify(fmt.Sprintf("read %q", k), err)
	}
	err = decodeBody(v, r)
	_ = closer.Close()
	if err != nil {
		return fmt.Errorf("pebblestore: key %q: %w: %w", k, store.ErrCorrupt, err)
	}
	return nil
}

// onDiskFull runs (inside Pebble's FS wrapper, with writes blocked) when a
// write hits ENOSPC: it deletes the ballast so that the failed write is
// retried with room to spare, and refuses new inserts from now on.
func (s *Store) onDiskFull() {
	if s.diskFull.Swap(true) {
		return
	}
	s.lastSpaceCheck.Store(time.Now().UnixNano())
	err := s.fs.Remove(s.fs.PathJoin(s.dir, ballastName))
	s.log.Error("pebblestore: disk full; refusing new messages, ballast released", "remove_err", err)
}

// checkSpace refuses inserts while the disk is full; about once a second
// it probes free space and, with room for twice the ballast, re-creates
// the ballast and accepts inserts again (no restart needed).
func (s *Store) checkSpace() error {
	if !s.diskFull.Load() {
		return nil
	}
	now := time.Now().UnixNano()
	last := s.lastSpaceCheck.Load()
	if now-last > int64(time.Second) && s.lastSpaceCheck.CompareAndSwap(last, now) {
		du, err := s.fs.GetDiskUsage(s.dir)
		need := 2 * uint64(s.ballast) // #nosec G115 -- diskFull is only set with a ballast > 0 (the OnDiskFull hook is installed only then)
		if err == nil && du.AvailBytes > need && s.makeBallast() == nil {
			s.diskFull.Store(false)
			s.log.Info("pebblestore: disk space available again; accepting new messages")
			return nil
		}
	}
	return fmt.Errorf("pebblestore: %w: %w", store.ErrUnavailable, ErrDiskFull)
}

// makeBallast writes the ballast file (zeros, synced) if it is missing.
func (s *Store) makeBallast() error {
	path := s.fs.PathJoin(s.dir, ballastName)
	if st, err := s.fs.Stat(path); err == nil && st.Size() == s.ballast {
		return nil
	}
	f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for n := int64(0); n < s.ballast; n += int64(len(buf)) {
		if _, err := f.Write(buf[:min(int64(len(buf)), s.ballast-n)]); err != nil {
			_ = f.Close()
			_ = s.fs.Remove(path)
			return err
		}
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// lockTopics locks the named topics in sorted order (the only order in
// which more than one topic lock is ever held, so no deadlock) and returns
// the unlock function.
func (s *Store) lockTopics(names []string) ([]*topic, func()) {
	names = slices.Clone(names)
	slices.Sort(names)
	names = slices.Compact(names)
	ts := make([]*topic, len(names))
	for i, n := range names {
		ts[i] = s.topic(n)
		ts[i].mu.Lock()
	}
	return ts, func() {
		for _, t := range ts {
			t.mu.Unlock()
		}
	}
}

// pebbleLogger routes Pebble's log to slog. Fatalf panics with errFatal
// instead of exiting the process: our calls into Pebble recover it and fail
// the store; in Pebble's background goroutines it still crashes the process,
// as Pebble intends (e.g. a failed MANIFEST sync).
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("pebble: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error("pebble: fatal: " + msg)
	panic(errFatal{msg})
}

func beUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

func beAppend(b []byte, v uint64) []byte {
	// #nosec G115 -- big-endian bytes of v: truncation to each byte is the point
	return append(b, byte(v>>56), byte(v>>48), byte(v>>40), byte(v>>32),
		byte(v>>24), byte(v>>16), byte(v>>8), byte(v))
}
