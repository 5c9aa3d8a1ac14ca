package engine

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

func topicCount(e *Engine) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.topics)
}

// TestIdleTopicsCostNothing: a client long-polling random topic names
// (any consume-scoped token can) grew per-topic engine state forever.
// Idle topics are now dropped by the safety sweep; topics in use — a
// long-poll waiting, a promotion armed — are kept, and a dropped topic
// works as before when used again.
func TestIdleTopicsCostNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		e, err := Open(ctx, Config{Store: memstore.New(), SafetySweep: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		for i := range 1000 {
			if _, err := e.Lease(ctx, fmt.Sprintf("random-%d", i), domain.LeaseRequest{Max: 1}); err != nil {
				t.Fatal(err)
			}
		}
		if n := topicCount(e); n < 1000 {
			t.Fatalf("%d topics in memory after 1000 lookups; the test checks nothing", n)
		}
		// In use: a scheduled message (armed), and a long-poll.
		if _, err := e.Send(ctx, "armed", domain.SendRequest{Payload: []byte("x"), When: domain.When{Delay: time.Hour}}); err != nil {
			t.Fatal(err)
		}
		polled := make(chan []*domain.Message)
		go func() { // a consumer: long-polls back to back
			for {
				ms, err := e.Lease(ctx, "polled", domain.LeaseRequest{Max: 1, Wait: domain.MaxWait})
				if err != nil || len(ms) > 0 {
					polled <- ms
					return
				}
			}
		}()
		time.Sleep(topicIdleAfter + 2*time.Second) // idle past the limit, a few sweeps
		synctest.Wait()
		if n := topicCount(e); n != 2 {
			t.Fatalf("%d topics in memory after they idled; want 2 (armed, polled)", n)
		}
		// The long-poll still hears its topic: a send wakes it.
		if _, err := e.Send(ctx, "polled", domain.SendRequest{Payload: []byte("y")}); err != nil {
			t.Fatal(err)
		}
		if ms := <-polled; len(ms) != 1 {
			t.Fatalf("long-poll got %v", ms)
		}
		// A dropped topic works again.
		if _, err := e.Send(ctx, "random-7", domain.SendRequest{Payload: []byte("z"), When: domain.When{Delay: time.Second}}); err != nil {
			t.Fatal(err)
		}
		if ms, err := e.Lease(ctx, "random-7", domain.LeaseRequest{Max: 1, Wait: 5 * time.Second}); err != nil || len(ms) != 1 {
			t.Fatalf("lease on a dropped-then-reused topic: %v %v", ms, err)
		}
	})
}

// TestLongPollLooksOnceMoreBeforeAnsweringEmpty: a message made ready
// without a wake-up (written behind the engine's back, as a lost
// notification would leave it) is found by the last attempt when the
// wait ends; before, the long-poll answered empty while it was ready.
func TestLongPollLooksOnceMoreBeforeAnsweringEmpty(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := memstore.New()
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		got := make(chan []*domain.Message)
		go func() {
			ms, _ := e.Lease(ctx, "t", domain.LeaseRequest{Max: 1, Wait: 2 * time.Second})
			got <- ms
		}()
		time.Sleep(time.Second)
		synctest.Wait()
		now := time.Now().UnixMilli()
		if _, err := st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now,
			Messages: []store.InsertMessage{{ID: "silent", Relative: true, MaxAttempts: 1}}}); err != nil {
			t.Fatal(err)
		}
		if ms := <-got; len(ms) != 1 || ms[0].ID != "silent" {
			t.Fatalf("long-poll answered %v while a message was ready", ms)
		}
	})
}

// staleListStore answers TopicList with what the store held before hook
// ran: a sweep's snapshot taken just before a SetTopicSettings.
type staleListStore struct {
	store.Store
	hook func()
}

func (s *staleListStore) TopicList(ctx context.Context) ([]*store.TopicRecord, error) {
	recs, err := s.Store.TopicList(ctx)
	if s.hook != nil {
		s.hook()
	}
	return recs, err
}

// TestSweepKeepsNewerSettings: settings set on this engine after the
// sweep's snapshot of the store are not overwritten by that snapshot
// (they were, for up to one sweep period: 5 s of the old rate limit or
// push target).
func TestSweepKeepsNewerSettings(t *testing.T) {
	ctx := context.Background()
	st := &staleListStore{Store: memstore.New()}
	e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	st.hook = func() {
		st.hook = nil
		if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{MaxAttempts: 7}); err != nil {
			t.Error(err)
		}
	}
	if err := e.recover(ctx); err != nil {
		t.Fatal(err)
	}
	if st.hook != nil {
		t.Fatal("the sweep never listed topics; the test checks nothing")
	}
	set, err := e.settings(ctx, e.topic("t"))
	if err != nil || set.MaxAttempts != 7 {
		t.Fatalf("settings after the sweep: max_attempts %d (%v), want the newer 7", set.MaxAttempts, err)
	}
}
