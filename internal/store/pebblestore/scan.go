package pebblestore

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"
	"github.com/delayq/delayq/internal/store"
)

// disableLeaseScheduled makes MessageLeaseDue promote before it leases
// even when nothing is ready; set only by BenchmarkLeaseDueRelease, to
// show what leaseScheduled saves.
var disableLeaseScheduled bool

// disableLowWater makes scans start at the front of each index; set only
// by BenchmarkLeaseAfterAcks to show what the marks save.
var disableLowWater bool

// endSuffix is the low-water mark of an index scanned to its end;
// endPrioSuffix that of p/, whose suffixes are one byte longer.
var (
	endSuffix     = bytes.Repeat([]byte{0xff}, 16)
	endPrioSuffix = bytes.Repeat([]byte{0xff}, 17)
)

// indexIter opens an iterator over index ix of topic t, starting at the
// topic's low-water mark: the keys below it were deleted (promoted, leased,
// acked…) and are tombstones an iterator starting at the front would have
// to step over one by one (the "queue on an LSM" trap). The caller holds
// t.mu.
func (s *Store) indexIter(t *topic, ix int, from []byte) (*pebble.Iterator, error) {
	pre := topicPrefix(ixPrefix[ix], t.name)
	lo := pre
	if from == nil && !disableLowWater {
		from = t.lw[ix]
	}
	if from != nil {
		lo = append(slices.Clip(pre), from...)
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(pre)})
	if err != nil {
		return nil, classify("scan index", err)
	}
	return it, nil
}

func suffix(k []byte) []byte { return bytes.Clone(k[len(k)-16:]) }

// indexed reads the record an index entry points to. It returns nil (and
// deletes the entry in x) if the entry is stale, which the store never
// leaves behind but which costs nothing to repair. A record stored as
// scheduled that is reached through its r/ entry was promoted (see
// MessagePromote) and is returned as ready.
func (s *Store) indexed(x *txn, t *topic, key, val []byte, want store.State) (*store.Record, error) {
	id, promotedAt, promoted := parseReadyValue(val)
	r, err := s.readRecord(x, t.name, string(id), true)
	if errors.Is(err, store.ErrNotFound) {
		x.del(key)
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if want == store.StateReady && r.State == store.StateScheduled {
		r.State = store.StateReady
		if promoted {
			r.UpdatedAt = promotedAt
		}
	}
	var buf []byte
	if x != nil {
		buf = x.keys
	}
	e, buf := entryIn(buf, r)
	if x != nil {
		x.keys = buf
	}
	if r.State != want || !bytes.Equal(e.key, key) {
		x.del(key)
		return nil, nil
	}
	return r, nil
}

// MessagePromote implements store.Store. Not fsync'd: a lost promotion is
// redone by the next call.
//
// It moves index entries only: each due s/ key is replaced by the r/ key
// with the same {due}{seq} suffix, whose value carries the promotion time.
// The record (and its payload) is left as it is, stored as scheduled, so
// a promotion writes two small keys per message and reads no record; the
// topic lock, which leases and acks need too, is held that much shorter.
// Readers resolve the state (resolve, indexed).
func (s *Store) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	return s.promote(ctx, p, 0)
}

// MessagePromoteGrace implements store.DueLeaser: MessagePromote of the
// messages due by Now-grace. Those due since are left in s/ for the
// long-polls the engine woke, whose MessageLeaseDue takes them.
func (s *Store) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	return s.promote(ctx, p, max(grace, 0))
}

func (s *Store) promote(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	t := s.lookupTopic(p.Topic)
	if t == nil {
		return &store.PromoteResult{}, nil
	}
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if grace > 0 {
		// The engine calls this right after waking a long-poll, whose
		// lease takes the topic lock to lease what just came due: waiting
		// here for that lease (or making it wait for this call) only
		// delays the release. Skip a busy topic; the engine retries.
		if !t.mu.TryLock() {
			return &store.PromoteResult{Busy: true}, nil
		}
	} else {
		t.mu.Lock()
	}
	defer t.mu.Unlock() // NoSync: nothing to wait for after unlock
	return s.promoteLocked(t, p.Now, p.Now-grace, p.Max)
}

// readyScans counts leases' scans of r/ (for tests).
var readyScans atomic.Int64

// scheduledScans counts promoteLocked's scans of s/ (for tests).
var scheduledScans atomic.Int64

// noneDue reports whether t's s/ low-water mark shows nothing due by now:
// the mark is at most the first key, so no scan can find one. The caller
// holds t.mu.
func noneDue(t *topic, now int64) bool {
	lw := t.lw[ixScheduled]
	if lw == nil || disableLowWater {
		return false // unknown: scan
	}
	due, _, _ := parseIndexSuffix(lw)
	return bytes.Equal(lw, endSuffix) || due > now
}

// promoteLocked promotes up to max messages of t due by cutoff (<= now)
// and applies the batch (no fsync). HeldDue is the first message left in
// s/ that is due by now (cutoff < now only), NextDue the first due after
// now, or the first left when max cut the scan short. The caller holds
// t.mu.
func (s *Store) promoteLocked(t *topic, now, cutoff int64, max int) (*store.PromoteResult, error) {
	res := &store.PromoteResult{}
	scheduledScans.Add(1)
	it, err := s.indexIter(t, ixScheduled, nil)
	if err != nil {
		return nil, err
	}
	x := s.newTxn()
	next := endSuffix
	pre, prePrio := topicPrefix(pfxReady, t.name), []byte(nil)
	var k, v []byte // scratch: the batch copies keys and values
	// s/ is in (due, seq) order: the first key promoted into r/, and into
	// each priority of p/, is the smallest there; it lowers that mark.
	var lowered [256]bool
	for it.First(); it.Valid(); it.Next() {
		due, _, _ := parseIndexSuffix(it.Key())
		if due > cutoff || res.Promoted >= max {
			res.NextDue, next = due, suffix(it.Key())
			if res.Promoted < max && due <= now {
				// Held for the leases: report it and find the first
				// message due after now (at most a grace's worth of keys).
				res.HeldDue, res.NextDue = due, 0
				for it.Next(); it.Valid(); it.Next() {
					if due, _, _ := parseIndexSuffix(it.Key()); due > now {
						res.NextDue = due
						break
					}
				}
			}
			break
		}
		id, prio := parseScheduledValue(it.Value())
		if prio == 0 {
			k = append(append(k[:0], pre...), it.Key()[len(it.Key())-16:]...)
			if !lowered[0] {
				x.lows = append(x.lows, lowKey{t, ixReady, bytes.Clone(k)})
				lowered[0] = true
			}
		} else {
			if prePrio == nil {
				prePrio = topicPrefix(pfxReadyPrio, t.name)
			}
			k = append(append(append(k[:0], prePrio...), prio), it.Key()[len(it.Key())-16:]...)
			if !lowered[prio] {
				x.lows = append(x.lows, lowKey{t, ixReadyPrio, bytes.Clone(k)})
				lowered[prio] = true
			}
		}
		v = appendReadyValue(v[:0], id, now)
		x.del(it.Key())
		x.set(k, v)
		res.Promoted++
	}
	if err := it.Close(); err != nil {
		return nil, classify("scan scheduled", err)
	}
	if res.Promoted > 0 {
		d := x.delta(t)
		d[stateIndex(store.StateScheduled)] -= int64(res.Promoted)
		d[stateIndex(store.StateReady)] += int64(res.Promoted)
	}
	if err := x.apply(false); err != nil {
		return nil, err
	}
	// gofail: var pebblePromoteMid bool
	// if pebblePromoteMid { go func() { panic("gofail: pebblePromoteMid") }(); select {} }
	t.lw[ixScheduled] = next
	return res, x.wait(false)
}

// appendReadyValue appends the value of an r/ entry written by promotion:
// the id, \x00 (never in an id), the promotion time (8 bytes BE).
func appendReadyValue(dst, id []byte, promotedAt int64) []byte {
	dst = append(dst, id...)
	dst = append(dst, 0)
	return binary.BigEndian.AppendUint64(dst, uint64(promotedAt)) // #nosec G115 -- bit reinterpretation for the on-disk encoding, no arithmetic on the result
}

// parseReadyValue splits an index value into the id and, for an r/ entry
// written by promotion, the promotion time. Other index values are the id.
func parseReadyValue(v []byte) (id []byte, promotedAt int64, promoted bool) {
	if n := len(v) - 9; n >= 0 && v[n] == 0 {
		return v[:n], int64(binary.BigEndian.Uint64(v[n+1:])), true // #nosec G115 -- inverse of appendReadyValue: bit reinterpretation for the on-disk encoding, no arithmetic on the result
	}
	return v, 0, false
}

// resolve gives a record read by key its current state: one stored as
// scheduled is ready if promotion moved its index entry to r/ (then its
// UpdatedAt is the promotion time). One more point read, for scheduled
// records only.
func (s *Store) resolve(r *store.Record) error {
	if r.State != store.StateScheduled {
		return nil
	}
	v, err := s.get(readyKey(r.Topic, r.Priority, r.DueAt, r.Seq))
	switch {
	case errors.Is(err, store.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	r.State = store.StateReady
	if _, at, ok := parseReadyValue(v); ok {
		r.UpdatedAt = at
	}
	return nil
}

// MessageLease implements store.Store. Not fsync'd: a lost lease only
// means the message is delivered again.
func (s *Store) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	recs, _, err := s.lease(ctx, p, false)
	return recs, err
}

// MessageLeaseDue implements store.DueLeaser: the due messages still in
// s/ are promoted and leased under one hold of the topic lock, so a
// long-poll woken by the timer releases them without waiting for the
// engine's promotion (a goroutine hand-off and a second lock hold on a
// busy machine). Not fsync'd, as MessageLease.
func (s *Store) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	recs, _, err := s.lease(ctx, p, true)
	return recs, err
}

// MessageLeaseDueNext implements store.NextDueLeaser: NextDue is s/'s
// low-water mark as the lease left it, which is at most the first key
// (the lease's scan of s/ set it to the first key it left; a send below
// it lowers it).
func (s *Store) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (*store.LeaseDueResult, error) {
	recs, next, err := s.lease(ctx, p, true)
	if err != nil {
		return nil, err
	}
	return &store.LeaseDueResult{Records: recs, NextDue: next}, nil
}

// ReportsNextDue implements store.NextDueLeaser.
func (s *Store) ReportsNextDue() bool { return true }

// lease leases under the topic lock and returns, for due, the due time
// of s/'s low-water mark (0: s/ is empty; p.Now when the mark is not
// known yet, so that the caller looks again soon).
func (s *Store) lease(ctx context.Context, p *store.MessageLeaseParams, due bool) (_ []*store.Record, nextDue int64, _ error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	t := s.lookupTopic(p.Topic)
	if t == nil || p.Max <= 0 {
		return nil, 0, nil
	}
	if err := s.checkWritable(); err != nil {
		return nil, 0, err
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	out, err := s.leaseLocked(t, p, due)
	if err != nil || !due {
		return out, 0, err
	}
	switch lw := t.lw[ixScheduled]; {
	case lw == nil || disableLowWater:
		nextDue = p.Now
	case !bytes.Equal(lw, endSuffix):
		nextDue, _, _ = parseIndexSuffix(lw)
	}
	return out, nextDue, nil
}

// leaseLocked is lease's work; the caller holds t.mu.
func (s *Store) leaseLocked(t *topic, p *store.MessageLeaseParams, due bool) ([]*store.Record, error) {
	if due && t.counts.Ready == 0 && !disableLeaseScheduled && !noneDue(t, p.Now) {
		out, done, err := s.leaseScheduled(t, p)
		if err != nil || done {
			return out, err
		}
	}
	if due && !noneDue(t, p.Now) {
		// Up to Max, all ready: the lease below then takes them in lease
		// order with what was ready before. It takes fewer than Max only
		// when nothing due is left ready; at Max the engine wakes another
		// long-poll for the rest. Skipped when the mark shows nothing due
		// (a consumer back for more between due times): no s/ iterator.
		if _, err := s.promoteLocked(t, p.Now, p.Now, p.Max); err != nil {
			return nil, err
		}
	}
	// r/ and p/ known empty (their marks at the end: a scan found nothing
	// and nothing was added below since): nothing to lease, and no
	// iterator. A consumer back for more between due times (a long-poll's
	// first look and its last) paid a seek of every memtable and level for
	// an empty range, a few percent of a paced run's server CPU.
	readyEmpty := !disableLowWater && bytes.Equal(t.lw[ixReady], endSuffix)
	if readyEmpty && bytes.Equal(t.lw[ixReadyPrio], endPrioSuffix) {
		return nil, nil
	}
	// Sized for what it may take (the promotion above counted the due
	// messages ready): an empty poll keeps a small batch, even on a topic
	// with a large schedule.
	n := max(min(int64(p.Max), t.counts.Ready), 1)
	size := int(n) * (perMessageBatch + 4*len(p.Topic) + 2*typicalIDLen) // #nosec G115 -- n ≤ p.Max, an int
	x := s.newTxnSized(size, size)
	defer x.readInOrder(int(n))()
	var out []*store.Record
	next := endSuffix
	if !readyEmpty {
		var err error
		if out, next, err = s.leaseReady(x, t, p); err != nil {
			return nil, err
		}
	}
	// Then priorities 1-255 (p/), unless p/ is known to be empty: a topic
	// that only ever had priority 0 pays no iterator here.
	nextPrio := t.lw[ixReadyPrio]
	if len(out) < p.Max && !bytes.Equal(nextPrio, endPrioSuffix) {
		var err error
		if out, nextPrio, err = s.leasePrio(x, t, p, out); err != nil {
			return nil, err
		}
	}
	if err := s.applyLease(x); err != nil {
		return nil, err
	}
	t.lw[ixReady] = next
	t.lw[ixReadyPrio] = nextPrio
	return out, nil
}

// applyLease applies a lease's batch (either walk: r/ and p/, or straight
// from s/) and waits for it as leases do (no fsync of their own). The
// failpoint between the two is the crash of S2's "lease batch applied,
// before the response" (test/reliability), on every lease that took a
// message. A mark a lease would raise is raised only after this succeeds;
// left lower, it is only a longer scan.
func (s *Store) applyLease(x *txn) error {
	if err := x.apply(false); err != nil {
		return err
	}
	// gofail: var pebbleLeaseBeforeReply bool
	// if pebbleLeaseBeforeReply { go func() { panic("gofail: pebbleLeaseBeforeReply") }(); select {} }
	return x.wait(false)
}

// leaseReady is leaseLocked's walk of r/ (priority 0, in due order) into
// x. It returns the first key it left in place (or the end), for r/'s
// low-water mark.
func (s *Store) leaseReady(x *txn, t *topic, p *store.MessageLeaseParams) (out []*store.Record, next []byte, err error) {
	readyScans.Add(1)
	it, err := s.indexIter(t, ixReady, nil)
	if err != nil {
		return nil, nil, err
	}
	next = endSuffix
	for it.First(); it.Valid(); it.Next() {
		// Stop at a message due after Now: a promotion by a caller with a
		// later reading of the clock may have raced this lease, and handing
		// it out would be early by this lease's own time. r/ holds
		// priority 0 alone, in due order, so nothing after it is due.
		if due, _, _ := parseIndexSuffix(it.Key()); len(out) >= p.Max || due > p.Now {
			next = suffix(it.Key())
			break
		}
		if out, err = s.leaseEntry(x, t, it.Key(), it.Value(), store.StateReady, p, out); err != nil {
			_ = it.Close()
			return nil, nil, err
		}
	}
	if err := it.Close(); err != nil {
		return nil, nil, classify("scan ready", err)
	}
	return out, next, nil
}

// leaseEntry leases the message of one index entry (key, val) into x and
// appends it to out, unless the entry is stale (its record is no longer in
// state want): every lease path walks an index and does this per entry.
func (s *Store) leaseEntry(x *txn, t *topic, key, val []byte, want store.State, p *store.MessageLeaseParams, out []*store.Record) ([]*store.Record, error) {
	r, err := s.indexed(x, t, key, val, want)
	if err != nil || r == nil {
		return out, err
	}
	nw := leaseRecord(r, p)
	x.put(t, r, nw)
	return append(out, nw), nil // encoded into the batch: not kept by the store
}

// leaseScheduled is MessageLeaseDue when nothing is ready: the due s/
// entries are then all a lease can take, so when there are at most Max of
// them it leases them straight from s/. Promoting them first would write
// an r/ entry per message (and apply a batch of its own) that the same
// lock hold deletes again: on a queue whose consumers keep up, that is
// every release. With more than Max due it leases nothing and answers
// done false: which Max come first is the lease order (priority first),
// and the caller promotes and leases in that order.
func (s *Store) leaseScheduled(t *topic, p *store.MessageLeaseParams) (out []*store.Record, done bool, err error) {
	scheduledScans.Add(1)
	it, err := s.indexIter(t, ixScheduled, nil)
	if err != nil {
		return nil, false, err
	}
	type dueEntry struct{ key, id []byte }
	var due []dueEntry
	next := endSuffix
	for it.First(); it.Valid(); it.Next() {
		if d, _, _ := parseIndexSuffix(it.Key()); d > p.Now {
			next = suffix(it.Key())
			break
		}
		if len(due) == p.Max {
			if err := it.Close(); err != nil {
				return nil, false, classify("scan scheduled", err)
			}
			return nil, false, nil
		}
		id, _ := parseScheduledValue(it.Value())
		due = append(due, dueEntry{bytes.Clone(it.Key()), bytes.Clone(id)})
	}
	if err := it.Close(); err != nil {
		return nil, false, classify("scan scheduled", err)
	}
	size := len(due) * (perMessageBatch + 4*len(p.Topic) + 2*typicalIDLen)
	x := s.newTxnSized(size, size)
	defer x.readInOrder(len(due))()
	out = make([]*store.Record, 0, len(due))
	for _, e := range due {
		if out, err = s.leaseEntry(x, t, e.key, e.id, store.StateScheduled, p, out); err != nil {
			return nil, false, err
		}
	}
	// s/ is in (due, seq) order; the answer is in lease order.
	slices.SortStableFunc(out, func(a, b *store.Record) int { return cmp.Compare(a.Priority, b.Priority) })
	if err := s.applyLease(x); err != nil {
		return nil, false, err
	}
	t.lw[ixScheduled] = next
	return out, true, nil
}

// leasePrio is MessageLease's walk of p/, from the lowest priority:
// within a priority entries are in due order, so the first not due ends
// that priority and the walk goes on with the next one. Each priority is
// scanned from its own mark (topic.prioLW). It returns the first key it
// left in place (or the end), for p/'s low-water mark.
func (s *Store) leasePrio(x *txn, t *topic, p *store.MessageLeaseParams, out []*store.Record) ([]*store.Record, []byte, error) {
	pr, err := s.newPrioIter(t)
	if err != nil {
		return nil, nil, err
	}
	defer pr.close()
	var firstLeft []byte
	q := 1
	for ; q <= 255 && len(out) < p.Max; q++ {
		var ok bool
		if q, ok = pr.next(q); !ok {
			q = 256
			break
		}
		left := endSuffix
		for valid := true; valid; valid = pr.it.Next() {
			k := pr.it.Key()
			if due, _, _ := parseIndexSuffix(k); len(out) >= p.Max || due > p.Now {
				left = bytes.Clone(k[len(k)-16:])
				break
			}
			if out, err = s.leaseEntry(x, t, k, pr.it.Value(), store.StateReady, p, out); err != nil {
				return nil, nil, err
			}
		}
		if err := pr.it.Error(); err != nil {
			return nil, nil, classify("scan ready", err)
		}
		t.prioLW[q] = left
		if firstLeft == nil && !bytes.Equal(left, endSuffix) {
			firstLeft = append([]byte{byte(q)}, left...) // #nosec G115 -- q is a priority, 1..255
		}
	}
	switch {
	case firstLeft != nil:
	case q <= 255: // stopped at Max before priority q: it and later ones may hold keys
		firstLeft = append([]byte{byte(q)}, make([]byte, 16)...) // #nosec G115 -- q is a priority, 1..255
	default:
		firstLeft = endPrioSuffix
	}
	return out, firstLeft, nil
}

// prioIter walks p/ one priority at a time, each from its mark.
type prioIter struct {
	t   *topic
	it  *pebble.Iterator
	pre []byte
}

func (s *Store) newPrioIter(t *topic) (*prioIter, error) {
	if t.prioLW == nil {
		t.prioLW = new([256][]byte)
	}
	pre := topicPrefix(pfxReadyPrio, t.name)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: pre, UpperBound: prefixEnd(pre)})
	if err != nil {
		return nil, classify("scan index", err)
	}
	return &prioIter{t: t, it: it, pre: pre}, nil
}

func (pr *prioIter) close() { _ = pr.it.Close() }

// next positions the iterator at the first key of the lowest priority >=
// from (1..255) that has one, bounded to that priority, and returns it;
// false if none has. Priorities known empty cost nothing; one of unknown
// state costs a seek over the rest of p/ (once after Open).
func (pr *prioIter) next(from int) (int, bool) {
	marks := pr.t.prioLW
	for q := from; q <= 255; q++ {
		if bytes.Equal(marks[q], endSuffix) {
			continue
		}
		if marks[q] == nil {
			pr.it.SetBounds(append(slices.Clip(pr.pre), byte(q)), prefixEnd(pr.pre)) // #nosec G115 -- q is a priority, 1..255
			if !pr.it.First() {
				for r := q; r <= 255; r++ {
					marks[r] = endSuffix
				}
				return 0, false
			}
			k := pr.it.Key()
			kp := int(k[len(k)-17])
			for r := q; r < kp; r++ {
				marks[r] = endSuffix
			}
			q = kp
			if marks[q] == nil {
				marks[q] = bytes.Clone(k[len(k)-16:])
			}
		}
		lo := append(append(slices.Clip(pr.pre), byte(q)), marks[q]...) // #nosec G115 -- q is a priority, 1..255
		hi := prefixEnd(append(slices.Clip(pr.pre), byte(q)))           // #nosec G115 -- q is a priority, 1..255
		pr.it.SetBounds(lo, hi)
		if pr.it.First() {
			return q, true
		}
		marks[q] = endSuffix
	}
	return 0, false
}

// globalCand is one entry of the global a/ index, or of a topic's i/
// index for LeaseExpire (whose topic and id it carries the same way).
type globalCand struct {
	key   []byte
	t     int64
	topic string
	id    string
}

// scanGlobal collects up to max entries of global index p with time <=
// upTo, starting at the index's low-water mark, and returns the key the
// mark may move to once they are all dealt with.
func (s *Store) scanGlobal(p byte, from []byte, upTo int64, max int) ([]globalCand, []byte, error) {
	lo := []byte{p, '/'}
	if from != nil && bytes.Compare(from, lo) > 0 {
		lo = from
	}
	hi := globalUpper(p, upTo)
	if bytes.Compare(lo, hi) >= 0 {
		return nil, lo, nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, nil, classify("scan index", err)
	}
	var out []globalCand
	next := hi
	for it.First(); it.Valid(); it.Next() {
		if len(out) >= max {
			next = bytes.Clone(it.Key())
			break
		}
		t, topic, id, ok := parseGlobalKey(it.Key())
		if !ok {
			_ = it.Close()
			return nil, nil, fmt.Errorf("pebblestore: bad index key %q: %w", it.Key(), store.ErrCorrupt)
		}
		out = append(out, globalCand{bytes.Clone(it.Key()), t, topic, id})
	}
	if err := it.Close(); err != nil {
		return nil, nil, classify("scan index", err)
	}
	return out, next, nil
}

func candTopics(cs []globalCand) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = c.topic
	}
	return names
}

// LeaseExpire implements store.Store. Not fsync'd: a lost expiry is redone.
//
// There is no store-wide index of leases (format 4 dropped l/, two key
// writes per delivered message): the expired ones are found in each
// topic's i/ index, whose low-water mark lets a topic with no lease over
// be passed without an iterator. The engine sweeps when the earliest
// lease ends, as TopicList reports it, and TopicList already visits every
// topic.
func (s *Store) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	cands, err := s.expiredLeases(p.Now, p.Max)
	if err != nil || len(cands) == 0 {
		return nil, err
	}
	ts, unlock := s.lockTopics(candTopics(cands))
	defer unlock()
	x := s.newTxn()
	var out []*store.Record
	for _, c := range cands {
		t := ts[slices.IndexFunc(ts, func(t *topic) bool { return t.name == c.topic })]
		r, err := s.readRecord(x, c.topic, c.id, true)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		if r == nil || r.State != store.StateInflight || r.LeaseUntil != c.t {
			// Acked, nacked or extended since the scan (which deleted
			// this entry), or a stale entry: deleting it is harmless.
			x.del(c.key)
			continue
		}
		nw := failRecord(r, p.Now, p.Now, "lease expired", false)
		x.put(t, r, nw)
		out = append(out, cloneRecord(nw))
	}
	if err := x.apply(false); err != nil {
		return nil, err
	}
	return out, x.wait(false)
}

// expiredLeases collects up to max inflight entries with LeaseUntil <=
// now across all topics, earliest LeaseUntil first (then topic, then
// seq), each topic's read under its lock.
func (s *Store) expiredLeases(now int64, max int) ([]globalCand, error) {
	s.topicsMu.RLock()
	ts := make([]*topic, 0, len(s.topics))
	for _, t := range s.topics {
		ts = append(ts, t)
	}
	s.topicsMu.RUnlock()
	order := func(a, b globalCand) int {
		return cmp.Or(cmp.Compare(a.t, b.t), cmp.Compare(a.topic, b.topic), bytes.Compare(a.key, b.key))
	}
	var out []globalCand
	for _, t := range ts {
		t.mu.Lock()
		cs, err := s.expiredIn(t, now, max)
		t.mu.Unlock()
		if err != nil {
			return nil, err
		}
		out = append(out, cs...)
		if len(out) > 2*max { // bound the memory of a sweep over many topics
			slices.SortFunc(out, order)
			out = out[:max]
		}
	}
	slices.SortFunc(out, order)
	return out[:min(len(out), max)], nil
}

// expiredIn reads up to max of t's inflight entries with LeaseUntil <=
// now, in (LeaseUntil, Seq) order, and raises the i/ mark to the first
// entry it saw. The caller holds t.mu.
func (s *Store) expiredIn(t *topic, now int64, max int) ([]globalCand, error) {
	if lw := t.lw[ixInflight]; lw != nil && !disableLowWater {
		if until, _, _ := parseIndexSuffix(lw); bytes.Equal(lw, endSuffix) || until > now {
			return nil, nil
		}
	}
	it, err := s.indexIter(t, ixInflight, nil)
	if err != nil {
		return nil, err
	}
	var out []globalCand
	first := true
	for it.First(); it.Valid() && len(out) < max; it.Next() {
		k := it.Key()
		until, _, ok := parseIndexSuffix(k)
		if !ok {
			_ = it.Close()
			return nil, fmt.Errorf("pebblestore: bad index key %q: %w", k, store.ErrCorrupt)
		}
		if first {
			t.lw[ixInflight], first = suffix(k), false
		}
		if until > now {
			break
		}
		out = append(out, globalCand{bytes.Clone(k), until, t.name, string(it.Value())})
	}
	if err := it.Close(); err != nil {
		return nil, classify("scan index", err)
	}
	if first {
		t.lw[ixInflight] = endSuffix // no lease at all
	}
	return out, nil
}

// DedupPurge implements store.Store. Not fsync'd: a lost purge leaves
// tombstones that the next call removes.
func (s *Store) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (int, error) {
	done, err := s.start(ctx)
	if err != nil {
		return 0, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return 0, err
	}
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()
	var next []byte
	defer func() { s.ackedLW.endScan(next) }()
	cands, nextKey, err := s.scanGlobal(pfxAcked, s.ackedLW.startScan(), p.Now-p.Window, p.Max)
	if err != nil || len(cands) == 0 {
		next = nextKey
		return 0, err
	}
	ts, unlock := s.lockTopics(candTopics(cands))
	defer unlock()
	x := s.newTxn()
	n := 0
	for _, c := range cands {
		t := ts[slices.IndexFunc(ts, func(t *topic) bool { return t.name == c.topic })]
		r, err := s.readRecord(x, c.topic, c.id, false)
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			return 0, err
		}
		if r == nil || r.State != store.StateAcked || r.AckedAt != c.t {
			x.del(c.key)
			continue
		}
		x.put(t, r, nil)
		n++
	}
	if err := x.apply(false); err != nil {
		return 0, err
	}
	next = nextKey
	return n, x.wait(false)
}

// deadCursor encodes the position after a dead-index entry.
func deadCursor(sfx []byte) string { return hex.EncodeToString(sfx) }

// DeadList implements store.Store. Limit <= 0 returns nothing (as
// memstore). An unparsable cursor is store.ErrBadCursor.
func (s *Store) DeadList(ctx context.Context, p *store.DeadListParams) ([]*store.Record, string, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	limit := p.Limit
	if limit <= 0 {
		return nil, "", nil
	}
	var after []byte
	if p.Cursor != "" {
		after, err = hex.DecodeString(p.Cursor)
		if err != nil || len(after) != 16 {
			return nil, "", fmt.Errorf("pebblestore: invalid dead-list cursor %q: %w", p.Cursor, store.ErrBadCursor)
		}
	}
	t := s.lookupTopic(p.Topic)
	if t == nil {
		return nil, "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	from := after
	if from != nil && t.lw[ixDead] != nil && bytes.Compare(from, t.lw[ixDead]) < 0 {
		from = t.lw[ixDead]
	}
	it, err := s.indexIter(t, ixDead, from)
	if err != nil {
		return nil, "", err
	}
	defer it.Close()
	var out []*store.Record
	cursor, last, firstLive := "", []byte(nil), endSuffix
	for it.First(); it.Valid(); it.Next() {
		sfx := it.Key()[len(it.Key())-16:]
		if after != nil && bytes.Equal(sfx, after) {
			continue
		}
		if last == nil {
			firstLive = bytes.Clone(sfx)
		}
		if len(out) >= limit {
			cursor = deadCursor(last)
			break
		}
		last = bytes.Clone(sfx)
		r, err := s.getRecord(t.name, string(it.Value()))
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, "", err
		}
		if r.State == store.StateDead {
			out = append(out, r)
		}
	}
	if err := it.Error(); err != nil {
		return nil, "", classify("scan dead", err)
	}
	if p.Cursor == "" {
		// A first page saw the first live key: later scans skip the
		// tombstones before it.
		t.lw[ixDead] = firstLive
	}
	return out, cursor, nil
}
