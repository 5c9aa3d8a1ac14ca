package pebblestore

import (
	"bytes"
	"context"
	"errors"
	"math"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/delayq/delayq/internal/store"
)

// MessageList implements store.Store: one iteration of the state's
// per-topic index, from the cursor (or the range's start) on, reading the
// record of each entry. The due-time range bounds the iterator, so a
// range reads only its own keys.
func (s *Store) MessageList(ctx context.Context, p *store.MessageListParams) ([]*store.Record, string, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	var after []byte
	if p.Cursor != "" {
		pos, err := store.ParseListCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		after = appendTimeSeq(nil, pos.Key, pos.Seq)
	}
	ix := slices.Index([]store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead}, p.State)
	t := s.lookupTopic(p.Topic)
	if ix < 0 || t == nil || p.Limit <= 0 {
		return nil, "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	pre := topicPrefix(ixPrefix[ix], t.name)
	lo, hi := pre, prefixEnd(pre)
	raise := func(k []byte) {
		if bytes.Compare(k, lo) > 0 {
			lo = k
		}
	}
	if ix == ixScheduled || ix == ixReady {
		if p.DueFrom != math.MinInt64 {
			raise(appendTimeSeq(slices.Clip(pre), p.DueFrom, 0))
		}
		if p.DueTo != math.MaxInt64 {
			hi = appendTimeSeq(slices.Clip(pre), p.DueTo, 0)
		}
	}
	if lw := t.lw[ix]; lw != nil && !disableLowWater {
		raise(append(slices.Clip(pre), lw...))
	}
	if after != nil {
		raise(append(append(slices.Clip(pre), after...), 0)) // strictly after
	}
	if bytes.Compare(lo, hi) >= 0 {
		return nil, "", nil
	}
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return nil, "", classify("scan index", err)
	}
	defer it.Close()
	var out []*store.Record
	cursor := ""
	for it.First(); it.Valid(); it.Next() {
		if len(out) >= p.Limit {
			cursor = store.ListCursor(out[len(out)-1])
			break
		}
		id, promotedAt, promoted := parseReadyValue(it.Value())
		r, err := s.getRecord(t.name, string(id))
		if errors.Is(err, store.ErrNotFound) {
			continue // a stale entry: the writers' scans repair it
		}
		if err != nil {
			return nil, "", err
		}
		if p.State == store.StateReady && r.State == store.StateScheduled {
			r.State = store.StateReady // promoted: see MessagePromote
			if promoted {
				r.UpdatedAt = promotedAt
			}
		}
		if r.State != p.State || !bytes.Equal(entryOf(r).key, it.Key()) {
			continue
		}
		out = append(out, r)
	}
	if err := it.Error(); err != nil {
		return nil, "", classify("scan index", err)
	}
	return out, cursor, nil
}
