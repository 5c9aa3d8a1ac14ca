package pebblestore

import (
	"context"
	"errors"
	"strconv"

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
	t := s.topic(p.Topic)
	x := s.newTxn()
	res, err := s.insertLocked(t, x, p)
	// The fsync is awaited after the topic lock is released, so concurrent
	// senders to one hot topic share WAL fsyncs (see Store.apply).
	if err != nil {
		return nil, err
	}
	if err := x.wait(true); err != nil {
		return nil, err
	}
	return res, nil
}

func (s *Store) insertLocked(t *topic, x *txn, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	first, err := s.allocSeqs(len(p.Messages))
	if err != nil {
		return nil, err
	}
	res := make([]store.InsertResult, len(p.Messages))
	var pending map[string]*store.Record // ids inserted earlier in this call
	for i := range p.Messages {
		m := &p.Messages[i]
		if r := pending[m.ID]; r != nil {
			res[i] = store.InsertResult{Record: cloneRecord(r), Duplicate: true}
			continue
		}
		old, err := s.getRecord(p.Topic, m.ID)
		if err == nil {
			res[i] = store.InsertResult{Record: old, Duplicate: true}
			continue
		}
		if !errors.Is(err, store.ErrNotFound) {
			return nil, err
		}
		r := &store.Record{
			Topic: p.Topic, ID: m.ID, Seq: first + uint64(i),
			State: store.StateScheduled, Payload: m.Payload, Headers: m.Headers,
			DueAt: m.DueAt, CreatedAt: p.Now, UpdatedAt: p.Now, MaxAttempts: m.MaxAttempts,
		}
		if m.DueAt <= p.Now {
			r.State = store.StateReady
		}
		r = cloneRecord(r)
		x.put(t, nil, r)
		if pending == nil {
			pending = make(map[string]*store.Record)
		}
		pending[m.ID] = r
		res[i] = store.InsertResult{Record: cloneRecord(r)}
	}
	if err := x.apply(true); err != nil {
		return nil, err
	}
	return res, nil
}

// MessageGet implements store.Store.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (*store.Record, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.getRecord(topic, id)
}

// update runs a read-modify-write of one message under its topic lock:
// fn gets the current record and returns the new one (nil: delete) and
// the record to return. The batch is durable unless durable is false.
func (s *Store) update(ctx context.Context, topicName, id string, durable bool,
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
		r, err := s.getRecord(topicName, id)
		if err != nil {
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
	return ret, nil
}

// MessageCancel implements store.Store. Durable on nil error.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		switch r.State {
		case store.StateScheduled, store.StateReady, store.StateInflight:
			return nil, r, nil
		}
		return nil, nil, store.ErrConflict
	})
}

// MessageReschedule implements store.Store. Durable on nil error.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		if r.State != store.StateScheduled && r.State != store.StateReady {
			return nil, nil, store.ErrConflict
		}
		nw := cloneRecord(r)
		nw.DueAt, nw.UpdatedAt = p.DueAt, p.Now
		nw.State = store.StateScheduled
		if p.DueAt <= p.Now {
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
// lease cleared.
func ackedRecord(r *store.Record, now int64) *store.Record {
	nw := *r
	nw.State, nw.AckedAt, nw.UpdatedAt = store.StateAcked, now, now
	nw.Payload, nw.Headers, nw.Receipt, nw.LeaseUntil = nil, nil, "", 0
	return &nw
}

// MessageAck implements store.Store. Durable on nil error.
func (s *Store) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	_, err := s.update(ctx, p.Topic, p.ID, true, func(r *store.Record) (*store.Record, *store.Record, error) {
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
	x := s.newTxn()
	err = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		acked := make(map[string]bool, len(p.Items))
		for i, it := range p.Items {
			if acked[it.ID] {
				errs[i] = store.ErrConflict // acked earlier in this call
				continue
			}
			r, err := s.getRecord(p.Topic, it.ID)
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
// record: Failures+1, then dead if it reached MaxAttempts, else due at
// retryAt (ready if retryAt <= now).
func failRecord(r *store.Record, now, retryAt int64, reason string) *store.Record {
	nw := cloneRecord(r)
	nw.Failures++
	nw.LastError, nw.UpdatedAt = reason, now
	nw.Receipt, nw.LeaseUntil = "", 0
	switch {
	case nw.Failures >= nw.MaxAttempts:
		nw.State, nw.DeadAt = store.StateDead, now
	case retryAt <= now:
		nw.State, nw.DueAt = store.StateReady, retryAt
	default:
		nw.State, nw.DueAt = store.StateScheduled, retryAt
	}
	return nw
}

// MessageNack implements store.Store. Durable on nil error.
func (s *Store) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, true, func(r *store.Record) (*store.Record, *store.Record, error) {
		if err := checkLease(r, p.Receipt); err != nil {
			return nil, nil, err
		}
		nw := failRecord(r, p.Now, p.RetryAt, p.Error)
		return nw, cloneRecord(nw), nil
	})
}

// MessageExtend implements store.Store. Not fsync'd: a crash may revert it,
// which only makes the lease expire earlier (redelivery is allowed).
func (s *Store) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	return s.update(ctx, p.Topic, p.ID, false, func(r *store.Record) (*store.Record, *store.Record, error) {
		if err := checkLease(r, p.Receipt); err != nil {
			return nil, nil, err
		}
		nw := cloneRecord(r)
		nw.LeaseUntil, nw.UpdatedAt = p.LeaseUntil, p.Now
		return nw, cloneRecord(nw), nil
	})
}

// leaseRecord makes a ready record inflight for one delivery.
func leaseRecord(r *store.Record, p *store.MessageLeaseParams) *store.Record {
	nw := cloneRecord(r)
	nw.State = store.StateInflight
	nw.Deliveries++
	nw.LeaseUntil, nw.UpdatedAt = p.LeaseUntil, p.Now
	// Unique per delivery: the token is unique per call and Deliveries
	// never repeats for a message.
	nw.Receipt = p.Token + "-" + strconv.Itoa(int(nw.Deliveries))
	return nw
}
