package engine

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// countingStore counts store leases, and those that found nothing.
type countingStore struct {
	store.Store
	leases, empty atomic.Int64
}

func (s *countingStore) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	recs, err := s.Store.MessageLease(ctx, p)
	s.leases.Add(1)
	if len(recs) == 0 {
		s.empty.Add(1)
	}
	return recs, err
}

// longPolls starts n long-polls of topic "t" (Max 10, Wait 10 s), each
// answering on the channel.
func longPolls(e *Engine, n int) <-chan []*domain.Message {
	got := make(chan []*domain.Message, n)
	for range n {
		go func() {
			ms, _ := e.Lease(context.Background(), "t", domain.LeaseRequest{Max: 10, Wait: 10 * time.Second})
			got <- ms
		}()
	}
	return got
}

// TestOnePromotionWakesOneLongPoll: with 8 consumers long-polling, one
// message coming due made all 8 query the store (each under the store's
// topic lock), 7 of them for nothing. It now wakes one.
func TestOnePromotionWakesOneLongPoll(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &countingStore{Store: memstore.New()}
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		const consumers = 8
		got := longPolls(e, consumers)
		synctest.Wait() // every consumer is waiting
		if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "m1", Payload: []byte("x"), When: domain.When{Delay: time.Second}}); err != nil {
			t.Fatal(err)
		}
		before := st.leases.Load()
		time.Sleep(1500 * time.Millisecond)
		synctest.Wait()
		if ms := <-got; len(ms) != 1 || ms[0].ID != "m1" {
			t.Fatalf("leased %v, want m1", ms)
		}
		if n := st.leases.Load() - before; n != 1 {
			t.Errorf("one message due, %d consumers waiting: %d store leases, want 1", consumers, n)
		}
		time.Sleep(10 * time.Second) // the others' long-polls end empty
		for range consumers - 1 {
			if ms := <-got; len(ms) != 0 {
				t.Errorf("another consumer leased %v", ms)
			}
		}
	})
}

// TestUnusedWakeUpIsPassedOn: a long-poll woken for a message that leaves
// without leasing again (cancelled, timed out, or answering with what its
// attempt already found) hands its wake-up to the next waiter, else the
// message would wait for some other long-poll's timeout.
func TestUnusedWakeUpIsPassedOn(t *testing.T) {
	tp := &topic{name: "t"}
	w1, w2 := tp.waiter(), tp.waiter()
	tp.notifyN(1)
	select {
	case <-w2.c:
		t.Fatal("the newer waiter was woken first")
	default:
	}
	tp.leave(w1) // woken, did not wait for it
	select {
	case <-w2.c:
	default:
		t.Fatal("the wake-up w1 did not use was lost")
	}
	tp.leave(w2) // took it: nothing to pass on
	if n := tp.waiters.Len(); n != 0 {
		t.Fatalf("%d waiters left registered", n)
	}
	w3 := tp.waiter()
	tp.leave(w2) // a second leave is a no-op
	select {
	case <-w3.c:
		t.Fatal("a used wake-up was passed on")
	default:
	}
	tp.notify() // wakes every waiter
	select {
	case <-w3.c:
	default:
		t.Fatal("notify did not wake the waiter")
	}
}

// hookStore runs hook after the first store lease, before it returns.
type hookStore struct {
	store.Store
	done atomic.Bool
	hook func()
}

func (s *hookStore) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	recs, err := s.Store.MessageLease(ctx, p)
	if s.done.CompareAndSwap(false, true) {
		s.hook()
	}
	return recs, err
}

// TestWakeUpDuringAnAttemptIsNotLost: the oldest long-poll is woken for a
// new message while its own store lease, which read the store before that
// message was ready, is still under way; it answers with what it found.
// The wake-up must reach the consumer still waiting, or the new message
// waits for that consumer's long-poll to end.
func TestWakeUpDuringAnAttemptIsNotLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		release := make(chan struct{})
		st := &hookStore{Store: memstore.New(), hook: func() { <-release }}
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		// m0 is ready without a wake-up (as if inserted by another server).
		if _, err := st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: time.Now().UnixMilli(),
			Messages: []store.InsertMessage{{ID: "m0", Relative: true, MaxAttempts: 1}}}); err != nil {
			t.Fatal(err)
		}
		first, second := make(chan []*domain.Message, 1), make(chan []*domain.Message, 1)
		go func() { // registers first; its store lease takes m0, then stalls
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 2, Wait: domain.MaxWait})
			first <- ms
		}()
		synctest.Wait()
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 2, Wait: domain.MaxWait})
			second <- ms
		}()
		synctest.Wait() // the second consumer waits
		if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "m1", Payload: []byte("x")}); err != nil {
			t.Fatal(err) // ready at once: wakes the oldest waiter, the stalled one
		}
		close(release)
		if ms := <-first; len(ms) != 1 || ms[0].ID != "m0" {
			t.Fatalf("first consumer leased %v, want m0", ids(ms))
		}
		start := time.Now()
		ms := <-second
		if len(ms) != 1 || ms[0].ID != "m1" || time.Since(start) > time.Second {
			t.Fatalf("second consumer leased %v after %v, want m1 at once", ids(ms), time.Since(start))
		}
	})
}

func ids(ms []*domain.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.ID)
	}
	return out
}

// TestNoMessageStrandedByTargetedWakeUps sends bursts of messages due at
// once to consumers that lease one at a time and are cancelled at random:
// every message must be leased long before any long-poll's wait could end
// (a lost wake-up would strand a message until then). The clock is
// synctest's: the 5 s bound is virtual time, not a race with the machine.
func TestNoMessageStrandedByTargetedWakeUps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, stop := context.WithCancel(context.Background())
		defer stop()
		st := memstore.New()
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(context.Background())
		const consumers, bursts, perBurst = 6, 20, 7
		var mu sync.Mutex
		seen := map[string]bool{}
		var wg sync.WaitGroup
		for c := range consumers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(c), 1)) // #nosec G404 -- test workload
				for ctx.Err() == nil {
					lctx, cancel := context.WithCancel(ctx)
					if rng.IntN(4) == 0 { // some long-polls are abandoned mid-wait
						time.AfterFunc(time.Duration(rng.IntN(300))*time.Millisecond, cancel)
					}
					ms, err := e.Lease(lctx, "t", domain.LeaseRequest{Max: 1 + rng.IntN(2), Wait: domain.MaxWait, Lease: time.Hour})
					cancel()
					if err != nil && lctx.Err() == nil && ctx.Err() == nil {
						t.Errorf("lease: %v", err)
						return
					}
					mu.Lock()
					for _, m := range ms {
						seen[m.ID] = true
					}
					mu.Unlock()
				}
			}()
		}
		for b := range bursts {
			time.Sleep(time.Duration(100+b*37%200) * time.Millisecond)
			for i := range perBurst {
				id := fmt.Sprintf("b%d-%d", b, i)
				if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: 50 * time.Millisecond}}); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(5 * time.Second) // far less than a long-poll's wait
		synctest.Wait()
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		stop()
		wg.Wait()
		if want := bursts * perBurst; n != want {
			t.Fatalf("%d of %d messages leased within 5 s of the last send; the rest waited for a wake-up that was lost", n, want)
		}
	})
}
