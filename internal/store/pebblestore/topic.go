package pebblestore

import (
	"bytes"
	"context"
	"fmt"
	"slices"

	"github.com/delayq/delayq/internal/store"
)

// firstIndexTime returns the time of the first entry of index ix of t (0
// if the index is empty) and advances the low-water mark to it. The caller
// holds t.mu. This is a seek, not a scan: the mark skips the tombstones.
func (s *Store) firstIndexTime(t *topic, ix int) (int64, error) {
	it, err := s.indexIter(t, ix, nil)
	if err != nil {
		return 0, err
	}
	if !it.First() {
		if err := it.Close(); err != nil {
			return 0, classify("seek index", err)
		}
		t.lw[ix] = endSuffix
		return 0, nil
	}
	tm, _, _ := parseIndexSuffix(it.Key())
	t.lw[ix] = suffix(it.Key())
	return tm, it.Close()
}

// oldestReady is the least due time among ready messages (0 if none):
// the first r/ entry, and the first entry of each priority in p/, one
// seek per priority present. p/ known to be empty costs nothing. The
// caller holds t.mu.
func (s *Store) oldestReady(t *topic) (int64, error) {
	oldest, err := s.firstIndexTime(t, ixReady)
	if err != nil || bytes.Equal(t.lw[ixReadyPrio], endPrioSuffix) {
		return oldest, err
	}
	found := !bytes.Equal(t.lw[ixReady], endSuffix)
	pr, err := s.newPrioIter(t)
	if err != nil {
		return 0, err
	}
	defer pr.close()
	var first []byte
	for q := 1; q <= 255; q++ {
		var ok bool
		if q, ok = pr.next(q); !ok {
			break
		}
		k := pr.it.Key()
		if first == nil {
			first = bytes.Clone(k[len(k)-17:])
		}
		if due, _, _ := parseIndexSuffix(k); !found || due < oldest {
			oldest, found = due, true
		}
		t.prioLW[q] = bytes.Clone(k[len(k)-16:])
	}
	if err := pr.it.Error(); err != nil {
		return 0, classify("seek index", err)
	}
	if first == nil {
		first = endPrioSuffix
	}
	t.lw[ixReadyPrio] = first
	return oldest, nil
}

// TopicGet implements store.Store. It reads in-memory counters and seeks
// three indexes (and p/ once per priority present); it never scans.
func (s *Store) TopicGet(ctx context.Context, name string) (*store.TopicRecord, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	return s.topicGet(name)
}

func (s *Store) topicGet(name string) (*store.TopicRecord, error) {
	t := s.lookupTopic(name)
	if t == nil {
		return nil, store.ErrNotFound
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.shown() {
		return nil, store.ErrNotFound
	}
	tr := &store.TopicRecord{Name: name, Settings: bytes.Clone(t.settings), Counts: t.counts}
	var err error
	if tr.NextDue, err = s.firstIndexTime(t, ixScheduled); err != nil {
		return nil, err
	}
	if tr.OldestReady, err = s.oldestReady(t); err != nil {
		return nil, err
	}
	if tr.NextLeaseExpiry, err = s.firstIndexTime(t, ixInflight); err != nil {
		return nil, err
	}
	return tr, nil
}

// TopicList implements store.Store.
func (s *Store) TopicList(ctx context.Context) ([]*store.TopicRecord, error) {
	done, err := s.start(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	s.topicsMu.RLock()
	names := make([]string, 0, len(s.topics))
	for n := range s.topics {
		names = append(names, n)
	}
	s.topicsMu.RUnlock()
	slices.Sort(names)
	out := make([]*store.TopicRecord, 0, len(names))
	for _, n := range names {
		tr, err := s.topicGet(n)
		if err == store.ErrNotFound {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, tr)
	}
	return out, nil
}

// TopicSettingsPut implements store.Store. Durable on nil error.
func (s *Store) TopicSettingsPut(ctx context.Context, name string, settings []byte) error {
	done, err := s.start(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return err
	}
	t := s.topic(name)
	x := s.newTxn()
	err = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		v := bytes.Clone(settings)
		if v == nil {
			v = []byte{}
		}
		x.set(topicKey(pfxTopic, name), v)
		x.delta(t) // makes the topic known (c/ key) if it was not
		revive := t.revive(x)
		if err := x.apply(true); err != nil {
			return err
		}
		revive()
		t.settings = v
		return nil
	}()
	if err != nil {
		return err
	}
	return x.wait(true)
}

// shown says TopicGet and TopicList show the topic: it is known and not
// deleted (a deleted topic holds no live message: inserts revive it under
// t.mu). The caller holds t.mu.
func (t *topic) shown() bool { return t.known && !t.deleted }

// revive puts the removal of t's deleted mark in x, if t has one; the
// returned func, called once x applied, clears the mark in memory. The
// caller holds t.mu.
func (t *topic) revive(x *txn) (applied func()) {
	if !t.deleted {
		return func() {}
	}
	x.del(topicKey(pfxDeleted, t.name))
	return func() { t.deleted = false }
}

// TopicDelete implements store.Store. Durable on nil error. Under t.mu,
// as every insert is, so a send either lands first (ErrConflict) or
// revives the topic after.
func (s *Store) TopicDelete(ctx context.Context, name string) error {
	done, err := s.start(ctx)
	if err != nil {
		return err
	}
	defer done()
	if err := s.checkWritable(); err != nil {
		return err
	}
	t := s.lookupTopic(name)
	if t == nil {
		return fmt.Errorf("pebblestore: topic %q: %w", name, store.ErrNotFound)
	}
	x := s.newTxn()
	err = func() error {
		t.mu.Lock()
		defer t.mu.Unlock()
		if !t.shown() {
			return fmt.Errorf("pebblestore: topic %q: %w", name, store.ErrNotFound)
		}
		if n := t.counts.Live(); n > 0 {
			return fmt.Errorf("pebblestore: topic %q holds %d messages: %w", name, n, store.ErrConflict)
		}
		x.del(topicKey(pfxTopic, name))
		x.set(topicKey(pfxDeleted, name), nil)
		if err := x.apply(true); err != nil {
			return err
		}
		t.settings = nil
		t.deleted = true
		return nil
	}()
	if err != nil {
		return err
	}
	return x.wait(true)
}
