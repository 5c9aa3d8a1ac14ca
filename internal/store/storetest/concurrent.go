package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/delayq/delayq/internal/store"
)

// testConcurrentLease races producers (with colliding ids) against
// consumers: every id is inserted once, no message is leased twice while
// its lease is valid (leases here never run out), and nothing is lost.
func testConcurrentLease(h *harness) {
	t, now := h.t, T0
	const producers, perProducer, batch, consumers, shared = 6, 150, 15, 6, 30
	var (
		mu       sync.Mutex
		leased   = map[string]string{} // id -> receipt
		newCount = map[string]int{}    // id -> inserts answered as new
		done     atomic.Bool
		pwg, cwg sync.WaitGroup
	)
	for p := range producers {
		pwg.Go(func() {
			for b := 0; b < perProducer; b += batch {
				var msgs []store.InsertMessage
				for i := b; i < b+batch; i++ {
					msgs = append(msgs, msg(fmt.Sprintf("p%d-%d", p, i), now))
				}
				for k := range 3 {
					msgs = append(msgs, msg(fmt.Sprintf("shared-%d", (b/batch*3+k+p)%shared), now))
				}
				res, err := h.s.MessageInsertMany(h.ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: msgs})
				if err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				mu.Lock()
				for _, r := range res {
					if !r.Duplicate {
						newCount[r.Record.ID]++
					}
				}
				mu.Unlock()
			}
		})
	}
	for c := range consumers {
		cwg.Go(func() {
			for n := 0; ; n++ {
				finished := done.Load() // read before leasing: then empty means empty
				recs, err := h.s.MessageLease(h.ctx, &store.MessageLeaseParams{
					Topic: "t", Now: now, Max: 7, LeaseFor: 1_000_000_000, Token: fmt.Sprintf("c%d-%d", c, n),
				})
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				if len(recs) == 0 {
					if finished {
						return
					}
					continue
				}
				mu.Lock()
				for _, r := range recs {
					if prev, ok := leased[r.ID]; ok {
						t.Errorf("%s leased twice while its lease is valid (receipts %q, %q)", r.ID, prev, r.Receipt)
					}
					leased[r.ID] = r.Receipt
				}
				mu.Unlock()
				// Ack half one by one, half in one call.
				var items []store.AckItem
				for i, r := range recs {
					if i%2 == 0 {
						if err := h.ack("t", r.ID, r.Receipt, now); err != nil {
							t.Errorf("ack %s: %v", r.ID, err)
						}
					} else {
						items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
					}
				}
				errs, err := h.s.MessageAckMany(h.ctx, &store.MessageAckManyParams{Topic: "t", Items: items, Now: now})
				if err != nil {
					t.Errorf("ack many: %v", err)
					return
				}
				for i, e := range errs {
					if e != nil {
						t.Errorf("ack many %s: %v", items[i].ID, e)
					}
				}
			}
		})
	}
	pwg.Wait()
	done.Store(true)
	cwg.Wait()

	total := producers*perProducer + shared
	if len(newCount) != total || len(leased) != total {
		t.Errorf("%d ids inserted, %d leased, want %d", len(newCount), len(leased), total)
	}
	for id, n := range newCount {
		if n != 1 {
			t.Errorf("%s answered as new %d times", id, n)
		}
	}
	h.counts("t", store.Counts{Acked: int64(total)})
}

// testConcurrentAckExpire races acks against lease expiry and promotes
// against each other: each message ends up acked or expired, never both,
// and each scheduled message is promoted once.
func testConcurrentAckExpire(h *harness) {
	t, now := h.t, T0
	const n = 300
	var msgs []store.InsertMessage
	for i := range n {
		msgs = append(msgs, msg(fmt.Sprintf("m%d", i), now+int64(i%50)))
	}
	h.insertNew("t", now-1, msgs...)

	var promoted atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				r, err := h.s.MessagePromote(h.ctx, &store.MessagePromoteParams{Topic: "t", Now: now + 100, Max: 13})
				if err != nil {
					t.Errorf("promote: %v", err)
					return
				}
				if r.Promoted == 0 {
					return
				}
				promoted.Add(int64(r.Promoted))
			}
		})
	}
	wg.Wait()
	if promoted.Load() != n {
		t.Fatalf("concurrent promotes moved %d messages, want %d", promoted.Load(), n)
	}

	var recs []*store.Record
	for len(recs) < n {
		got := h.lease("t", now+100, 64, now+110)
		if len(got) == 0 {
			t.Fatalf("leased %d of %d", len(recs), n)
		}
		recs = append(recs, got...)
	}
	var (
		mu      sync.Mutex
		acked   = map[string]bool{}
		expired = map[string]int{}
	)
	wg.Go(func() {
		for _, r := range recs {
			err := h.ack("t", r.ID, r.Receipt, now+110)
			switch ErrClass(err) {
			case "nil":
				mu.Lock()
				acked[r.ID] = true
				mu.Unlock()
			case "conflict": // expired first
			default:
				t.Errorf("ack %s: %v", r.ID, err)
			}
		}
	})
	for range 2 {
		wg.Go(func() {
			for {
				got, err := h.s.LeaseExpire(h.ctx, &store.LeaseExpireParams{Now: now + 110, Max: 7})
				if err != nil {
					t.Errorf("expire: %v", err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					expired[r.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, r := range recs {
		if acked[r.ID] == (expired[r.ID] == 1) || expired[r.ID] > 1 {
			t.Errorf("%s: acked %v, expired %d times", r.ID, acked[r.ID], expired[r.ID])
		}
	}
	h.counts("t", store.Counts{Ready: int64(len(expired)), Acked: int64(len(acked))})
}
