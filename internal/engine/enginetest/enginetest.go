// Package enginetest runs engines on a store that several servers share
// (Redis, PostgreSQL, MySQL): what the conformance suite cannot see from
// one store, such as wake-ups through the store's notifications, leases
// raced by several engines, and servers whose clocks differ from the
// store's. Every shared backend runs the same bodies from its own tests:
//
//	func TestTwoEngines(t *testing.T) { enginetest.RunTwoEngines(t, deployment(t)) }
//
// The bodies do not call t.Parallel; a backend whose test servers allow it
// calls it first.
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store"
)

// Deployment opens the store of one more server of a deployment: each
// call opens a new store on the same data (a Redis key prefix, a
// PostgreSQL schema, a MySQL table prefix) that judges time by the store's
// own clock, as in production. The caller closes it (Open does).
type Deployment func(t *testing.T) store.Store

var ctx = context.Background()

// Open opens an engine with cfg on s, closing both when t ends.
func Open(t *testing.T, s store.Store, cfg engine.Config) *engine.Engine {
	t.Helper()
	cfg.Store = s
	e, err := engine.Open(ctx, cfg)
	if err != nil {
		_ = s.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = e.Close(ctx)
		_ = s.Close()
	})
	return e
}

// Engines opens n engines with cfg, each on a new store of d.
func Engines(t *testing.T, d Deployment, n int, cfg engine.Config) []*engine.Engine {
	t.Helper()
	out := make([]*engine.Engine, n)
	for i := range out {
		out[i] = Open(t, d(t), cfg)
	}
	return out
}

// RunTwoEngines: a delayed send through one engine is delivered, not
// early, to a long-poll on another engine of the deployment (promotion by
// whichever engine's timer fires; wake-up through the store's Notifier).
func RunTwoEngines(t *testing.T, d Deployment) {
	es := Engines(t, d, 2, engine.Config{})
	const delay = 300 * time.Millisecond
	for round := range 3 {
		id := "j" + string(rune('0'+round))
		sent := time.Now()
		if _, err := es[0].Send(ctx, "jobs", domain.SendRequest{ID: id, Payload: []byte("hi"), When: domain.When{Delay: delay}}); err != nil {
			t.Fatal(err)
		}
		msgs, err := es[1].Lease(ctx, "jobs", domain.LeaseRequest{Max: 1, Wait: 8 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		got := time.Since(sent)
		if len(msgs) != 1 || msgs[0].ID != id {
			t.Fatalf("lease: %+v", msgs)
		}
		if got < delay {
			t.Fatalf("delivered after %v, before its %v delay", got, delay)
		}
		t.Logf("delivered after %v (delay %v)", got, delay)
		// Not a latency target: anything near the 5 s safety sweep means
		// the notification was missed (a promotion by engine 0 must wake
		// engine 1's long-poll).
		if got > 3*time.Second {
			t.Fatalf("delivered after %v: by the safety sweep, not a notification", got)
		}
		if err := es[1].Ack(ctx, "jobs", id, msgs[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
}

// RunPacedAcrossEngines: a stream of sends through one engine, each due
// 400 ms after it (every third one at once), one every 10 ms, while a
// consumer long-polls another engine only: every message is delivered
// once, none early, and none near the 5 s safety sweep. The ready ones
// reach the consuming engine as "ready now" notifications, the others as
// due times its timers arm. The consuming engine learns the stream's due
// times only from what the sending engine announces (a store may leave
// out a due time after one it announced, PostgreSQL does) and from its
// own store calls when its timer fires (the woken lease's report of the
// next due time, or a promotion).
func RunPacedAcrossEngines(t *testing.T, d Deployment) {
	es := Engines(t, d, 2, engine.Config{})
	const n, every, delay = 60, 10 * time.Millisecond, 400 * time.Millisecond
	due := make(map[string]time.Time, n)
	var mu sync.Mutex
	got := make(chan error, 1)
	go func() {
		seen := map[string]bool{}
		var worst time.Duration
		for len(seen) < n {
			ms, err := es[1].Lease(ctx, "paced", domain.LeaseRequest{Max: 10, Wait: 8 * time.Second})
			if err != nil {
				got <- err
				return
			}
			if len(ms) == 0 {
				got <- fmt.Errorf("long-poll of 8 s ended empty with %d of %d delivered", len(seen), n)
				return
			}
			at := time.Now()
			for _, m := range ms {
				mu.Lock()
				want, ok := due[m.ID]
				mu.Unlock()
				switch {
				case !ok:
					got <- fmt.Errorf("delivered %s, never sent", m.ID)
					return
				case seen[m.ID]:
					got <- fmt.Errorf("%s delivered twice", m.ID)
					return
				case at.Before(want):
					got <- fmt.Errorf("%s delivered %v before its due time", m.ID, want.Sub(at))
					return
				}
				seen[m.ID] = true
				worst = max(worst, at.Sub(want))
				if err := es[1].Ack(ctx, "paced", m.ID, m.Receipt); err != nil {
					got <- err
					return
				}
			}
		}
		if worst > 3*time.Second {
			got <- fmt.Errorf("a message delivered %v late: by the safety sweep, not a wake-up", worst)
			return
		}
		t.Logf("%d messages, latest %v after its due time", n, worst)
		got <- nil
	}()
	for i := range n {
		id := fmt.Sprintf("p%02d", i)
		d := delay
		if i%3 == 2 {
			d = 0 // ready at once: announced as ready, not as a due time
		}
		mu.Lock()
		// No later than the store's due time: the store stamps due
		// times in whole ms, its now (read after this one) plus d, so
		// the bound is this instant's ms plus d, not the instant plus d
		// (a release within the due ms is on time, up to 1 ms before
		// time.Now().Add(d)).
		due[id] = time.Now().Truncate(time.Millisecond).Add(d)
		mu.Unlock()
		if _, err := es[0].Send(ctx, "paced", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: d}}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(every)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}

// RunSharedLeases: consumers on three engines race for the same
// messages; each message is delivered once, and all are delivered.
func RunSharedLeases(t *testing.T, d Deployment) {
	es := Engines(t, d, 3, engine.Config{})
	const n = 300
	reqs := make([]domain.SendRequest, n)
	for i := range reqs {
		reqs[i] = domain.SendRequest{Payload: []byte("x")}
	}
	if _, err := es[0].SendBatch(ctx, "work", reqs); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Go(func() {
			e := es[i%3]
			for {
				ms, err := e.Lease(ctx, "work", domain.LeaseRequest{Max: 7, Wait: 500 * time.Millisecond, Lease: time.Minute})
				if err != nil {
					t.Error(err)
					return
				}
				if len(ms) == 0 {
					return
				}
				for _, m := range ms {
					mu.Lock()
					seen[m.ID]++
					mu.Unlock()
					if err := e.Ack(ctx, "work", m.ID, m.Receipt); err != nil {
						t.Error(err)
					}
				}
			}
		})
	}
	wg.Wait()
	if len(seen) != n {
		t.Fatalf("%d of %d messages delivered", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Errorf("%s delivered %d times", id, c)
		}
	}
}

// Skewed opens an engine on a new store of d whose clock is off by skew
// from this machine's (and so from the test server's). Its safety sweep
// is an hour, so that a lost wake-up shows as a long-poll's whole wait
// rather than as a few seconds a loaded machine could also explain.
func Skewed(t *testing.T, d Deployment, skew time.Duration) *engine.Engine {
	t.Helper()
	return Open(t, d(t), engine.Config{Clock: clock.Offset{By: skew}, SafetySweep: time.Hour})
}

// StoreClock opens a store of d to read the store's clock with Now,
// closing it when t ends.
func StoreClock(t *testing.T, d Deployment) store.Clock {
	t.Helper()
	s := d(t)
	t.Cleanup(func() { _ = s.Close() })
	c, ok := s.(store.Clock)
	if !ok {
		t.Fatalf("%T has no clock of its own (store.Clock)", s)
	}
	if _, ok, err := c.StoreNow(ctx); err != nil || !ok {
		t.Fatalf("StoreNow: ok %v, %v: the store must judge time by its own clock", ok, err)
	}
	return c
}

// Now reads c's time.
func Now(t *testing.T, c store.Clock) time.Time {
	t.Helper()
	ms, _, err := c.StoreNow(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return time.UnixMilli(ms)
}

// RunSkewedServers: every instant comes from the store's clock (one clock
// per deployment). A send with a delay through a server 2 s behind the
// store is due delay after the store's now, not 2 s early; a lease and a
// retry through a server 2 s ahead end lease/retry after the store's now,
// not 2 s later; a long-poll on either is woken, never early and not by
// the safety sweep.
func RunSkewedServers(t *testing.T, d Deployment) {
	probe := StoreClock(t, d)
	slow := Skewed(t, d, -2*time.Second)
	fast := Skewed(t, d, 2*time.Second)

	const delay = time.Second
	before := Now(t, probe)
	m, err := slow.Send(ctx, "skew", domain.SendRequest{ID: "a", Payload: []byte("x"), When: domain.When{Delay: delay}})
	if err != nil {
		t.Fatal(err)
	}
	after := Now(t, probe)
	if m.DeliverAt.Before(before.Add(delay)) || m.DeliverAt.After(after.Add(delay)) {
		t.Fatalf("sent through a server 2 s slow: due %v, want delay after the store's now (%v … %v)", m.DeliverAt, before.Add(delay), after.Add(delay))
	}
	// Nothing is handed out before it is due by the store's clock, by either.
	for _, e := range []*engine.Engine{slow, fast} {
		got, err := e.Lease(ctx, "skew", domain.LeaseRequest{Max: 1})
		if err != nil || len(got) != 0 {
			t.Fatalf("lease before due: %v %v", got, err)
		}
	}
	// A wake-up that was lost is only found by the long-poll's last look
	// at the end of its wait (the sweep is an hour): lateLost is well
	// inside that and well beyond what a loaded CI machine delays a timer.
	const wait, lateLost = 20 * time.Second, 10 * time.Second
	got, err := fast.Lease(ctx, "skew", domain.LeaseRequest{Max: 1, Lease: 5 * time.Second, Wait: wait})
	if err != nil || len(got) != 1 {
		t.Fatalf("lease when due: %v %v", got, err)
	}
	leasedAt := Now(t, probe)
	if leasedAt.Before(m.DeliverAt) {
		t.Fatalf("leased at %v by the store's clock, before its due time %v", leasedAt, m.DeliverAt)
	}
	if late := leasedAt.Sub(m.DeliverAt); late > lateLost {
		t.Fatalf("leased %v after due: a lost wake-up", late)
	}
	if until := got[0].LeaseExpiresAt; until.After(leasedAt.Add(5*time.Second)) || until.Before(leasedAt.Add(4*time.Second)) {
		t.Fatalf("lease through a server 2 s fast ends %v, want ~5 s after the store's now %v", until, leasedAt)
	}
	n, err := fast.Nack(ctx, "skew", "a", got[0].Receipt, domain.NackRequest{Delay: time.Second, HasDelay: true})
	if err != nil {
		t.Fatal(err)
	}
	if in := n.DeliverAt.Sub(Now(t, probe)); in > time.Second || in < 500*time.Millisecond {
		t.Fatalf("retry through a server 2 s fast is due in %v by the store's clock, want ~1 s", in)
	}
	again, err := slow.Lease(ctx, "skew", domain.LeaseRequest{Max: 1, Wait: wait})
	if err != nil || len(again) != 1 {
		t.Fatalf("lease of the retry on the slow server: %v %v", again, err)
	}
	if at := Now(t, probe); at.Before(n.DeliverAt) || at.Sub(n.DeliverAt) > lateLost {
		t.Fatalf("retry leased at %v, due %v: early, or a lost wake-up", at, n.DeliverAt)
	}
}

// RunFastServerKeepsDedupWindow: the dedup cutoff is computed from the
// store's clock, so a server whose clock runs an hour fast cannot purge
// tombstones acked within the window.
func RunFastServerKeepsDedupWindow(t *testing.T, d Deployment) {
	s := d(t)
	t.Cleanup(func() { _ = s.Close() })
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "d", Now: time.Now().UnixMilli(),
		Messages: []store.InsertMessage{{ID: "a", Payload: []byte("a"), Relative: true, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "d", Max: 1, LeaseFor: 60_000, Token: "t"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "d", ID: "a", Receipt: recs[0].Receipt}); err != nil {
		t.Fatal(err)
	}
	hourFast := time.Now().Add(time.Hour).UnixMilli()
	n, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: hourFast, Window: (30 * time.Minute).Milliseconds(), Max: 10})
	if err != nil || n != 0 {
		t.Fatalf("purge by a server an hour fast, 30 min window: %d purged, %v; want 0", n, err)
	}
	if r, err := s.MessageGet(ctx, "d", "a"); err != nil || r.State != store.StateAcked {
		t.Fatalf("tombstone: %+v %v", r, err)
	}
	// And the window does end, by the store's clock.
	n, err = s.DedupPurge(ctx, &store.DedupPurgeParams{Window: -1000, Max: 10})
	if err != nil || n != 1 {
		t.Fatalf("purge past the window: %d %v", n, err)
	}
}

// RunPauseShared: a topic paused through one engine stops leases on
// another engine of the deployment, which had read the topic's settings
// before (so it learns of the pause from the store, within settle: the
// store's settings notification, or the 5 s safety sweep where the store
// announces none); sends are still accepted; a resume through the first
// engine wakes the other's long-poll; an engine opened later sees the
// pause.
func RunPauseShared(t *testing.T, d Deployment, settle time.Duration) {
	es := Engines(t, d, 2, engine.Config{})
	a, b := es[0], es[1]
	if got, err := b.Lease(ctx, "paused", domain.LeaseRequest{}); err != nil || len(got) != 0 {
		t.Fatalf("first lease: %v %v", got, err)
	}
	if ti, err := a.PauseTopic(ctx, "paused", true); err != nil || !ti.Paused {
		t.Fatalf("pause: %+v %v", ti, err)
	}
	time.Sleep(settle)
	if _, err := b.Send(ctx, "paused", domain.SendRequest{ID: "m1", Payload: []byte("x")}); err != nil {
		t.Fatalf("send to a paused topic: %v", err)
	}
	if ti, err := b.Topic(ctx, "paused"); err != nil || !ti.Paused || ti.Counts.Ready != 1 {
		t.Fatalf("topic on the other engine: %+v %v", ti, err)
	}
	if got, err := b.Lease(ctx, "paused", domain.LeaseRequest{Wait: time.Second}); err != nil || len(got) != 0 {
		t.Fatalf("leased %v from a topic paused through another engine (%v)", got, err)
	}
	done := make(chan []*domain.Message, 1)
	go func() {
		got, err := b.Lease(ctx, "paused", domain.LeaseRequest{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		done <- got
	}()
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if ti, err := a.PauseTopic(ctx, "paused", false); err != nil || ti.Paused {
		t.Fatalf("resume: %+v %v", ti, err)
	}
	got := <-done
	if len(got) != 1 || got[0].ID != "m1" {
		t.Fatalf("after resume the long-poll on the other engine got %v", got)
	}
	if el := time.Since(start); el > settle+2*time.Second {
		t.Fatalf("resume reached the other engine after %v", el)
	}
	if _, err := a.PauseTopic(ctx, "paused", true); err != nil {
		t.Fatal(err)
	}
	c := Open(t, d(t), engine.Config{})
	if _, err := c.Send(ctx, "paused", domain.SendRequest{ID: "m2", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	if ti, err := c.Topic(ctx, "paused"); err != nil || !ti.Paused {
		t.Fatalf("a new engine does not see the pause: %+v %v", ti, err)
	}
	if got, err := c.Lease(ctx, "paused", domain.LeaseRequest{}); err != nil || len(got) != 0 {
		t.Fatalf("a new engine leased %v from a paused topic (%v)", got, err)
	}
}

// RunGroupedWrites: 32 callers on two engines send single messages whose
// ids repeat (each id by many callers at once, so that repeats share a
// grouped write and cross engines), then ack every message three times at
// once (twice with its receipt, once with a stale one). Each id is created
// once with its own payload; both acks with its receipt are answered ok
// (one wrote, the other is a retry of it), the stale one is refused
// (conflict), and the topic ends empty.
func RunGroupedWrites(t *testing.T, d Deployment) {
	es := Engines(t, d, 2, engine.Config{})
	const callers, each, ids = 32, 20, 40
	var mu sync.Mutex
	created := map[string]int{}
	var wg sync.WaitGroup
	for c := range callers {
		wg.Go(func() {
			e := es[c%2]
			for i := range each {
				id := fmt.Sprintf("g-%d", (c*7+i)%ids)
				m, err := e.Send(ctx, "grouped", domain.SendRequest{ID: id, Payload: []byte("p-" + id)})
				if err != nil {
					t.Error(err)
					return
				}
				if m.ID != id || string(m.Payload) != "p-"+id {
					t.Errorf("sent %s, answered %s with %q", id, m.ID, m.Payload)
				}
				if !m.Duplicate {
					mu.Lock()
					created[id]++
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(created) != ids {
		t.Fatalf("%d ids created, want %d", len(created), ids)
	}
	for id, n := range created {
		if n != 1 {
			t.Errorf("%s created %d times", id, n)
		}
	}
	var leased []*domain.Message
	for len(leased) < ids {
		ms, err := es[0].Lease(ctx, "grouped", domain.LeaseRequest{Max: ids, Wait: time.Second, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(ms) == 0 {
			t.Fatalf("%d of %d messages leased", len(leased), ids)
		}
		leased = append(leased, ms...)
	}
	acked := map[string]int{}
	for _, m := range leased {
		for k, receipt := range []string{m.Receipt, m.Receipt, "stale-" + m.Receipt} {
			wg.Go(func() {
				err := es[k%2].Ack(ctx, "grouped", m.ID, receipt)
				switch {
				case err == nil && receipt == m.Receipt:
					mu.Lock()
					acked[m.ID]++
					mu.Unlock()
				case receipt != m.Receipt && errors.Is(err, domain.ErrConflict):
				default:
					t.Errorf("ack %s with receipt %s: %v", m.ID, receipt, err)
				}
			})
		}
	}
	wg.Wait()
	for _, m := range leased {
		if acked[m.ID] != 2 {
			t.Errorf("%s: %d acks with its receipt answered ok, want 2", m.ID, acked[m.ID])
		}
	}
	info, err := es[1].Topic(ctx, "grouped")
	if err != nil {
		t.Fatal(err)
	}
	if c := info.Counts; c.Scheduled+c.Ready+c.Inflight != 0 {
		t.Errorf("after the acks the topic holds %+v", c)
	}
}

// RunAckRetried runs AckRetried on two servers of the deployment.
func RunAckRetried(t *testing.T, d Deployment) {
	es := Engines(t, d, 2, engine.Config{})
	AckRetried(t, es[0], es[1])
}

// AckRetried: an ack repeated with the receipt that acked the message (a
// client retrying after a lost answer, possibly through another server)
// is answered as the first was, alone, in a batch and raced by eight
// callers at once; a receipt of an earlier delivery, or one naming a
// delivery that never acked, is still a conflict. a and b may be one
// engine (a store only one server can open).
func AckRetried(t *testing.T, a, b *engine.Engine) {
	t.Helper()
	const topic = "acks-retried"
	leaseOne := func(e *engine.Engine, id string) *domain.Message {
		t.Helper()
		ms, err := e.Lease(ctx, topic, domain.LeaseRequest{Max: 1, Wait: 5 * time.Second, Lease: time.Minute})
		if err != nil || len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease of %s: %v, %v", id, ms, err)
		}
		return ms[0]
	}
	wantConflict := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, domain.ErrConflict) {
			t.Errorf("%s: %v, want a conflict", what, err)
		}
	}
	send := func(id string) {
		t.Helper()
		if _, err := a.Send(ctx, topic, domain.SendRequest{ID: id, Payload: []byte(id)}); err != nil {
			t.Fatal(err)
		}
	}

	send("once")
	m := leaseOne(a, "once")
	if err := a.Ack(ctx, topic, "once", m.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := b.Ack(ctx, topic, "once", m.Receipt); err != nil {
		t.Errorf("ack retried through the other server: %v", err)
	}
	if err := a.Ack(ctx, topic, "once", m.Receipt); err != nil {
		t.Errorf("ack retried through the same server: %v", err)
	}
	errs, err := b.AckBatch(ctx, topic, []domain.AckRequest{{ID: "once", Receipt: m.Receipt}})
	if err != nil || errs[0] != nil {
		t.Errorf("batch ack retried: %v, %v", errs, err)
	}

	// Delivery 1 fails, delivery 2 is acked: 1's receipt is stale, and
	// receipts that never acked it are conflicts.
	send("twice")
	first := leaseOne(b, "twice")
	if _, err := b.Nack(ctx, topic, "twice", first.Receipt, domain.NackRequest{HasDelay: true}); err != nil {
		t.Fatal(err)
	}
	second := leaseOne(a, "twice")
	if second.Attempt != 2 {
		t.Fatalf("second lease: attempt %d, want 2", second.Attempt)
	}
	if err := b.Ack(ctx, topic, "twice", second.Receipt); err != nil {
		t.Fatal(err)
	}
	wantConflict("ack with the receipt of a redelivered lease", a.Ack(ctx, topic, "twice", first.Receipt))
	errs, err = a.AckBatch(ctx, topic, []domain.AckRequest{{ID: "twice", Receipt: first.Receipt}, {ID: "twice", Receipt: second.Receipt}})
	if err != nil {
		t.Fatal(err)
	}
	wantConflict("batch ack with the receipt of a redelivered lease", errs[0])
	if errs[1] != nil {
		t.Errorf("batch ack retried with the acking receipt: %v", errs[1])
	}
	// The receipt's delivery with another token: a lease a crash undid
	// and the store handed out again.
	other := "0000000000000000" + second.Receipt[strings.LastIndexByte(second.Receipt, '-'):]
	for _, r := range []string{other, second.Receipt + "0", "x-3", "x"} {
		wantConflict("ack with receipt "+r, a.Ack(ctx, topic, "twice", r))
	}

	// Eight acks of one receipt at once, on both servers: one writes, the
	// others find it done; each is answered ok.
	send("raced")
	m = leaseOne(b, "raced")
	var wg sync.WaitGroup
	raced := make([]error, 8)
	for i := range raced {
		e := a
		if i%2 == 1 {
			e = b
		}
		wg.Go(func() { raced[i] = e.Ack(ctx, topic, "raced", m.Receipt) })
	}
	wg.Wait()
	for i, err := range raced {
		if err != nil {
			t.Errorf("raced ack %d: %v", i, err)
		}
	}

	// A batch of 40 acked, then retried whole through the other server
	// with a stale receipt and an unknown id among them: the 40 are
	// answered ok (read back concurrently), the other two as before.
	var batch []domain.AckRequest
	for i := range 40 {
		send(fmt.Sprintf("batch-%02d", i))
	}
	ms, err := a.Lease(ctx, topic, domain.LeaseRequest{Max: 40, Wait: 5 * time.Second, Lease: time.Minute})
	if err != nil || len(ms) != 40 {
		t.Fatalf("lease of the batch: %d, %v", len(ms), err)
	}
	for _, m := range ms {
		batch = append(batch, domain.AckRequest{ID: m.ID, Receipt: m.Receipt})
	}
	if errs, err := a.AckBatch(ctx, topic, batch); err != nil || slices.ContainsFunc(errs, func(e error) bool { return e != nil }) {
		t.Fatalf("batch ack: %v, %v", errs, err)
	}
	retry := append(slices.Clone(batch[:20]), domain.AckRequest{ID: "twice", Receipt: first.Receipt}, domain.AckRequest{ID: "never-sent", Receipt: batch[0].Receipt})
	retry = append(retry, batch[20:]...)
	errs, err = b.AckBatch(ctx, topic, retry)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range errs {
		switch {
		case i == 20:
			wantConflict("a stale receipt in a retried batch", e)
		case i == 21:
			if !errors.Is(e, domain.ErrNotFound) {
				t.Errorf("an unknown id in a retried batch: %v, want not found", e)
			}
		case e != nil:
			t.Errorf("retried batch ack of %s: %v", retry[i].ID, e)
		}
	}

	for id, attempt := range map[string]int{"once": 1, "twice": 2, "raced": 1, "batch-00": 1, "batch-39": 1} {
		got, err := b.Get(ctx, topic, id)
		if err != nil || got.State != domain.StateAcked || got.Attempt != attempt {
			t.Errorf("%s after the acks: %+v, %v; want acked after %d deliveries", id, got, err, attempt)
		}
	}
	info, err := a.Topic(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts != (domain.TopicCounts{}) {
		t.Errorf("topic counts after the acks: %+v, want none left", info.Counts)
	}
}

// RunNackRetried runs NackRetried on two servers of the deployment.
func RunNackRetried(t *testing.T, d Deployment) {
	es := Engines(t, d, 2, engine.Config{})
	NackRetried(t, es[0], es[1])
}

// NackRetried: a nack repeated with its receipt and reason after it was
// done (a client retrying after a lost answer, possibly through another
// server) is answered with the message as the nack left it, its failure
// counted once — with the topic's backoff, with a delay of its own, to
// dead letters, and raced by eight callers at once. A nack whose receipt's
// delivery ended otherwise is still a conflict: the lease ran out (even
// with the expiry's own reason), another delivery began since, another
// reason, or to dead letters where the first was retried. a and b may be
// one engine (a store only one server can open).
func NackRetried(t *testing.T, a, b *engine.Engine) {
	t.Helper()
	// A topic per case: a due-now message of one case is not leased in
	// place of the next one's.
	topic := "nacks-backoff"
	leaseOne := func(e *engine.Engine, id string, lease time.Duration) *domain.Message {
		t.Helper()
		ms, err := e.Lease(ctx, topic, domain.LeaseRequest{Max: 1, Wait: 5 * time.Second, Lease: lease})
		if err != nil || len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease of %s: %v, %v", id, ms, err)
		}
		return ms[0]
	}
	wantConflict := func(what string, e *engine.Engine, id, receipt string, req domain.NackRequest) {
		t.Helper()
		if m, err := e.Nack(ctx, topic, id, receipt, req); !errors.Is(err, domain.ErrConflict) {
			t.Errorf("%s: %+v, %v; want a conflict", what, m, err)
		}
	}
	send := func(id string) {
		t.Helper()
		if _, err := a.Send(ctx, topic, domain.SendRequest{ID: id, Payload: []byte(id), MaxAttempts: 5}); err != nil {
			t.Fatal(err)
		}
	}
	// retried nacks m's delivery with req through both servers and wants
	// each answer to be the first's.
	retried := func(id, receipt string, req domain.NackRequest, first *domain.Message) {
		t.Helper()
		for i, e := range []*engine.Engine{b, a} {
			again, err := e.Nack(ctx, topic, id, receipt, req)
			if err != nil {
				t.Errorf("%s: nack retried (%d): %v", id, i, err)
				continue
			}
			if again.State != first.State || again.Failures != first.Failures || again.LastError != first.LastError ||
				!again.DeliverAt.Equal(first.DeliverAt) || again.Attempt != first.Attempt {
				t.Errorf("%s: nack retried (%d) answered %+v, want the first answer %+v", id, i, again, first)
			}
		}
	}

	// The topic's backoff: the message is due later, failed once. An
	// hour's, so that it is still scheduled when the counts are read
	// below however slow the machine (the default's second was not).
	if _, err := a.SetTopicSettings(ctx, topic, domain.TopicSettings{Backoff: domain.Backoff{Initial: time.Hour, Max: 2 * time.Hour, Multiplier: 2}}); err != nil {
		t.Fatal(err)
	}
	send("backoff")
	m := leaseOne(a, "backoff", time.Minute)
	backoffReq := domain.NackRequest{Reason: "downstream 502"}
	first, err := a.Nack(ctx, topic, "backoff", m.Receipt, backoffReq)
	if err != nil || first.Failures != 1 || first.State != domain.StateScheduled {
		t.Fatalf("nack with backoff: %+v, %v", first, err)
	}
	retried("backoff", m.Receipt, backoffReq, first)
	wantConflict("a nack with another reason", a, "backoff", m.Receipt, domain.NackRequest{Reason: "downstream 503"})
	wantConflict("a nack to dead letters retried as one", b, "backoff", m.Receipt, domain.NackRequest{Reason: backoffReq.Reason, Dead: true})
	wantConflict("a receipt with no delivery number", a, "backoff", "x", backoffReq)

	// A delay of its own, and no reason: due now, then delivered again,
	// after which the first delivery's nack is a conflict and the
	// second's is recognised.
	topic = "nacks-delay"
	send("delay")
	m = leaseOne(b, "delay", time.Minute)
	now := domain.NackRequest{HasDelay: true}
	first, err = b.Nack(ctx, topic, "delay", m.Receipt, now)
	if err != nil || first.Failures != 1 || first.State != domain.StateReady {
		t.Fatalf("nack due now: %+v, %v", first, err)
	}
	retried("delay", m.Receipt, now, first)
	second := leaseOne(a, "delay", time.Minute)
	if second.Attempt != 2 {
		t.Fatalf("second lease: attempt %d, want 2", second.Attempt)
	}
	wantConflict("a nack of a delivery that was followed by another", b, "delay", m.Receipt, now)
	later := domain.NackRequest{HasDelay: true, Delay: time.Hour, Reason: "retry in an hour"}
	first, err = a.Nack(ctx, topic, "delay", second.Receipt, later)
	if err != nil || first.Failures != 2 || first.State != domain.StateScheduled {
		t.Fatalf("second nack: %+v, %v", first, err)
	}
	retried("delay", second.Receipt, later, first)

	// To dead letters.
	topic = "nacks-dead"
	send("dead")
	m = leaseOne(a, "dead", time.Minute)
	deadReq := domain.NackRequest{Dead: true, Reason: "account deleted"}
	first, err = b.Nack(ctx, topic, "dead", m.Receipt, deadReq)
	if err != nil || first.State != domain.StateDead {
		t.Fatalf("nack to dead letters: %+v, %v", first, err)
	}
	retried("dead", m.Receipt, deadReq, first)

	// The lease ran out: a nack of that delivery is a conflict, whatever
	// its reason.
	topic = "nacks-expired"
	send("expired")
	m = leaseOne(b, "expired", 50*time.Millisecond)
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := a.Get(ctx, topic, "expired")
		if err != nil {
			t.Fatal(err)
		}
		if got.State != domain.StateInflight {
			if got.Failures != 1 {
				t.Fatalf("after its lease ran out: %+v", got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the lease of %+v did not run out", got)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, reason := range []string{"", "timeout", "lease expired"} {
		wantConflict("a nack of an expired lease, reason "+reason, a, "expired", m.Receipt, domain.NackRequest{HasDelay: true, Reason: reason})
	}

	// Eight nacks of one receipt at once, on both servers: one writes,
	// the others find it done; each is answered ok.
	topic = "nacks-raced"
	send("raced")
	m = leaseOne(b, "raced", time.Minute)
	var wg sync.WaitGroup
	raced := make([]*domain.Message, 8)
	errs := make([]error, 8)
	for i := range raced {
		e := a
		if i%2 == 1 {
			e = b
		}
		wg.Go(func() { raced[i], errs[i] = e.Nack(ctx, topic, "raced", m.Receipt, later) })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("raced nack %d: %v", i, err)
		} else if raced[i].Failures != 1 || raced[i].State != domain.StateScheduled {
			t.Errorf("raced nack %d: %+v, want scheduled after one failure", i, raced[i])
		}
	}

	var counts domain.TopicCounts
	for id, failures := range map[string]int{"backoff": 1, "delay": 2, "dead": 1, "expired": 1, "raced": 1} {
		got, err := b.Get(ctx, "nacks-"+id, id)
		if err != nil || got.Failures != failures {
			t.Errorf("%s after the nacks: %+v, %v; want %d failures", id, got, err, failures)
		}
		info, err := a.Topic(ctx, "nacks-"+id)
		if err != nil {
			t.Fatal(err)
		}
		counts.Scheduled += info.Counts.Scheduled
		counts.Ready += info.Counts.Ready
		counts.Inflight += info.Counts.Inflight
		counts.Dead += info.Counts.Dead
	}
	// backoff, delay and raced are scheduled, expired ready, dead dead.
	if counts != (domain.TopicCounts{Scheduled: 3, Ready: 1, Dead: 1}) {
		t.Errorf("topic counts after the nacks: %+v", counts)
	}
}
