package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// dueStore is a store.DueLeaser over memstore: its lease promotes what is
// due first, and it counts which promotion the engine called.
type dueStore struct {
	store.Store
	promotes, graces, leaseDues atomic.Int64
	// busy: how many grace promotions to answer Busy (-1: all).
	busy atomic.Int64
	// later: the NextDue a grace promotion answers beside a HeldDue, as
	// PostgreSQL does (the earliest due after now; 0: none).
	later atomic.Int64
	// hold, when set (before the engine promotes anything), is called as a
	// promotion starts: it may block, as a slow store call would.
	hold func(topic string)
}

func (s *dueStore) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	s.promotes.Add(1)
	if s.hold != nil {
		s.hold(p.Topic)
	}
	return s.Store.MessagePromote(ctx, p)
}

func (s *dueStore) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	s.graces.Add(1)
	if b := s.busy.Load(); b != 0 {
		if b > 0 {
			s.busy.Add(-1)
		}
		return &store.PromoteResult{Busy: true}, nil
	}
	q := *p
	q.Now -= grace
	res, err := s.Store.MessagePromote(ctx, &q)
	if err != nil {
		return nil, err
	}
	if res.NextDue != 0 && res.NextDue <= p.Now {
		res.HeldDue, res.NextDue = res.NextDue, s.later.Load()
	}
	return res, nil
}

func (s *dueStore) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	s.leaseDues.Add(1)
	if _, err := s.Store.MessagePromote(ctx, &store.MessagePromoteParams{Topic: p.Topic, Now: p.Now, Max: 1000}); err != nil {
		return nil, err
	}
	return s.Store.MessageLease(ctx, p)
}

// nextDueStore is a dueStore whose due lease reports the topic's next due
// time (store.NextDueLeaser): its lease promotes what is due, so what is
// left scheduled is after now, and the topic's NextDue is the first.
type nextDueStore struct{ *dueStore }

func (s nextDueStore) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (*store.LeaseDueResult, error) {
	recs, err := s.MessageLeaseDue(ctx, p)
	if err != nil {
		return nil, err
	}
	tr, err := s.Store.TopicGet(ctx, p.Topic)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return &store.LeaseDueResult{Records: recs}, nil
	case err != nil:
		return nil, err
	}
	return &store.LeaseDueResult{Records: recs, NextDue: tr.NextDue}, nil
}

func (nextDueStore) ReportsNextDue() bool { return true }

// openDueEngine opens an engine over a dueStore (with next, one that is a
// store.NextDueLeaser), closed when the test (in its synctest bubble)
// ends.
func openDueEngine(t *testing.T, next bool) (*dueStore, *Engine) {
	t.Helper()
	st := &dueStore{Store: memstore.New()}
	var s store.Store = st
	if next {
		s = nextDueStore{st}
	}
	e, err := Open(context.Background(), Config{Store: s, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()) })
	return st, e
}

// bothDueLeasers runs f over a store.DueLeaser and over a
// store.NextDueLeaser, whose leases the timer relies on to learn when
// to fire next.
func bothDueLeasers(t *testing.T, f func(t *testing.T, next bool)) {
	for _, next := range []bool{false, true} {
		t.Run(map[bool]string{false: "DueLeaser", true: "NextDueLeaser"}[next], func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { f(t, next) })
		})
	}
}

// TestNextDueHandOff: on a store.NextDueLeaser the timer that wakes a
// long-poll leaves the release to its lease, which says when to fire
// next: 200 messages due a millisecond apart, each leased by a consumer
// at its due time, cost a grace promotion per leaseGrace or so, not one
// per message (a timer that asked the store at every fire made 200).
func TestNextDueHandOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, e := openDueEngine(t, true)
		const n = 200
		due := map[string]time.Time{}
		start := time.Now()
		for i := range n {
			id := fmt.Sprintf("m%03d", i)
			d := time.Second + time.Duration(i)*time.Millisecond
			due[id] = start.Add(d)
			if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: d}}); err != nil {
				t.Fatal(err)
			}
		}
		for got := 0; got < n; {
			ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 1, Wait: 10 * time.Second})
			if err != nil || len(ms) != 1 {
				t.Fatalf("lease %d: %v %v", got, ms, err)
			}
			if at, want := time.Now(), due[ms[0].ID]; !at.Equal(want) {
				t.Errorf("%s leased %v after its due time", ms[0].ID, at.Sub(want))
			}
			if err := e.Ack(ctx, "t", ms[0].ID, ms[0].Receipt); err != nil {
				t.Fatal(err)
			}
			got++
		}
		if p := st.promotes.Load(); p != 0 {
			t.Errorf("%d plain promotions with a consumer waiting at every due time", p)
		}
		// The messages came due over n ms: a grace promotion every
		// leaseGrace, and one or two at the ends.
		if g, most := st.graces.Load(), int64(n/leaseGrace+3); g > most {
			t.Errorf("%d grace promotions for %d messages due over %d ms, want at most %d", g, n, n, most)
		}
	})
}

// TestDueHandOff: on a store.DueLeaser, a message coming due while a
// long-poll waits is handed to it (its lease takes the message, no
// promotion of it first), on time; with nobody waiting it is promoted
// when due (on a NextDueLeaser it is left to the next lease, and promoted
// once leaseGrace is over if no lease came); with a waiter that does not
// lease it (paused topic) it is promoted once leaseGrace is over; RunDue
// promotes everything due.
func TestDueHandOff(t *testing.T) {
	bothDueLeasers(t, func(t *testing.T, next bool) {
		ctx := context.Background()
		st, e := openDueEngine(t, next)
		send := func(id string) {
			t.Helper()
			if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: time.Second}}); err != nil {
				t.Fatal(err)
			}
		}
		state := func(id string) store.State {
			t.Helper()
			r, err := st.Store.MessageGet(ctx, "t", id)
			if err != nil {
				t.Fatal(err)
			}
			return r.State
		}

		// A waiter: handed off.
		got := make(chan []*domain.Message, 1)
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
			got <- ms
		}()
		synctest.Wait()
		send("m1")
		start := time.Now()
		ms := <-got
		if len(ms) != 1 || ms[0].ID != "m1" {
			t.Fatalf("leased %v, want m1", ms)
		}
		if d := time.Since(start); d != time.Second {
			t.Errorf("m1 leased %v after its send, want 1s (due then)", d)
		}
		// On a NextDueLeaser the grace promotion comes a grace later; on a
		// DueLeaser it is the fire's job, which may run after the lease.
		synctest.Wait()
		if n, g := st.promotes.Load(), st.graces.Load(); n != 0 || !next && g == 0 {
			t.Errorf("hand-off: %d promotions, %d with grace; want 0 and some", n, g)
		}

		// Nobody waiting. On a DueLeaser: promoted when due. On a
		// NextDueLeaser: left to the next lease, which takes it straight
		// from scheduled, and promoted only once its grace is over.
		if next {
			time.Sleep(leaseGrace * time.Millisecond) // m1's grace promotion
			synctest.Wait()
			p0, g0 := st.promotes.Load(), st.graces.Load()
			send("m2a")
			time.Sleep(time.Second + leaseGrace*time.Millisecond/2)
			synctest.Wait()
			if s := state("m2a"); s != store.StateScheduled {
				t.Errorf("m2a due with nobody waiting, within its grace: %v, want scheduled (left to the next lease)", s)
			}
			if ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10}); err != nil || len(ms) != 1 || ms[0].ID != "m2a" {
				t.Fatalf("lease of m2a: %v %v", ms, err)
			}
			// At most the one grace promotion its deadline asks for, after
			// the lease (it finds nothing left).
			time.Sleep(leaseGrace * time.Millisecond)
			synctest.Wait()
			if p, g := st.promotes.Load()-p0, st.graces.Load()-g0; p != 0 || g > 1 {
				t.Errorf("m2a leased within its grace, then %d promotions, %d with grace; want none and at most one", p, g)
			}
		}
		g0 := st.graces.Load()
		send("m2")
		time.Sleep(1100 * time.Millisecond)
		synctest.Wait()
		if s := state("m2"); s != store.StateReady {
			t.Errorf("m2 due with nobody waiting, past its grace: %v, want ready", s)
		}
		if n := st.promotes.Load(); !next && n == 0 {
			t.Error("m2 due with nobody waiting: no promotion")
		}
		if g := st.graces.Load() - g0; next && g == 0 {
			t.Error("m2 due with nobody waiting and left unleased: no grace promotion")
		}
		if ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10}); err != nil || len(ms) != 1 || ms[0].ID != "m2" {
			t.Fatalf("lease of m2: %v %v", ms, err)
		}

		// A waiter on a paused topic never leases: promoted after the grace.
		if _, err := e.PauseTopic(ctx, "t", true); err != nil {
			t.Fatal(err)
		}
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
			got <- ms
		}()
		synctest.Wait()
		send("m3")
		time.Sleep(time.Second + leaseGrace*time.Millisecond/2)
		synctest.Wait()
		if s := state("m3"); s != store.StateScheduled {
			t.Errorf("m3 within its grace: %v, want scheduled (left to the waiter)", s)
		}
		time.Sleep(leaseGrace * time.Millisecond)
		synctest.Wait()
		if s := state("m3"); s != store.StateReady {
			t.Errorf("m3 past its grace: %v, want ready (promotes %d, graces %d, leases %d)", s, st.promotes.Load(), st.graces.Load(), st.leaseDues.Load())
		}
		if ms := <-got; len(ms) != 0 {
			t.Errorf("paused topic leased %v", ms)
		}

		// RunDue promotes everything due, waiter or not.
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
			got <- ms
		}()
		synctest.Wait()
		send("m4")
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		if err := e.RunDue(ctx); err != nil {
			t.Fatal(err)
		}
		if s := state("m4"); s != store.StateReady {
			t.Errorf("m4 after RunDue: %v, want ready", s)
		}
		<-got
	})
}

// TestDueHandOffBusy: a grace promotion the store answers Busy (a lease
// holds the topic) is retried, so the topic's timer is re-armed for the
// next message; a topic busy at every try is still promoted, by a plain
// promotion after maxBusySkips tries. An engine that took Busy for
// "nothing due" would never fire for m2 or promote m3.
func TestDueHandOffBusy(t *testing.T) {
	bothDueLeasers(t, func(t *testing.T, next bool) {
		ctx := context.Background()
		st, e := openDueEngine(t, next)
		send := func(id string, d time.Duration) {
			t.Helper()
			if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: d}}); err != nil {
				t.Fatal(err)
			}
		}
		got := make(chan []*domain.Message, 1)
		wait := func() {
			go func() {
				ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
				got <- ms
			}()
			synctest.Wait()
		}

		// m1's fire finds the topic busy once; m2, sent after it and due
		// later, is armed only by the retry's answer.
		st.busy.Store(1)
		wait()
		start := time.Now()
		send("m1", time.Second)
		send("m2", 2*time.Second)
		if ms := <-got; len(ms) != 1 || ms[0].ID != "m1" {
			t.Fatalf("leased %v, want m1", ms)
		}
		// The timer's fire woke the long-poll itself; the promotion job it
		// queued may not have run yet when the lease answers.
		synctest.Wait()
		// (On a NextDueLeaser, m1's lease armed m2, and the grace
		// promotion waits a grace: the Busy answer comes later.)
		if b := st.busy.Load(); b != 0 && !next {
			t.Fatalf("%d busy answers left: the grace promotion was not called", b)
		}
		wait()
		ms := <-got
		if len(ms) != 1 || ms[0].ID != "m2" {
			t.Fatalf("leased %v, want m2 (graces %d)", ms, st.graces.Load())
		}
		if d := time.Since(start); d != 2*time.Second {
			t.Errorf("m2 leased %v after its send, want 2s (due then)", d)
		}

		// Busy at every try, with a waiter that never leases (paused):
		// promoted anyway.
		st.busy.Store(-1)
		if _, err := e.PauseTopic(ctx, "t", true); err != nil {
			t.Fatal(err)
		}
		wait()
		promotes := st.promotes.Load()
		send("m3", time.Second)
		time.Sleep(time.Second + time.Duration(maxBusySkips+2*leaseGrace)*time.Millisecond)
		synctest.Wait()
		if r, err := st.Store.MessageGet(ctx, "t", "m3"); err != nil || r.State != store.StateReady {
			t.Errorf("m3 on a topic always busy: %v %v, want ready (promotes %d)", r, err, st.promotes.Load()-promotes)
		}
		if st.promotes.Load() == promotes {
			t.Error("no plain promotion after the busy answers")
		}
		<-got
	})
}

// TestDueHandOffCutShort: a grace promotion that Max cuts short (more
// overdue than promoteBatch) while a later message is scheduled answers
// HeldDue (what is still due) and NextDue (the later one, an hour away):
// the engine calls again at once rather than sleeping until NextDue with
// the rest of the backlog left scheduled.
func TestDueHandOffCutShort(t *testing.T) {
	bothDueLeasers(t, func(t *testing.T, next bool) {
		ctx := context.Background()
		st, e := openDueEngine(t, next)
		if _, err := e.PauseTopic(ctx, "t", true); err != nil { // the waiter never leases
			t.Fatal(err)
		}
		got := make(chan []*domain.Message, 1)
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
			got <- ms
		}()
		synctest.Wait()
		n := 2*promoteBatch + promoteBatch/2
		batch := make([]domain.SendRequest, 0, 100)
		for i := range n {
			batch = append(batch, domain.SendRequest{ID: fmt.Sprintf("m%d", i), Payload: []byte("x"), When: domain.When{Delay: time.Second}})
			if len(batch) == cap(batch) {
				if _, err := e.SendBatch(ctx, "t", batch); err != nil {
					t.Fatal(err)
				}
				batch = batch[:0]
			}
		}
		if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "later", Payload: []byte("x"), When: domain.When{Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		st.later.Store(time.Now().Add(time.Hour).UnixMilli())
		time.Sleep(time.Second + 3*leaseGrace*time.Millisecond)
		synctest.Wait()
		scheduled := 0
		for i := range n {
			r, err := st.Store.MessageGet(ctx, "t", fmt.Sprintf("m%d", i))
			if err != nil {
				t.Fatal(err)
			}
			if r.State == store.StateScheduled {
				scheduled++
			}
		}
		if scheduled != 0 {
			t.Errorf("%d of %d overdue messages still scheduled %v after their grace (graces %d)", scheduled, n, 3*leaseGrace*time.Millisecond, st.graces.Load())
		}
		if ms := <-got; len(ms) != 0 {
			t.Errorf("paused topic leased %v", ms)
		}
	})
}

// TestTimerWakesOneLongPoll: the timer's fire hands a due message to one
// waiting long-poll itself (not after a worker picks the promotion up),
// and the promotion job that follows does not wake a second one for the
// same message: with six long-polls waiting, one due message costs one
// due lease.
func TestTimerWakesOneLongPoll(t *testing.T) {
	bothDueLeasers(t, func(t *testing.T, next bool) {
		ctx := context.Background()
		st, e := openDueEngine(t, next)
		const consumers = 6
		got := longPolls(e, consumers)
		synctest.Wait() // every long-poll looked once and waits
		if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "m1", Payload: []byte("x"), When: domain.When{Delay: time.Second}}); err != nil {
			t.Fatal(err)
		}
		before := st.leaseDues.Load()
		// Just after it came due, before leaseGrace: later the grace's
		// timer wakes another long-poll to look for what was left.
		time.Sleep(time.Second + leaseGrace*time.Millisecond/2)
		synctest.Wait()
		if ms := <-got; len(ms) != 1 || ms[0].ID != "m1" {
			t.Fatalf("leased %v, want m1", ms)
		}
		if n := st.leaseDues.Load() - before; n != 1 {
			t.Errorf("one message due, %d long-polls waiting: %d due leases, want 1", consumers, n)
		}
		time.Sleep(10 * time.Second)
		for range consumers - 1 {
			if ms := <-got; len(ms) != 0 {
				t.Errorf("another long-poll leased %v", ms)
			}
		}
	})
}

// TestReleaseWhileWorkersBusy: the promotion workers are all held by slow
// store calls for other topics; messages coming due a millisecond apart
// on a topic with long-polls waiting are still each leased at their due
// time: the timer's fire itself wakes a long-poll, also when the fire is
// coalesced into a promotion job still queued for a worker. On a
// store.NextDueLeaser only: on a plain DueLeaser the timer learns the
// next due time from the promotion job, so there the second message
// does wait for a worker.
func TestReleaseWhileWorkersBusy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st, e := openDueEngine(t, true)
		release := make(chan struct{})
		defer close(release)
		st.hold = func(topic string) {
			if strings.HasPrefix(topic, "slow") {
				<-release
			}
		}
		for i := range workers {
			if _, err := e.Send(ctx, fmt.Sprintf("slow%d", i), domain.SendRequest{Payload: []byte("x"), When: domain.When{Delay: 500 * time.Millisecond}}); err != nil {
				t.Fatal(err)
			}
		}
		got := longPolls(e, 2)
		synctest.Wait()
		start := time.Now()
		for i, id := range []string{"m1", "m2"} {
			at := start.Add(time.Second + time.Duration(i)*time.Millisecond)
			if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{DeliverAt: at}}); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second + 10*time.Millisecond)
		synctest.Wait()
		seen := map[string]bool{}
		for range 2 {
			select {
			case ms := <-got:
				for _, m := range ms {
					seen[m.ID] = true
				}
			default:
				t.Fatalf("10 ms after both came due, leased only %v: a release waited for a promotion worker", seen)
			}
		}
		if !seen["m1"] || !seen["m2"] {
			t.Fatalf("leased %v, want m1 and m2", seen)
		}
	})
}
