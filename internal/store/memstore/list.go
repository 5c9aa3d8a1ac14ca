package memstore

import (
	"context"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

// MessageList implements store.Store. The reference: it scans the topic
// and sorts, which is obviously right; the other stores read an index.
func (s *Store) MessageList(_ context.Context, p *store.MessageListParams) ([]*store.Record, string, error) {
	if err := s.lock(); err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	var after store.ListPosition
	cur := p.Cursor != ""
	if cur {
		var err error
		if after, err = store.ParseListCursor(p.Cursor); err != nil {
			return nil, "", err
		}
	}
	t := s.topics[p.Topic]
	if t == nil || p.Limit <= 0 {
		return nil, "", nil
	}
	ranged := p.State == store.StateScheduled || p.State == store.StateReady
	var all []*store.Record
	for _, e := range t.msgs {
		r := &e.rec
		if r.State != p.State || ranged && (r.DueAt < p.DueFrom || r.DueAt >= p.DueTo) {
			continue
		}
		if cur && store.ListPositionOf(r).Compare(after) <= 0 {
			continue
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *store.Record) int {
		return store.ListPositionOf(a).Compare(store.ListPositionOf(b))
	})
	next := ""
	if len(all) > p.Limit {
		all = all[:p.Limit]
		next = store.ListCursor(all[len(all)-1])
	}
	out := make([]*store.Record, len(all))
	for i, r := range all {
		out[i] = clone(r)
	}
	return out, next, nil
}
