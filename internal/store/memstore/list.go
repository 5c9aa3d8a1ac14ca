package memstore

import (
	"cmp"
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
	key, seq, cur := int64(0), uint64(0), p.Cursor != ""
	if cur {
		var err error
		if key, seq, err = store.ParseListCursor(p.Cursor); err != nil {
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
		if k := store.ListKey(r); cur && (k < key || k == key && r.Seq <= seq) {
			continue
		}
		all = append(all, r)
	}
	slices.SortFunc(all, func(a, b *store.Record) int {
		return cmp.Or(cmp.Compare(store.ListKey(a), store.ListKey(b)), cmp.Compare(a.Seq, b.Seq))
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
