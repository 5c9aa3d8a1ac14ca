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
// range reads only its own keys. Ready messages are listed in lease
// order: r/ (priority 0), then p/ priority by priority, where the range
// is applied with one seek per priority.
func (s *Store) MessageList(ctx context.Context, p *store.MessageListParams) ([]*store.Record, string, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, "", err
	}
	defer done()
	var after *store.ListPosition
	if p.Cursor != "" {
		pos, err := store.ParseListCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		after = &pos
	}
	ix := slices.Index([]store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead}, p.State)
	t := s.lookupTopic(p.Topic)
	if ix < 0 || t == nil || p.Limit <= 0 {
		return nil, "", nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l := lister{s: s, t: t, p: p}
	if after == nil || after.Priority == 0 {
		var from []byte
		if after != nil {
			from = appendTimeSeq(nil, after.Key, after.Seq)
		}
		if err := l.index(ix, from); err != nil {
			return nil, "", err
		}
	}
	if ix == ixReady && !l.full() {
		if err := l.prio(after); err != nil {
			return nil, "", err
		}
	}
	return l.out, l.cursor, nil
}

// lister collects one page of MessageList.
type lister struct {
	s      *Store
	t      *topic
	p      *store.MessageListParams
	out    []*store.Record
	cursor string
}

// full says the page is complete: Limit records and a cursor (set when an
// entry after them was seen).
func (l *lister) full() bool { return l.cursor != "" }

// visit takes the entry at key if it is one of the list; false once the
// page is complete.
func (l *lister) visit(key, val []byte) (bool, error) {
	if len(l.out) >= l.p.Limit {
		l.cursor = store.ListCursor(l.out[len(l.out)-1])
		return false, nil
	}
	id, promotedAt, promoted := parseReadyValue(val)
	if !promoted {
		id, _ = parseScheduledValue(val)
	}
	r, err := l.s.getRecord(l.t.name, string(id))
	if errors.Is(err, store.ErrNotFound) {
		return true, nil // a stale entry: the writers' scans repair it
	}
	if err != nil {
		return false, err
	}
	if l.p.State == store.StateReady && r.State == store.StateScheduled {
		r.State = store.StateReady // promoted: see MessagePromote
		if promoted {
			r.UpdatedAt = promotedAt
		}
	}
	if r.State == l.p.State && bytes.Equal(entryOf(r).key, key) {
		l.out = append(l.out, r)
	}
	return true, nil
}

// index lists index ix (r/ alone for ready) from strictly after the
// {t}{seq} suffix from (nil: the start).
func (l *lister) index(ix int, from []byte) error {
	p, t := l.p, l.t
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
	if from != nil {
		raise(append(append(slices.Clip(pre), from...), 0)) // strictly after
	}
	if bytes.Compare(lo, hi) >= 0 {
		return nil
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return classify("scan index", err)
	}
	defer it.Close()
	for it.First(); it.Valid(); it.Next() {
		more, err := l.visit(it.Key(), it.Value())
		if err != nil || !more {
			return err
		}
	}
	return iterErr(it)
}

// prio lists p/ (priorities 1-255) in order, each priority from the
// range's start (or strictly after the cursor, in the cursor's priority)
// to its end, one seek per priority.
func (l *lister) prio(after *store.ListPosition) error {
	p, t := l.p, l.t
	if bytes.Equal(t.lw[ixReadyPrio], endPrioSuffix) && !disableLowWater {
		return nil
	}
	pre := topicPrefix(pfxReadyPrio, t.name)
	lo := pre
	if lw := t.lw[ixReadyPrio]; lw != nil && !disableLowWater {
		lo = append(slices.Clip(pre), lw...)
	}
	it, err := l.s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(pre)})
	if err != nil {
		return classify("scan index", err)
	}
	defer it.Close()
	// start is where priority prio's part of the list begins.
	start := func(prio uint8) []byte {
		k := append(slices.Clip(pre), prio)
		if after != nil && after.Priority == prio {
			k = appendTimeSeq(k, after.Key, after.Seq)
			k = append(k, 0) // strictly after
			if p.DueFrom == math.MinInt64 || after.Key >= p.DueFrom {
				return k
			}
			k = k[:len(pre)+1]
		}
		if p.DueFrom != math.MinInt64 {
			k = appendTimeSeq(k, p.DueFrom, 0)
		}
		return k
	}
	seek := func(prio uint8) bool {
		k := start(prio)
		if bytes.Compare(k, lo) < 0 {
			k = lo
		}
		// Past the priority's own tombstones (an empty one's mark is
		// endSuffix: the seek lands on the next priority).
		if t.prioLW != nil && t.prioLW[prio] != nil && !disableLowWater {
			if m := append(append(slices.Clip(pre), prio), t.prioLW[prio]...); bytes.Compare(k, m) < 0 {
				k = m
			}
		}
		return it.SeekGE(k)
	}
	prio := uint8(1)
	if after != nil && after.Priority > 0 {
		prio = after.Priority
	}
	for valid := seek(prio); valid; {
		k := it.Key()
		if kp := k[len(k)-17]; kp != prio { // the first key of a later priority
			prio = kp
			if bytes.Compare(k, start(prio)) < 0 {
				valid = seek(prio)
				continue
			}
		}
		if due, _, _ := parseIndexSuffix(k); p.DueTo != math.MaxInt64 && due >= p.DueTo {
			if prio == 255 {
				break
			}
			prio++
			valid = seek(prio)
			continue
		}
		more, err := l.visit(k, it.Value())
		if err != nil || !more {
			return err
		}
		valid = it.Next()
	}
	return iterErr(it)
}

// iterErr is it's error, classified (nil if none).
func iterErr(it *pebble.Iterator) error {
	if err := it.Error(); err != nil {
		return classify("scan index", err)
	}
	return nil
}
