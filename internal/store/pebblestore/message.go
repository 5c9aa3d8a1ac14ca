package pebblestore

import (
	"context"
	"errors"
	"strconv"
	"sync"

	"github.com/delayq/delayq/internal/store"
)

// begin plus a context check: a cancelled context stops an operation
// before it writes anything.
func (s *Store) start(ctx context.Context) (func(), error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return s.begin()
}

// MessageInsertMany implements store.Store. Durable (fsync'd) on nil error.
//
// Only the batch apply runs under the topic lock: the dedup lookups, the
// records' encoding and the batch build run before it, so concurrent
// senders to one topic overlap everything but the apply, and wait for
// their shared WAL fsync after it. Ids are claimed first (t.ins) so that
// two inserts of the same id cannot both look it up, miss and write it.
func (s *Store) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	if err := s.checkSpace(); err != nil {
		return nil, err
	}
	// gofail: var pebbleInsertBeforeBatch bool
	// if pebbleInsertBeforeBatch { go func() { panic("gofail: pebbleInsertBeforeBatch") }(); select {} }
	t := s.topic(p.Topic)
	unclaim, err := t.ins.claim(ctx, p.Messages)
	if err != nil {
		return nil, err
	}
	size, bodies := insertBatchSize(p)
	x := s.newTxnSized(size, size-bodies)
	res, first, dups, err := s.insertBuild(t, x, p)
	if err == nil {
		t.mu.Lock()
		if err = s.insertDups(t, x, p, res, first, dups); err == nil {
			revive := t.revive(x)
			if err = x.apply(true); err == nil {
				revive()
			}
		}
		t.mu.Unlock()
	}
	// Applied records are visible to later lookups: the ids are free to
	// be claimed again.
	unclaim()
	if err != nil {
		return nil, err
	}
	// gofail: var pebbleInsertBeforeSync bool
	// if pebbleInsertBeforeSync { go func() { panic("gofail: pebbleInsertBeforeSync") }(); select {} }
	if err := x.wait(true); err != nil {
		return nil, err
	}
	// Duplicates are answered from records read, maybe written by a send
	// whose fsync is still pending (it released the ids before its sync):
	// if nothing of ours was synced after them, wait for theirs.
	if len(dups) > 0 && !x.applied {
		if err := s.syncBarrier(); err != nil {
			return nil, err
		}
	}
	// gofail: var pebbleInsertAfterSync bool
	// if pebbleInsertAfterSync { go func() { panic("gofail: pebbleInsertAfterSync") }(); select {} }
	return res, nil
}

// insertBatchSize estimates the bytes of p's batch, and of the bodies in
// it: per message its body, its state record and Pebble's entry headers
// (see perMessageBatch), the topic in its three keys and the id in those
// of the record and body and in the index entry's value.
func insertBatchSize(p *store.MessageInsertManyParams) (size, bodies int) {
	size = 64
	for i := range p.Messages {
		m := &p.Messages[i]
		body := len(m.Payload) + 16
		for k, v := range m.Headers {
			body += len(k) + len(v) + 4
		}
		bodies += body
		size += body + perMessageBatch + 3*(len(p.Topic)+len(m.ID))
	}
	return size, bodies
}

// ackBatchSize estimates the bytes of p's batch: per message its state
// record and Pebble's entry headers (see perMessageBatch), the topic in
// five keys (the record, body, both index entries deleted, the acked
// entry) and the id in four.
func ackBatchSize(p *store.MessageAckManyParams) int {
	n := 64
	for _, it := range p.Items {
		n += perMessageBatch + 5*len(p.Topic) + 4*len(it.ID) + len(it.Receipt)
	}
	return n
}

// insertBuild looks the ids up and puts the new records in x. The caller
// holds the claims of the ids, not the topic lock: an id found here is
// only noted in dups (insertDups reads it again under the lock, since it
// may have been leased, acked, cancelled or purged meanwhile), while an
// id not found stays absent, since no other insert can write it.
func (s *Store) insertBuild(t *topic, x *txn, p *store.MessageInsertManyParams) (res []store.InsertResult, first uint64, dups []int, err error) {
	first, err = s.allocSeqs(len(p.Messages))
	if err != nil {
		return nil, 0, nil, err
	}
	res = make([]store.InsertResult, len(p.Messages))
	var pending map[string]*store.Record // ids inserted earlier in this call
	var found map[string]bool            // ids found earlier in this call
	for i := range p.Messages {
		m := &p.Messages[i]
		if m.Generated {
			// A fresh engine-made id: nothing to look up (and nothing
			// was claimed). This lookup was a third of a send's CPU.
			_, res[i].Record = s.newRecord(t, x, p, first, i)
			continue
		}
		if r := pending[m.ID]; r != nil {
			res[i] = store.InsertResult{Record: cloneRecord(r), Duplicate: true}
			continue
		}
		// An id found once is settled by insertDups for every mention:
		// looked up again, it may be gone (cancelled, purged) by now,
		// and this call would create it here and again there.
		if found[m.ID] {
			dups = append(dups, i)
			continue
		}
		_, err := s.get(messageKey(p.Topic, m.ID))
		if err == nil {
			if found == nil {
				found = make(map[string]bool)
			}
			found[m.ID] = true
			dups = append(dups, i)
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, 0, nil, err
		}
		r, answer := s.newRecord(t, x, p, first, i)
		if pending == nil {
			pending = make(map[string]*store.Record)
		}
		pending[m.ID] = r
		res[i] = store.InsertResult{Record: answer}
	}
	return res, first, dups, nil
}

// newRecord puts message i of p in x as a new record. It returns the
// record, whole, for answers to later mentions of its id in this call
// (which copy it; with p.SenderKeepsBodies it shares the caller's payload
// and headers), and the answer for message i, which shares nothing with
// the caller: the record, or with p.SenderKeepsBodies a copy without
// payload and headers.
func (s *Store) newRecord(t *topic, x *txn, p *store.MessageInsertManyParams, first uint64, i int) (r, answer *store.Record) {
	m := &p.Messages[i]
	r = &store.Record{
		Topic: p.Topic, ID: m.ID, Seq: first + uint64(i), // #nosec G115 -- i is a slice index (≥ 0) within the n seqs allocSeqs reserved
		State: store.StateScheduled, Payload: m.Payload, Headers: m.Headers,
		DueAt: m.Due(p.Now), CreatedAt: p.Now, UpdatedAt: p.Now, MaxAttempts: m.MaxAttempts, Priority: m.Priority,
	}
	if r.DueAt <= p.Now {
		r.State = store.StateReady
	}
	if !p.SenderKeepsBodies {
		r = cloneRecord(r) // the answer must not alias the caller's input
		x.put(t, nil, r)
		return r, r
	}
	x.put(t, nil, r) // copies what it writes
	a := *r
	a.Payload, a.Headers = nil, nil
	return r, &a
}

// insertDups settles the ids insertBuild found, under the topic lock:
// the record as it is now, or a new one if it is gone (its seq was
// reserved with the others).
func (s *Store) insertDups(t *topic, x *txn, p *store.MessageInsertManyParams, res []store.InsertResult, first uint64, dups []int) error {
	var created map[string]*store.Record // gone ids re-created here, not applied yet
	for _, i := range dups {
		id := p.Messages[i].ID
		if r := created[id]; r != nil {
			res[i] = store.InsertResult{Record: cloneRecord(r), Duplicate: true}
			continue
		}
		r, err := s.getRecord(p.Topic, id)
		switch {
		case errors.Is(err, store.ErrNotFound):
			var answer *store.Record
			r, answer = s.newRecord(t, x, p, first, i)
			if created == nil {
				created = make(map[string]*store.Record)
			}
			created[id] = r
			res[i] = store.InsertResult{Record: answer}
			continue
		case err != nil:
			return err
		}
		if err := s.resolve(r); err != nil {
			return err
		}
		res[i] = store.InsertResult{Record: r, Duplicate: true}
	}
	return nil
}

// inserts holds the ids of a topic that inserts in progress have claimed:
// from before their dedup lookups until their batch is applied.
type inserts struct {
	mu     sync.Mutex
	claims map[string]chan struct{} // closed when the claim is released
}

// claim claims every id of ms, waiting while another insert holds any of
// them. It claims all or none (no hold-and-wait, so no deadlock between
// batches naming the same ids in different orders). The returned func
// releases the claims.
func (in *inserts) claim(ctx context.Context, ms []store.InsertMessage) (func(), error) {
	mine := make(chan struct{})
	for {
		in.mu.Lock()
		if in.claims == nil {
			in.claims = make(map[string]chan struct{})
		}
		var busy chan struct{}
		for i := range ms {
			if ms[i].Generated {
				continue // unique: never looked up, never claimed
			}
			if c, ok := in.claims[ms[i].ID]; ok && c != mine {
				busy = c
				break
			}
		}
		if busy == nil {
			n := 0
			for i := range ms {
				if !ms[i].Generated {
					in.claims[ms[i].ID] = mine
					n++
				}
			}
			in.mu.Unlock()
			if n == 0 {
				return func() {}, nil
			}
			return func() {
				in.mu.Lock()
				for i := range ms {
					if !ms[i].Generated && in.claims[ms[i].ID] == mine {
						delete(in.claims, ms[i].ID)
					}
				}
				in.mu.Unlock()
				close(mine)
			}, nil
		}
		in.mu.Unlock()
		select {
		case <-busy:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// MessageGet implements store.Store.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (*store.Record, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	r, err := s.getRecord(topic, id)
	if err != nil || r.State != store.StateScheduled {
		return r, err
	}
	// Scheduled or promoted: read the record and its index entry under
	// the topic lock, so that the two reads agree.
	t := s.lookupTopic(topic)
	if t == nil {
		return r, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if r, err = s.getRecord(topic, id); err != nil {
		return nil, err
	}
	if err := s.resolve(r); err != nil {
		return nil, err
	}
	return r, nil
}

// update runs a read-modify-write of one message under its topic lock:
// fn gets the current record and returns the new one (nil: delete) and
// the record to return. The batch is durable unless durable is false.
// fn's record has its payload and headers only if withBody.
func (s *Store) update(ctx context.Context, topicName, id string, durable, withBody bool,
	fn func(r *store.Record) (nw, ret *store.Record, err error)) (*store.Record, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	t := s.lookupTopic(topicName)
	if t == nil {
		return nil, store.ErrNotFound
	}
	x := s.newTxn()
	ret, err := func() (*store.Record, error) {
		t.mu.Lock()
		defer t.mu.Unlock()
		r, err := s.readRecord(x, topicName, id, withBody)
		if err != nil {
			return nil, err
		}
		if err := s.resolve(r); err != nil {
			return nil, err
		}
		nw, ret, err := fn(r)
		if err != nil {
			return nil, err
		}
		x.put(t, r, nw)
		return ret, x.apply(durable)
	}()
	if err != nil {
		return nil, err
	}
	if err := x.wait(durable); err != nil {
		return nil, err
	}
	// gofail: var pebbleUpdateAfterSync bool
	// if pebbleUpdateAfterSync { go func() { panic("gofail: pebbleUpdateAfterSync") }(); select {} }
	return ret, nil
}

// MessageCancel implements store.Store. Durable on nil error.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		switch r.State {
		case store.StateScheduled, store.StateReady, store.StateInflight:
			return nil, r, nil
		}
		return nil, nil, store.ErrConflict
	})
}

// MessageReschedule implements store.Store. Durable on nil error.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		if r.State != store.StateScheduled && r.State != store.StateReady {
			return nil, nil, store.ErrConflict
		}
		nw := cloneRecord(r)
		nw.DueAt, nw.UpdatedAt = p.Due(p.Now), p.Now
		nw.State = store.StateScheduled
		if nw.DueAt <= p.Now {
			nw.State = store.StateReady
		}
		return nw, cloneRecord(nw), nil
	})
}

// checkLease returns ErrConflict unless r is inflight with this receipt.
func checkLease(r *store.Record, receipt string) error {
	if r.State != store.StateInflight || r.Receipt != receipt {
		return store.ErrConflict
	}
	return nil
}

// ackedRecord is r as an acked tombstone: payload and headers dropped,
// lease end cleared, its receipt kept (a retried ack is answered ok).
func ackedRecord(r *store.Record, now int64) *store.Record {
	nw := *r
	nw.State, nw.AckedAt, nw.UpdatedAt = store.StateAcked, now, now
	// gofail: var pebbleDedupRecord bool
	// if pebbleDedupRecord { go func() { panic("gofail: pebbleDedupRecord") }(); select {} }
	nw.Payload, nw.Headers, nw.LeaseUntil = nil, nil, 0 // the receipt that acked stays
	return &nw
}

// MessageAck implements store.Store. Durable on nil error.
func (s *Store) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	// An ack drops the body: no need to read it.
	_, err := s.update(ctx, p.Topic, p.ID, true, false, func(r *store.Record) (*store.Record, *store.Record, error) {
		if err := checkLease(r, p.Receipt); err != nil {
			return nil, nil, err
		}
		return ackedRecord(r, p.Now), nil, nil
	})
	return err
}

// MessageAckMany implements store.Store: one batch, one fsync.
func (s *Store) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, err
	}
	errs := make([]error, len(p.Items))
	t := s.lookupTopic(p.Topic)
	if t == nil {
		for i := range errs {
			errs[i] = store.ErrNotFound
		}
		return errs, nil
	}
	size := ackBatchSize(p)
	x := s.newTxnSized(size, size)
	err = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		defer x.readInOrder(len(p.Items))()
		acked := make(map[string]bool, len(p.Items))
		for i, it := range p.Items {
			if acked[it.ID] {
				errs[i] = store.ErrConflict // acked earlier in this call
				continue
			}
			r, err := s.readRecord(x, p.Topic, it.ID, false) // acked: the body goes unread
			if errors.Is(err, store.ErrNotFound) {
				errs[i] = err
				continue
			}
			if err != nil {
				return err
			}
			if errs[i] = checkLease(r, it.Receipt); errs[i] != nil {
				continue
			}
			x.put(t, r, ackedRecord(r, p.Now))
			acked[it.ID] = true
		}
		return x.apply(true)
	}()
	if err != nil {
		return nil, err
	}
	if err := x.wait(true); err != nil {
		return nil, err
	}
	return errs, nil
}

// failRecord applies one failure (nack or lease expiry) to an inflight
// record: Failures+1, then dead if it reached MaxAttempts or final, else
// due at retryAt (ready if retryAt <= now).
func failRecord(r *store.Record, now, retryAt int64, reason string, final bool) *store.Record {
	nw := cloneRecord(r)
	nw.Failures++
	nw.LastError, nw.UpdatedAt = reason, now
	nw.LeaseUntil = 0 // Receipt stays: the failed delivery's (store.Record)
	switch {
	case final || nw.Failures >= nw.MaxAttempts:
		nw.State, nw.DeadAt = store.StateDead, now
		// gofail: var pebbleDeadMove bool
		// if pebbleDeadMove { go func() { panic("gofail: pebbleDeadMove") }(); select {} }
	case retryAt <= now:
		nw.State, nw.DueAt = store.StateReady, retryAt
	default:
		nw.State, nw.DueAt = store.StateScheduled, retryAt
	}
	return nw
}

// MessageNack implements store.Store. Durable on nil error.
func (s *Store) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		if err := checkLease(r, p.Receipt); err != nil {
			return nil, nil, err
		}
		nw := failRecord(r, p.Now, p.Now+p.RetryDelay, p.Error, p.Final)
		return nw, cloneRecord(nw), nil
	})
}

// MessageExtend implements store.Store. Not fsync'd: a crash may revert it,
// which only makes the lease expire earlier (redelivery is allowed).
func (s *Store) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, false, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		if err := checkLease(r, p.Receipt); err != nil {
			return nil, nil, err
		}
		nw := cloneRecord(r)
		nw.LeaseUntil, nw.UpdatedAt = p.Now+p.LeaseFor, p.Now
		return nw, cloneRecord(nw), nil
	})
}

// leaseRecord makes a ready record inflight for one delivery. It shares
// r's payload and headers (r is a freshly decoded record the caller drops).
func leaseRecord(r *store.Record, p *store.MessageLeaseParams) *store.Record {
	c := *r
	nw := &c
	nw.State = store.StateInflight
	nw.Deliveries++
	nw.LeaseUntil, nw.UpdatedAt = p.Now+p.LeaseFor, p.Now
	// Unique per delivery: the token is unique per call and Deliveries
	// never repeats for a message.
	nw.Receipt = p.Token + "-" + strconv.Itoa(int(nw.Deliveries))
	return nw
}
