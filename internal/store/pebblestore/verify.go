package pebblestore

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
	"github.com/delayq/delayq/internal/store"
)

// Verify checks the whole store (a full scan: for tests and offline
// checks, never on the hot path): every record and body decodes, every
// record has exactly the index entries its state calls for and no index
// entry is stale, every split record that needs a body has one and no
// body is left without one, and the per-topic counters, both in memory and as stored under
// c/, equal a recount of the records. It returns the first problems found
// joined into one error, or nil.
func (s *Store) Verify() error {
	done, err := s.begin()
	if err != nil {
		return err
	}
	defer done()
	// Hold every topic lock so that no operation runs during the check.
	s.topicsMu.RLock()
	names := make([]string, 0, len(s.topics))
	for n := range s.topics {
		names = append(names, n)
	}
	s.topicsMu.RUnlock()
	_, unlock := s.lockTopics(names)
	defer unlock()
	s.expireMu.Lock()
	defer s.expireMu.Unlock()
	s.purgeMu.Lock()
	defer s.purgeMu.Unlock()

	var errs []error
	report := func(format string, args ...any) {
		if len(errs) < 20 {
			errs = append(errs, fmt.Errorf(format, args...))
		}
	}
	recount := map[string]*delta{}
	want := map[string]bool{}   // index keys the records call for
	bodies := map[string]bool{} // b/ keys the records call for
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("m/"), UpperBound: []byte("m0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			report("bad message key %q", k)
			continue
		}
		topic, id := string(k[2:i]), string(k[i+1:])
		r, split, err := decodeRecord(it.Value(), topic, id)
		if err != nil {
			report("key %q: %w", k, err)
			continue
		}
		if split && r.State != store.StateAcked {
			bodies[string(bodyKey(topic, id))] = true
		}
		if err := s.resolve(r); err != nil { // promoted: indexed in r/
			report("key %q: %w", k, err)
			continue
		}
		d := recount[topic]
		if d == nil {
			d = &delta{}
			recount[topic] = d
		}
		d.move(0, r.State)
		e := entryOf(r)
		if e.key != nil {
			want[string(e.key)] = true
		}
		if e.global != nil {
			want[string(e.global)] = true
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for _, p := range []byte{pfxScheduled, pfxReady, pfxReadyPrio, pfxInflight, pfxDead, pfxLease, pfxAcked} {
		lo := []byte{p, '/'}
		it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: prefixEnd(lo)})
		if err != nil {
			return err
		}
		for it.First(); it.Valid(); it.Next() {
			if !want[string(it.Key())] {
				report("stale index entry %q", it.Key())
			}
			delete(want, string(it.Key()))
		}
		if err := it.Close(); err != nil {
			return err
		}
	}
	for k := range want {
		report("missing index entry %q", k)
	}
	it, err = s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("b/"), UpperBound: []byte("b0")})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		if !bodies[string(k)] {
			report("body %q without a message that needs it", k)
			continue
		}
		delete(bodies, string(k))
		if err := decodeBody(it.Value(), &store.Record{}); err != nil {
			report("key %q: %w", k, err)
		}
	}
	if err := it.Close(); err != nil {
		return err
	}
	for k := range bodies {
		report("missing body %q", k)
	}
	for _, n := range names {
		t := s.lookupTopic(n)
		var got store.Counts
		if d := recount[n]; d != nil {
			d.apply(&got)
		}
		if t.counts != got {
			report("topic %q: in-memory counts %+v, recount %+v", n, t.counts, got)
		}
		v, err := s.get(topicKey(pfxCounters, n))
		if errors.Is(err, store.ErrNotFound) {
			if got != (store.Counts{}) {
				report("topic %q: no stored counters, recount %+v", n, got)
			}
			continue
		}
		if err != nil {
			return err
		}
		stored, err := decodeCounts(v)
		if err != nil {
			report("topic %q: %w", n, err)
		} else if stored != got {
			report("topic %q: stored counts %+v, recount %+v", n, stored, got)
		}
		delete(recount, n)
	}
	for n := range recount {
		if s.lookupTopic(n) == nil {
			report("topic %q has messages but is unknown", n)
		}
	}
	return errors.Join(errs...)
}
