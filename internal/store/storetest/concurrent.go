package storetest

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

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

// testConcurrentMixed races every kind of message operation on a few ids
// of two topics, from several goroutines, the way a busy queue with
// retrying clients mixes them: sends of ids that exist, reads, cancels,
// reschedules, leases, acks (single and batched), nacks, extends,
// promotions, dead-letter replays and deletes, tombstone purges, topic
// deletes, settings puts and lists, message lists. Every call must answer as the contract allows (a race
// only ever costs a not-found or a conflict, never another error such as
// a false "corrupt"), every payload read must be the one sent, no message
// may be leased while an earlier lease of it is still held (leases here
// never run out), and the live counts must equal a recount of the ids
// afterwards.
func testConcurrentMixed(h *harness) { runConcurrentMixed(h, false) }

// testConcurrentMixedExpiry is testConcurrentMixed with time moving on
// (each call a ms after the one before, so concurrent calls reach the
// store slightly out of order, as from servers whose clocks differ a
// little), leases of a few ms that run out and are expired by LeaseExpire
// calls racing the acks, nacks, extends and cancels of the same
// messages, and retries and sends due a few ms later.
func testConcurrentMixedExpiry(h *harness) { runConcurrentMixed(h, true) }

func runConcurrentMixed(h *harness, expiry bool) {
	t := h.t
	if c, ok := h.s.(ClockPerCall); ok && expiry && c.ClockPerCall() {
		t.Skip("the test sets this store's clock to each call's Now: concurrent calls with different Nows would move it under each other")
	}
	var clock atomic.Int64
	clock.Store(T0)
	// At least minOps calls per worker, and more up to maxOps while the
	// run is shorter than a second: a fast store gets the many calls a
	// narrow race needs, a SQL one stays within seconds.
	const workers, minOps, maxOps, ids = 6, 300, 5000, 10
	start := time.Now()
	type idStats struct {
		leases, releases int // successful leases; the acks, nacks, cancels (of an inflight message) and expiries that ended one
		receipts         []string
	}
	var (
		mu      sync.Mutex
		stats   [ids]idStats
		calls   atomic.Int64 // calls that succeeded
		expired atomic.Int64 // leases LeaseExpire ended
		deletes atomic.Int64 // topics deleted
	)
	// Even ids are in topic t, odd ones in u: LeaseExpire and the purge
	// span both, and a topic emptied for a moment may be deleted.
	idOf := func(i int) string { return fmt.Sprintf("x%d", i) }
	topicOf := func(i int) string { return [2]string{"t", "u"}[i%2] }
	indexOf := func(id string) int {
		var i int
		_, _ = fmt.Sscanf(id, "x%d", &i)
		return i
	}
	checkPayload := func(what string, r *store.Record) {
		if r == nil || r.State == store.StateAcked {
			return
		}
		if want := "payload of " + r.ID; string(r.Payload) != want {
			t.Errorf("%s %s: payload %q, want %q (%s)", what, r.ID, r.Payload, want, fmtRec(r))
		}
	}
	allowed := func(what string, err error, ok ...string) bool {
		c := ErrClass(err)
		if c == "nil" {
			calls.Add(1)
			return true
		}
		for _, o := range ok {
			if c == o {
				return false
			}
		}
		t.Errorf("%s: %v", what, err)
		return false
	}
	receipt := func(i int, rng *rand.Rand) string {
		mu.Lock()
		defer mu.Unlock()
		rs := stats[i].receipts
		switch {
		case len(rs) == 0:
			return "none"
		case rng.IntN(4) == 0:
			return rs[rng.IntN(len(rs))] // maybe stale
		default:
			return rs[len(rs)-1]
		}
	}
	released := func(i int) {
		mu.Lock()
		stats[i].releases++
		mu.Unlock()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42)) // #nosec G404 G115 -- a fixed-seed schedule per worker (w: a worker number, never negative)
			for op := 0; op < minOps || op < maxOps && time.Since(start) < time.Second; op++ {
				i := rng.IntN(ids)
				id, tp := idOf(i), topicOf(i)
				sameTopic := func() int { return rng.IntN(ids/2)*2 + i%2 }
				now, leaseFor, later := T0, int64(1_000_000_000), int64(1000)
				if expiry {
					now, leaseFor, later = clock.Add(1), 1+rng.Int64N(30), 1+rng.Int64N(50)
				}
				switch k := rng.IntN(100); {
				case k < 20: // send 1-3 ids, due now or later
					var ms []store.InsertMessage
					for range 1 + rng.IntN(3) {
						due := now
						if rng.IntN(3) == 0 {
							due = now + later
						}
						ms = append(ms, msg(idOf(sameTopic()), due))
					}
					res, err := h.s.MessageInsertMany(h.ctx, &store.MessageInsertManyParams{Topic: tp, Now: now, Messages: ms})
					if allowed("insert", err) {
						for _, r := range res {
							checkPayload("insert", r.Record)
						}
					}
				case k < 30:
					r, err := h.s.MessageGet(h.ctx, tp, id)
					if allowed("get", err, "not found") {
						checkPayload("get", r)
					}
				case k < 35:
					r, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: tp, ID: id, Now: now})
					if allowed("cancel", err, "not found", "conflict") && r.State == store.StateInflight {
						released(i)
					}
				case k < 38:
					_, err := h.s.MessageReschedule(h.ctx, &store.MessageRescheduleParams{Topic: tp, ID: id, DueAt: now, Now: now})
					allowed("reschedule", err, "not found", "conflict")
				case k < 58:
					p := &store.MessageLeaseParams{Topic: tp, Now: now, Max: 1 + rng.IntN(3),
						LeaseFor: leaseFor, Token: fmt.Sprintf("w%d-%d", w, op)}
					var recs []*store.Record
					var err error
					// The due leases too, where the store has them: the
					// engine's long-polls use them.
					due, isDue := h.s.(store.DueLeaser)
					next, isNext := h.s.(store.NextDueLeaser)
					switch {
					case isNext && rng.IntN(3) == 0:
						var res *store.LeaseDueResult
						if res, err = next.MessageLeaseDueNext(h.ctx, p); err == nil {
							recs = res.Records
						}
					case isDue && rng.IntN(2) == 0:
						recs, err = due.MessageLeaseDue(h.ctx, p)
					default:
						recs, err = h.s.MessageLease(h.ctx, p)
					}
					if allowed("lease", err) {
						mu.Lock()
						for _, r := range recs {
							j := indexOf(r.ID)
							stats[j].leases++
							stats[j].receipts = append(stats[j].receipts, r.Receipt)
						}
						mu.Unlock()
						for _, r := range recs {
							checkPayload("lease", r)
							// Never early, by the clock that leased it: the
							// lease's stamp is the store's now.
							if r.State != store.StateInflight || r.UpdatedAt < r.DueAt || r.LeaseUntil != r.UpdatedAt+leaseFor {
								t.Errorf("leased at %d for %d ms: %s", r.UpdatedAt, leaseFor, fmtRec(r))
							}
						}
					}
				case k < 68:
					err := h.s.MessageAck(h.ctx, &store.MessageAckParams{Topic: tp, ID: id, Receipt: receipt(i, rng), Now: now})
					if allowed("ack", err, "not found", "conflict") {
						released(i)
					}
				case k < 73:
					j := sameTopic()
					items := []store.AckItem{{ID: id, Receipt: receipt(i, rng)}, {ID: idOf(j), Receipt: receipt(j, rng)}}
					errs, err := h.s.MessageAckMany(h.ctx, &store.MessageAckManyParams{Topic: tp, Items: items, Now: now})
					if allowed("ack many", err) {
						for n, e := range errs {
							if allowed("ack many: "+items[n].ID, e, "not found", "conflict") {
								released(indexOf(items[n].ID))
							}
						}
					}
				case k < 83:
					delay := int64(0)
					if rng.IntN(3) == 0 {
						delay = later
					}
					r, err := h.s.MessageNack(h.ctx, &store.MessageNackParams{Topic: tp, ID: id, Receipt: receipt(i, rng), Now: now,
						RetryDelay: delay, Error: "x", Final: rng.IntN(10) == 0})
					if allowed("nack", err, "not found", "conflict") {
						released(i)
						checkPayload("nack", r)
					}
				case k < 87:
					r, err := h.s.MessageExtend(h.ctx, &store.MessageExtendParams{Topic: tp, ID: id, Receipt: receipt(i, rng), Now: now, LeaseFor: leaseFor})
					if allowed("extend", err, "not found", "conflict") {
						checkPayload("extend", r)
					}
				case k < 90:
					p := &store.MessagePromoteParams{Topic: tp, Now: now, Max: 5}
					var err error
					if due, ok := h.s.(store.DueLeaser); ok && rng.IntN(2) == 0 {
						_, err = due.MessagePromoteGrace(h.ctx, p, int64(rng.IntN(2)))
					} else {
						_, err = h.s.MessagePromote(h.ctx, p)
					}
					allowed("promote", err)
				case k < 92:
					recs, err := h.s.DeadReplay(h.ctx, &store.DeadReplayParams{Topic: tp, ID: id, Now: now})
					if allowed("dead replay", err, "not found") {
						for _, r := range recs {
							checkPayload("dead replay", r)
						}
					}
				case k < 93:
					_, err := h.s.DeadDelete(h.ctx, &store.DeadDeleteParams{Topic: tp, ID: id})
					allowed("dead delete", err, "not found")
				case k < 94:
					switch rng.IntN(3) {
					case 0:
						if allowed("topic delete", h.s.TopicDelete(h.ctx, tp), "not found", "conflict") {
							deletes.Add(1)
						}
					case 1:
						allowed("settings put", h.s.TopicSettingsPut(h.ctx, tp, []byte(`{"w":`+fmt.Sprint(w)+`}`)))
					default:
						_, err := h.s.TopicList(h.ctx)
						allowed("topic list", err)
					}
				case k < 96:
					_, err := h.s.DedupPurge(h.ctx, &store.DedupPurgeParams{Now: now, Window: 0, Max: 5})
					allowed("purge", err)
				case expiry && k >= 98:
					recs, err := h.s.LeaseExpire(h.ctx, &store.LeaseExpireParams{Now: now, Max: 5})
					if allowed("expire", err) {
						for _, r := range recs {
							if r.State != store.StateReady && r.State != store.StateScheduled && r.State != store.StateDead {
								t.Errorf("expired %s", fmtRec(r))
							}
							released(indexOf(r.ID))
							expired.Add(1)
						}
					}
				default:
					st := []store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead}[rng.IntN(4)]
					recs, _, err := h.s.MessageList(h.ctx, &store.MessageListParams{Topic: tp, State: st,
						DueFrom: math.MinInt64, DueTo: math.MaxInt64, Limit: 5})
					if allowed("list", err) {
						for _, r := range recs {
							checkPayload("list", r)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	var wants [2]store.Counts
	for i := range ids {
		r, err := h.s.MessageGet(h.ctx, topicOf(i), idOf(i))
		if ErrClass(err) == "not found" {
			r = &store.Record{}
		} else if err != nil {
			t.Fatalf("get %s: %v", idOf(i), err)
		}
		held := 0
		want := &wants[i%2]
		switch r.State {
		case store.StateScheduled:
			want.Scheduled++
		case store.StateReady:
			want.Ready++
		case store.StateInflight:
			want.Inflight++
			held = 1
		case store.StateDead:
			want.Dead++
		case store.StateAcked:
			want.Acked++
		}
		// Each lease is released (ack, nack, cancel) before the next one,
		// and the last one is still held if the message is inflight.
		if s := stats[i]; s.leases != s.releases+held {
			t.Errorf("%s: %d leases, %d released, now %s", idOf(i), s.leases, s.releases, fmtRec(r))
		}
	}
	// Live counts only: a topic delete forgets the counts of the
	// tombstones it leaves, and a send revives the topic without them.
	for n, want := range wants {
		tr, err := h.s.TopicGet(h.ctx, topicOf(n))
		switch {
		case ErrClass(err) == "not found" && want.Live() == 0:
		case err != nil:
			t.Errorf("TopicGet(%s): %v", topicOf(n), err)
		case tr.Counts.Live() != want.Live() || tr.Counts.Scheduled != want.Scheduled || tr.Counts.Ready != want.Ready || tr.Counts.Inflight != want.Inflight:
			t.Errorf("topic %s counts %+v, recount %+v", topicOf(n), tr.Counts, want)
		}
	}
	// A run in which hardly anything succeeded checked nothing.
	if n := calls.Load(); n < workers*minOps/4 {
		t.Errorf("only %d calls succeeded", n)
	}
	leases := 0
	for _, s := range stats {
		leases += s.leases
	}
	if leases < ids {
		t.Errorf("only %d leases in the run", leases)
	}
	if expiry && expired.Load() == 0 {
		t.Errorf("no lease expired in %d leases", leases)
	}
	t.Logf("%d calls succeeded, %d leases (%d expired), %d topics deleted, final t %+v, u %+v",
		calls.Load(), leases, expired.Load(), deletes.Load(), wants[0], wants[1])
}
