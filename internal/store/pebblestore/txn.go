package pebblestore

import (
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
	// Keys added to the global indexes; their low-water marks are lowered
	// after the batch is applied (see lowWater.endScan for why after).
	leaseKeys, ackedKeys [][]byte
	// Per-topic index keys added, whose topic marks are lowered in apply:
	// put may run before the topic lock is taken (inserts build their
	// batch outside it), apply always runs under it.
	lows    []lowKey
	applied bool
	// scratch holds a record's encoding until the batch copies it.
	scratch []byte
	sized   int // newTxnSized's estimate (0: newTxn)
	// Records read in the combined layout of formats 1 and 2 (nil until
	// one is read): put writes the body of their new state, which the
	// records read split never need.
	combined map[*store.Record]bool
}

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

func (s *Store) newTxn() *txn { return &txn{s: s, b: s.db.NewBatch()} }

// newTxnSized starts a txn whose batch has room for about size bytes.
// A batch starts at 1 KiB and doubles as it fills, copying itself each
// time; Pebble pools batches, but the pool empties at every GC, which a
// busy server runs many times a second: growing a batch send's 130 KiB
// batch from 1 KiB allocated twice its size, a quarter of the bytes the
// server allocated in a batched drain (issue #20).
func (s *Store) newTxnSized(size int) *txn {
	return &txn{s: s, b: s.db.NewBatchWithSize(size), sized: size}
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
// key (ix >= 0) and/or a global one (l/ for inflight, a/ for acked).
type indexEntry struct {
	ix     int
	key    []byte
	global []byte
}

func entryOf(r *store.Record) indexEntry {
	switch r.State {
	case store.StateScheduled:
		return indexEntry{ix: ixScheduled, key: indexKey(pfxScheduled, r.Topic, r.DueAt, r.Seq)}
	case store.StateReady:
		ix := ixReady
		if r.Priority != 0 {
			ix = ixReadyPrio
		}
		return indexEntry{ix: ix, key: readyKey(r.Topic, r.Priority, r.DueAt, r.Seq)}
	case store.StateInflight:
		return indexEntry{ix: ixInflight, key: indexKey(pfxInflight, r.Topic, r.LeaseUntil, r.Seq),
			global: globalKey(pfxLease, r.LeaseUntil, r.Topic, r.ID)}
	case store.StateDead:
		return indexEntry{ix: ixDead, key: indexKey(pfxDead, r.Topic, r.DeadAt, r.Seq)}
	case store.StateAcked:
		return indexEntry{ix: -1, global: globalKey(pfxAcked, r.AckedAt, r.Topic, r.ID)}
	}
	return indexEntry{ix: -1}
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
		e := entryOf(old)
		if e.key != nil {
			_ = x.b.Delete(e.key, nil)
		}
		if e.global != nil {
			_ = x.b.Delete(e.global, nil)
		}
	}
	if nw != nil {
		to = nw.State
		mk := messageKey(nw.Topic, nw.ID)
		switch {
		case writeCombined:
			_ = x.b.Set(mk, encodeRecord(make([]byte, 0, 64+len(nw.Payload)+len(nw.LastError)+len(nw.Receipt)), nw), nil)
		default:
			// Encoded in x.scratch, which Set copies into the batch: no
			// allocation per record (a body is a payload's size).
			x.scratch = encodeState(x.scratch[:0], nw)
			_ = x.b.Set(mk, x.scratch, nil)
			switch newBody := nw.State != store.StateAcked; {
			case newBody && !oldBody:
				x.scratch = encodeBody(x.scratch[:0], nw)
				_ = x.b.Set(bodyKey(nw.Topic, nw.ID), x.scratch, nil)
			case !newBody && oldBody:
				_ = x.b.Delete(bodyKey(nw.Topic, nw.ID), nil)
			}
		}
		e := entryOf(nw)
		if e.key != nil {
			v := []byte(nw.ID)
			if nw.State == store.StateScheduled {
				v = scheduledValue(nw)
			}
			_ = x.b.Set(e.key, v, nil)
			x.lows = append(x.lows, lowKey{t, e.ix, e.key})
		}
		if e.global != nil {
			_ = x.b.Set(e.global, nil, nil)
			if nw.State == store.StateInflight {
				x.leaseKeys = append(x.leaseKeys, e.global)
			} else {
				x.ackedKeys = append(x.ackedKeys, e.global)
			}
		}
	} else if old != nil {
		_ = x.b.Delete(messageKey(old.Topic, old.ID), nil)
		if oldBody {
			_ = x.b.Delete(bodyKey(old.Topic, old.ID), nil)
		}
	}
	x.delta(t).move(from, to)
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
			_ = x.b.Merge(topicKey(pfxCounters, t.name), encodeCounts(countsFromArray(x.deltas[i])), nil)
		}
	}
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
	for _, k := range x.leaseKeys {
		x.s.leaseLW.lower(k)
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
