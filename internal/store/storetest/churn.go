package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// ChurnConfig shapes a churn run: Messages go through send → lease → ack
// against one store, in Phases equal parts; after each part (the queue
// drained) Probe measures the store. This is the "queue in a table"
// workload — every message inserted, updated and deleted — that leaves
// dead tuples, dead index entries and purge lag behind, so the probes of
// a database engine show whether its scans and sizes stay bounded.
type ChurnConfig struct {
	Topic    string
	Messages int // in all
	Phases   int // probes after each 1/Phases of Messages; default 10
	Batch    int // messages per send, lease and ack call; default 100
	Workers  int // senders, and as many leasers; default 4
	Payload  int // bytes per message; default 100
	// Delay (ms, default 20) is how far ahead every other send batch is
	// due: half the messages pass through the scheduled state and its
	// index, as a server's delayed sends do, the other half go straight
	// to ready. Leases are the ones a server makes: the store's due lease
	// (DueLeaser), which takes due scheduled messages itself, or else a
	// promotion when a lease finds nothing, then the lease.
	Delay int64
	// Window is the dedup window passed to DedupPurge (ms), which a
	// purger calls every PurgeEvery during the run, as the engine does
	// every minute: tombstones older than Window go, so what a table
	// keeps is about (Window + PurgeEvery) × the ack rate.
	Window     int64
	PurgeEvery time.Duration // default 1 s
	// Backlog caps sent-but-not-acked messages, so that senders do not
	// run away from leasers; default 4 × Batch × Workers. The sizes of
	// the queue tables follow it, not Messages.
	Backlog int
	// Ballast messages of topic Topic+"-ballast" are sent ready before
	// the run and never leased: the queue tables are never empty (as in
	// a store with other topics), so a drained topic's lease scan is an
	// index scan that has to pass whatever the churn left in the index.
	Ballast int
	// Probe runs after phase p (0: before the first message, on the fresh
	// store) with the messages acked so far; nothing else runs meanwhile.
	Probe func(ctx context.Context, phase, acked int) error
	// Now is the calls' Now (a TimeDB store ignores it); default wall time.
	Now func() int64
}

func (c *ChurnConfig) defaults() {
	if c.Phases <= 0 {
		c.Phases = 10
	}
	if c.Batch <= 0 {
		c.Batch = 100
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.Payload <= 0 {
		c.Payload = 100
	}
	if c.Delay <= 0 {
		c.Delay = 20
	}
	if c.PurgeEvery <= 0 {
		c.PurgeEvery = time.Second
	}
	if c.Backlog <= 0 {
		c.Backlog = 4 * c.Batch * c.Workers
	}
	if c.Now == nil {
		c.Now = func() int64 { return time.Now().UnixMilli() }
	}
}

// Churn drives cfg.Messages through s (see ChurnConfig) and returns the
// number acked, which is cfg.Messages unless it fails. Every lease must
// answer messages of this run and every ack must succeed: a lost or
// doubled message fails the run.
func Churn(ctx context.Context, s store.Store, cfg ChurnConfig) (int, error) {
	cfg.defaults()
	for i := 0; i < cfg.Ballast; i += cfg.Batch {
		msgs := make([]store.InsertMessage, 0, cfg.Batch)
		for j := i; j < min(i+cfg.Batch, cfg.Ballast); j++ {
			msgs = append(msgs, store.InsertMessage{ID: churnID(j), Relative: true, MaxAttempts: 3})
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: cfg.Topic + "-ballast", Now: cfg.Now(), Messages: msgs}); err != nil {
			return 0, fmt.Errorf("ballast: %w", err)
		}
	}
	if cfg.Probe != nil {
		if err := cfg.Probe(ctx, 0, 0); err != nil {
			return 0, fmt.Errorf("probe 0: %w", err)
		}
	}
	payload := make([]byte, cfg.Payload)
	for i := range payload {
		payload[i] = byte('a' + i%26)
	}
	acked := 0
	for phase := 1; phase <= cfg.Phases; phase++ {
		n := cfg.Messages*phase/cfg.Phases - acked
		if err := churnPhase(ctx, s, &cfg, acked, n, payload); err != nil {
			return acked, fmt.Errorf("phase %d: %w", phase, err)
		}
		acked += n
		if cfg.Probe != nil {
			if err := cfg.Probe(ctx, phase, acked); err != nil {
				return acked, fmt.Errorf("probe %d: %w", phase, err)
			}
		}
	}
	return acked, nil
}

// churnPhase sends messages first..first+n-1 and leases and acks them all.
func churnPhase(ctx context.Context, s store.Store, cfg *ChurnConfig, first, n int, payload []byte) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var claimed, sent, acked atomic.Int64
	var wg sync.WaitGroup
	fail := func(err error) { cancel(err) }
	wait := func(d time.Duration) bool {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(d):
			return true
		}
	}
	for w := 0; w < cfg.Workers; w++ {
		wg.Add(2)
		go func() { // sender
			defer wg.Done()
			for ctx.Err() == nil {
				from := int(claimed.Add(int64(cfg.Batch))) - cfg.Batch
				if from >= n {
					return
				}
				to := min(from+cfg.Batch, n)
				for sent.Load()-acked.Load() > int64(cfg.Backlog) {
					if !wait(time.Millisecond) {
						return
					}
				}
				var delay int64
				if from/cfg.Batch%2 == 1 {
					delay = cfg.Delay
				}
				msgs := make([]store.InsertMessage, 0, to-from)
				for i := from; i < to; i++ {
					msgs = append(msgs, store.InsertMessage{ID: churnID(first + i), Payload: payload, Relative: true, Delay: delay, MaxAttempts: 3})
				}
				res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: cfg.Topic, Now: cfg.Now(), Messages: msgs})
				if err != nil {
					fail(fmt.Errorf("send: %w", err))
					return
				}
				for _, r := range res {
					if r.Duplicate {
						fail(fmt.Errorf("send: %s answered as a duplicate", r.Record.ID))
						return
					}
				}
				sent.Add(int64(len(msgs)))
			}
		}()
		go func() { // leaser
			defer wg.Done()
			token := 0
			for ctx.Err() == nil && acked.Load() < int64(n) {
				token++
				recs, err := churnLease(ctx, s, &store.MessageLeaseParams{Topic: cfg.Topic, Now: cfg.Now(), Max: cfg.Batch, LeaseFor: 600_000,
					Token: "c" + strconv.Itoa(first) + "-" + strconv.Itoa(w) + "-" + strconv.Itoa(token)})
				if err != nil {
					fail(fmt.Errorf("lease: %w", err))
					return
				}
				if len(recs) == 0 {
					wait(2 * time.Millisecond)
					continue
				}
				items := make([]store.AckItem, len(recs))
				for i, r := range recs {
					items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
				}
				errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: cfg.Topic, Now: cfg.Now(), Items: items})
				if err == nil {
					err = errors.Join(errs...)
				}
				if err != nil {
					fail(fmt.Errorf("ack: %w", err))
					return
				}
				acked.Add(int64(len(recs)))
			}
		}()
	}
	wg.Add(1)
	go func() { // purger
		defer wg.Done()
		// At the phase's start too: a phase can end within PurgeEvery,
		// and the previous phases' tombstones are out of the window by
		// then (the probe between phases takes over a second).
		for {
			for ctx.Err() == nil {
				k, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: cfg.Now(), Window: cfg.Window, Max: 1000})
				if err != nil {
					fail(fmt.Errorf("dedup purge: %w", err))
					return
				}
				if k < 1000 {
					break
				}
			}
			if !wait(cfg.PurgeEvery) {
				return
			}
		}
	}()
	for ctx.Err() == nil && acked.Load() < int64(n) {
		wait(5 * time.Millisecond)
	}
	if err := context.Cause(ctx); err != nil {
		wg.Wait()
		return err
	}
	cancel(nil)
	wg.Wait()
	if a := acked.Load(); a != int64(n) {
		return fmt.Errorf("%d acked of %d sent", a, n)
	}
	return nil
}

// churnLease leases as a server's engine does on s: through the due
// lease of a DueLeaser (reporting the next due time too on a
// NextDueLeaser, as servers call it); on other stores a lease of ready
// messages, and when it finds none a promotion of what is due, then the
// lease again.
func churnLease(ctx context.Context, s store.Store, p *store.MessageLeaseParams) ([]*store.Record, error) {
	if nd, ok := s.(store.NextDueLeaser); ok {
		res, err := nd.MessageLeaseDueNext(ctx, p)
		if err != nil {
			return nil, err
		}
		return res.Records, nil
	}
	if d, ok := s.(store.DueLeaser); ok {
		return d.MessageLeaseDue(ctx, p)
	}
	recs, err := s.MessageLease(ctx, p)
	if err != nil || len(recs) > 0 {
		return recs, err
	}
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: p.Topic, Now: p.Now, Max: p.Max}); err != nil {
		return nil, fmt.Errorf("promote: %w", err)
	}
	return s.MessageLease(ctx, p)
}

// churnID is message i's id: distinct for every i, and scattered over
// the key space as generated ids (UUIDs) are, which is the hard case for
// a B-tree keyed by id (inserts land everywhere, so no page ever empties
// in order).
func churnID(i int) string {
	z := uint64(i) + 0x9e3779b97f4a7c15 // #nosec G115 -- i is a message number, never negative; splitmix64 is a bijection, so ids never repeat
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return fmt.Sprintf("%016x", z^z>>31)
}
