package pebblestore

import (
	"context"

	"github.com/delayq/delayq/internal/store"
)

// deadBatch runs fn on dead messages of a topic under its lock: the one
// named id (store.ErrNotFound unless it is dead), or up to max from the
// front of the dead index. fn returns the new record (nil: delete). The
// batch is durable.
func (s *Store) deadBatch(ctx context.Context, topicName, id string, max int,
	fn func(r *store.Record) *store.Record) ([]*store.Record, int, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, 0, err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return nil, 0, err
	}
	t := s.lookupTopic(topicName)
	if t == nil {
		if id != "" {
			return nil, 0, store.ErrNotFound
		}
		return nil, 0, nil
	}
	x := s.newTxn()
	var out []*store.Record
	n := 0
	err = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		var rs []*store.Record
		if id != "" {
			r, err := s.readRecord(x, topicName, id, true)
			if err != nil {
				return err
			}
			if r.State != store.StateDead {
				return store.ErrNotFound
			}
			rs = append(rs, r)
		} else if max > 0 {
			it, err := s.indexIter(t, ixDead, nil)
			if err != nil {
				return err
			}
			for it.First(); it.Valid() && len(rs) < max; it.Next() {
				r, err := s.indexed(x, t, it.Key(), it.Value(), store.StateDead)
				if err != nil {
					_ = it.Close()
					return err
				}
				if r != nil {
					rs = append(rs, r)
				}
			}
			if err := it.Close(); err != nil {
				return classify("scan dead", err)
			}
		}
		for _, r := range rs {
			nw := fn(r)
			x.put(t, r, nw)
			if nw != nil {
				out = append(out, cloneRecord(nw))
			}
			n++
		}
		return x.apply(true)
	}()
	if err != nil {
		return nil, 0, err
	}
	if err := x.wait(true); err != nil {
		return nil, 0, err
	}
	return out, n, nil
}

// DeadReplay implements store.Store. Durable on nil error.
func (s *Store) DeadReplay(ctx context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	out, _, err := s.deadBatch(ctx, p.Topic, p.ID, p.Max, func(r *store.Record) *store.Record {
		nw := cloneRecord(r)
		nw.State, nw.DueAt, nw.UpdatedAt = store.StateReady, p.Now, p.Now
		nw.Failures, nw.DeadAt = 0, 0
		return nw
	})
	return out, err
}

// DeadDelete implements store.Store. Durable on nil error.
func (s *Store) DeadDelete(ctx context.Context, p *store.DeadDeleteParams) (int, error) {
	_, n, err := s.deadBatch(ctx, p.Topic, p.ID, p.Max, func(*store.Record) *store.Record { return nil })
	return n, err
}
