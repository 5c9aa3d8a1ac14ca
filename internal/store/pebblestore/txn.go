package pebblestore

import (
	"bytes"
	"slices"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/delayq/delayq/internal/store"
)

// txn builds the one batch of an operation: record writes, the index
// entries that follow each record's state, and the counter deltas, which
// it merges into c/{topic} when applied. The caller holds the lock of
// every topic it touches.
type txn struct {
	s      *Store
	b      *pebble.Batch
	topics []*topic
	deltas []delta
	// Keys added to the global a/ index; its low-water mark is lowered
	// after the batch is applied (see lowWater.endScan for why after).
	ackedKeys [][]byte
	// Per-topic index keys added, whose topic marks are lowered in apply:
	// put may run before the topic lock is taken (inserts build their
	// batch outside it), apply always runs under it.
	lows    []lowKey
	applied bool
	txnBuffers
	sized int // newTxnSized's estimate (0: newTxn)
	// Records read in the combined layout of formats 1 and 2 (nil until
	// one is read): put writes the body of their new state, which the
	// records read split never need.
	combined map[*store.Record]bool
	// reads, when set (readInOrder), serves readRecord's point reads.
	reads *orderedReader
}

// readInOrder makes readRecord with x read through iterators (see
// orderedReader) until the returned func is called, which the caller
// must do before it releases the topic lock. n is how many messages the
// caller expects to read: below orderedFrom each read stays a DB.Get.
func (x *txn) readInOrder(n int) (done func()) {
	if n < orderedFrom {
		return func() {}
	}
	x.reads = &orderedReader{db: x.s.db}
	return func() { x.reads.close(); x.reads = nil }
}

// orderedFrom is the fewest messages a call reads through iterators. An
// iterator's setup (one per kind of key, each positioned in every
// memtable and level) costs more than the Get it replaces when it serves
// one read: a due lease of one message, what a release to a waiting
// long-poll usually is, took ≈ 20 % longer through iterators
// (BenchmarkLeaseDueSmall). A variable for that benchmark.
var orderedFrom = 2

// writeCombined makes put write combined records (formats 1 and 2), for
// the tests that build a directory of an older format.
var writeCombined bool

// noteCombined notes that r was read in the combined layout.
func (x *txn) noteCombined(r *store.Record) {
	if x.combined == nil {
		x.combined = make(map[*store.Record]bool)
	}
	x.combined[r] = true
}

type lowKey struct {
	t   *topic
	ix  int
	key []byte
}

func (s *Store) newTxn() *txn {
	x := &txn{s: s, b: s.db.NewBatch()}
	x.takeBuffers()
	return x
}

// newTxnSized starts a txn whose batch has room for about size bytes.
// A batch starts at 1 KiB and doubles as it fills, copying itself each
// time; Pebble pools batches, but the pool empties at every GC, which a
// busy server runs many times a second: growing a batch send's 130 KiB
// batch from 1 KiB allocated twice its size, a quarter of the bytes the
// server allocated in a batched drain (issue #20).
//
// small estimates the part of it that is not bodies (see set): the
// arena that holds those writes until apply starts at that size.
//
// Pebble keeps a released batch's buffer for the next batch only up to
// batchRetained (its default, 1 MB, let every send of 1,000 1 KiB
// messages allocate its 1.4 MB anew: a sixth of what a batched drain
// allocated).
func (s *Store) newTxnSized(size, small int) *txn {
	x := &txn{s: s, b: s.db.NewBatchWithSize(size, pebble.WithMaxRetainedSizeBytes(batchRetained)), sized: size}
	if !x.takeBuffers() || cap(x.arena) < small {
		x.arena = make([]byte, 0, small)
	}
	return x
}

// batchRetained is the largest batch buffer Pebble keeps for reuse: a
// full batch send of 1,000 messages of up to about 4 KiB.
const batchRetained = 4 << 20

// txnBuffers are a txn's scratch slices, which hold its writes only until
// flushOps has copied them into the batch. A store keeps a few for the
// next txns: allocated anew, they were half the bytes a batched drain
// allocated (the ops slice of a 100-message lease alone grows to 28 KiB),
// and a sync.Pool would not keep them, since it empties within two of the
// GCs a busy server runs many times a second.
type txnBuffers struct {
	// ops are the writes other than bodies, kept (copied into arena) for
	// apply to add to the batch in key order; see set. sorted is
	// flushOps' room to order them in.
	ops, sorted []txnOp
	arena       []byte
	// keys holds a key put writes but does not keep (see entryIn) until
	// the batch copies it.
	keys []byte
	// scratch holds a record's encoding until the batch copies it.
	scratch []byte
}

const (
	keptTxnBuffers = 8       // about the txns that run at once
	keptBufferMax  = 1 << 20 // larger buffers (a huge batch's) go to GC
)

// takeBuffers gives x a kept set of buffers, if there is one.
func (x *txn) takeBuffers() bool {
	select {
	case x.txnBuffers = <-x.s.txnBuffers:
		return true
	default:
		return false
	}
}

// keepBuffers hands x's buffers to the store for a later txn; x writes
// nothing more (flushOps has run, and left no pointers into arenas in
// ops or sorted). Nothing else points into them: the batch copied every
// key and value, and the keys the topic and acked marks keep are
// allocated apart (entryOf).
func (x *txn) keepBuffers() {
	b := x.txnBuffers
	x.txnBuffers = txnBuffers{}
	if cap(b.arena) > keptBufferMax || cap(b.scratch) > keptBufferMax || cap(b.ops)*int(unsafe.Sizeof(txnOp{})) > keptBufferMax {
		return
	}
	b.ops, b.sorted, b.arena, b.keys, b.scratch = b.ops[:0], b.sorted[:0], b.arena[:0], b.keys[:0], b.scratch[:0]
	select {
	case x.s.txnBuffers <- b:
	default:
	}
}

// sizedHook, when set (tests), is called by apply with a sized txn's
// estimate and its batch's final length.
var sizedHook func(sized, length int)

// perMessageBatch is a generous estimate of the batch bytes a send, a
// lease or an ack writes per message besides its payload, headers, topic
// and id: the state record, the fixed parts of its keys, Pebble's entry
// headers. A lease sizes ids at typicalIDLen (it has not read them yet):
// a batch of longer ones grows.
const (
	perMessageBatch = 256
	typicalIDLen    = 64
)

func (x *txn) delta(t *topic) *delta {
	for i, u := range x.topics {
		if u == t {
			return &x.deltas[i]
		}
	}
	x.topics = append(x.topics, t)
	x.deltas = append(x.deltas, delta{})
	return &x.deltas[len(x.deltas)-1]
}

// indexEntry is where a record in its state is indexed: a per-topic index
// key (ix >= 0) or, for an acked tombstone, the global a/ key.
type indexEntry struct {
	ix     int
	key    []byte
	global []byte
}

func entryOf(r *store.Record) indexEntry {
	// Room for the longest entry: an index key (prefix, topic, 0, time,
	// seq, a priority byte) or the acked key (prefix, time, topic, 0, id).
	e, _ := entryIn(make([]byte, 0, 20+len(r.Topic)+len(r.ID)), r)
	return e
}

// entryIn is entryOf with the keys built in buf, which it returns for
// reuse: they are valid until buf is next written.
func entryIn(buf []byte, r *store.Record) (indexEntry, []byte) {
	e := indexEntry{ix: -1}
	buf = buf[:0]
	switch r.State {
	case store.StateScheduled:
		e.ix, buf = ixScheduled, appendIndexKey(buf, pfxScheduled, r.Topic, r.DueAt, r.Seq)
	case store.StateReady:
		e.ix = ixReady
		if r.Priority != 0 {
			e.ix = ixReadyPrio
		}
		buf = appendReadyKey(buf, r.Topic, r.Priority, r.DueAt, r.Seq)
	case store.StateInflight:
		e.ix, buf = ixInflight, appendIndexKey(buf, pfxInflight, r.Topic, r.LeaseUntil, r.Seq)
	case store.StateDead:
		e.ix, buf = ixDead, appendIndexKey(buf, pfxDead, r.Topic, r.DeadAt, r.Seq)
	case store.StateAcked:
		e.global = appendGlobalKey(buf, pfxAcked, r.AckedAt, r.Topic, r.ID)
		return e, e.global
	}
	if e.ix >= 0 {
		e.key = buf
	}
	return e, buf
}

// put replaces record old (nil: none) by nw (nil: delete) in topic t.
// old must be the record as the txn read it (readRecord with x), or nil.
//
// The body (b/: payload, headers) is written at insert and when a
// combined record is rewritten, and deleted with the message or when it
// is acked; every other change writes the small state record only, so
// nw's payload is ignored then (it may not even have been read).
func (x *txn) put(t *topic, old, nw *store.Record) {
	var from, to store.State
	oldBody := false // old has a b/ key
	if old != nil {
		from = old.State
		oldBody = !x.combined[old] && old.State != store.StateAcked
		var e indexEntry
		e, x.keys = entryIn(x.keys, old) // deleted: the batch copies them
		if e.key != nil {
			x.del(e.key)
		}
		if e.global != nil {
			x.del(e.global)
		}
	}
	if nw != nil {
		to = nw.State
		x.keys = append(appendTopicPrefix(x.keys[:0], pfxMessage, nw.Topic), nw.ID...)
		mk := x.keys
		switch {
		case writeCombined:
			x.set(mk, encodeRecord(make([]byte, 0, 64+len(nw.Payload)+len(nw.LastError)+len(nw.Receipt)), nw))
		default:
			// Encoded in x.scratch, which Set copies into the batch: no
			// allocation per record (a body is a payload's size).
			x.scratch = encodeState(x.scratch[:0], nw)
			x.set(mk, x.scratch)
			switch newBody := nw.State != store.StateAcked; {
			case newBody && !oldBody:
				x.scratch = encodeBody(x.scratch[:0], nw)
				x.keys = append(appendTopicPrefix(x.keys[:0], pfxBody, nw.Topic), nw.ID...)
				x.set(x.keys, x.scratch)
			case !newBody && oldBody:
				x.keys = append(appendTopicPrefix(x.keys[:0], pfxBody, nw.Topic), nw.ID...)
				x.del(x.keys)
			}
		}
		e := entryOf(nw)
		if e.key != nil {
			v := []byte(nw.ID)
			if nw.State == store.StateScheduled {
				v = scheduledValue(nw)
			}
			x.set(e.key, v)
			x.lows = append(x.lows, lowKey{t, e.ix, e.key})
		}
		if e.global != nil {
			x.set(e.global, nil)
			x.ackedKeys = append(x.ackedKeys, e.global)
		}
	} else if old != nil {
		x.del(messageKey(old.Topic, old.ID))
		if oldBody {
			x.del(bodyKey(old.Topic, old.ID))
		}
	}
	x.delta(t).move(from, to)
}

// txnOp is a write kept for flushOps: key and value point into the
// txn's arena.
type txnOp struct {
	kind       pebble.InternalKeyKind
	key, value []byte
}

// set writes key = value, del deletes key and merge merges value into
// key, in x's batch when apply runs. Bodies (b/) go into the batch at
// once, in the order written; every other write is kept and added by
// apply in key order (see flushOps). The caller may reuse key and value
// when the call returns.
func (x *txn) set(key, value []byte) { x.op(pebble.InternalKeyKindSet, key, value) }

func (x *txn) del(key []byte) { x.op(pebble.InternalKeyKindDelete, key, nil) }

func (x *txn) merge(key, value []byte) { x.op(pebble.InternalKeyKindMerge, key, value) }

func (x *txn) op(kind pebble.InternalKeyKind, key, value []byte) {
	if len(key) > 0 && key[0] == pfxBody {
		// The large values: copied once, straight into the batch. A txn
		// writes bodies in the order of their ids, which is their key
		// order as often as ids are made in order.
		switch kind {
		case pebble.InternalKeyKindSet:
			_ = x.b.Set(key, value, nil)
		case pebble.InternalKeyKindDelete:
			_ = x.b.Delete(key, nil)
		default:
			_ = x.b.Merge(key, value, nil)
		}
		return
	}
	// Earlier ops keep pointing into the arena's old array when append
	// moves it: nothing written there is ever changed.
	n := len(x.arena)
	x.arena = append(append(x.arena, key...), value...)
	k := x.arena[n : n+len(key) : n+len(key)]
	var v []byte
	if value != nil {
		v = x.arena[n+len(key) : len(x.arena) : len(x.arena)]
	}
	x.ops = append(x.ops, txnOp{kind, k, v})
}

// flushOps adds the kept writes to the batch in key order, stably (the
// writes of one key keep their order, so the batch means the same). The
// memtable inserts a batch's keys in order, each searching the skiplist
// from the previous insert's position when the key lies just after it:
// a run of keys in order costs a step or two each, where a txn's own
// order (a message's state, then its index entries, then the next
// message's: a jump to another prefix each time) searched from the top
// every time. Keys are grouped by their prefix byte (a stable counting
// sort), within which a txn mostly writes them in order already; a group
// out of order is sorted.
func (x *txn) flushOps() {
	if len(x.ops) == 0 {
		return
	}
	ops := x.ops
	sorted := true
	for i := 1; i < len(ops); i++ {
		if bytes.Compare(ops[i-1].key, ops[i].key) > 0 {
			sorted = false
			break
		}
	}
	if !sorted {
		var at [257]int // at[c+1]: ops whose key starts with c; then where group c starts
		for _, o := range ops {
			at[int(firstByte(o.key))+1]++
		}
		for c := 1; c <= 256; c++ {
			at[c] += at[c-1]
		}
		start := at
		out := slices.Grow(x.sorted[:0], len(ops))[:len(ops)]
		x.sorted = out
		for _, o := range ops {
			c := firstByte(o.key)
			out[at[c]] = o
			at[c]++
		}
		for c := range 256 {
			g := out[start[c]:start[c+1]]
			for i := 1; i < len(g); i++ {
				if bytes.Compare(g[i-1].key, g[i].key) > 0 {
					slices.SortStableFunc(g, func(a, b txnOp) int { return bytes.Compare(a.key, b.key) })
					break
				}
			}
		}
		ops = out
	}
	for _, o := range ops {
		switch o.kind {
		case pebble.InternalKeyKindSet:
			_ = x.b.Set(o.key, o.value, nil)
		case pebble.InternalKeyKindDelete:
			_ = x.b.Delete(o.key, nil)
		default:
			_ = x.b.Merge(o.key, o.value, nil)
		}
	}
	// Cleared so that kept buffers hold no pointers into arenas GC may
	// free: past len, ops and sorted are always zero.
	clear(x.ops)
	clear(x.sorted)
	x.ops, x.sorted, x.arena = x.ops[:0], x.sorted[:0], x.arena[:0]
}

func firstByte(k []byte) byte {
	if len(k) == 0 {
		return 0
	}
	return k[0]
}

// apply adds the counter merges and applies the batch (see Store.apply);
// on success it updates the in-memory counters and marks. The caller holds
// the lock of every topic in the txn.
func (x *txn) apply(durable bool) error {
	// Per-topic marks are guarded by t.mu, which every scan of the index
	// holds too, so lowering them before the batch is applied is safe (and
	// harmless if the apply fails: a mark only has to be low enough).
	for _, l := range x.lows {
		l.t.lowerKey(l.ix, l.key)
	}
	for i, t := range x.topics {
		if !x.deltas[i].zero() || !t.known {
			x.merge(topicKey(pfxCounters, t.name), encodeCounts(countsFromArray(x.deltas[i])))
		}
	}
	x.flushOps()
	x.keepBuffers()
	if x.b.Empty() {
		return nil
	}
	if sizedHook != nil && x.sized > 0 {
		sizedHook(x.sized, x.b.Len())
	}
	if err := x.s.apply(x.b, durable); err != nil {
		return err
	}
	x.applied = true
	for i, t := range x.topics {
		x.deltas[i].apply(&t.counts)
		t.known = true
	}
	for _, k := range x.ackedKeys {
		x.s.ackedLW.lower(k)
	}
	return nil
}

// wait waits for durability (see Store.wait); call it without locks.
func (x *txn) wait(durable bool) error {
	if !x.applied {
		// Not applied (empty, or apply failed and Pebble may still hold
		// the batch's fsync waiter): nothing to wait for; let GC have it.
		return nil
	}
	return x.s.wait(x.b, durable)
}

// cloneRecord returns a deep copy of r.
func cloneRecord(r *store.Record) *store.Record {
	c := *r
	if r.Payload != nil {
		c.Payload = append([]byte(nil), r.Payload...)
	}
	if r.Headers != nil {
		c.Headers = make(map[string]string, len(r.Headers))
		for k, v := range r.Headers {
			c.Headers[k] = v
		}
	}
	return &c
}
