package engine

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store/memstore"
)

// TestLongPollAfterDryLookWaits: a long-poll arriving right after a look
// that took everything there was, with nothing happening since, waits
// without asking the store; whatever happens next (a send due now, a
// timer for a delayed send) makes the next one look, and a waiting one
// is woken by it as before.
func TestLongPollAfterDryLookWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &countingStore{Store: memstore.New()}
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		send := func(id string, delay time.Duration) {
			t.Helper()
			if _, err := e.Send(ctx, "t", domain.SendRequest{ID: id, Payload: []byte("x"), When: domain.When{Delay: delay}}); err != nil {
				t.Fatal(err)
			}
		}
		lease := func(wait time.Duration) ([]*domain.Message, int64, time.Duration) {
			t.Helper()
			before, start := st.leases.Load(), time.Now()
			ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 10, Wait: wait})
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range ms {
				if err := e.Ack(ctx, "t", m.ID, m.Receipt); err != nil {
					t.Fatal(err)
				}
			}
			return ms, st.leases.Load() - before, time.Since(start)
		}

		send("m1", 0)
		if ms, looks, _ := lease(time.Second); len(ms) != 1 || looks != 1 {
			t.Fatalf("first lease: %d messages in %d looks, want 1 in 1", len(ms), looks)
		}
		// Nothing happened since that look took m1 and left nothing.
		if ms, looks, _ := lease(time.Second); len(ms) != 0 || looks != 1 {
			t.Fatalf("long-poll after a dry look: %d messages in %d looks, want 0 in 1 (the wait's last look only)", len(ms), looks)
		}
		// A send due now is an event: the next long-poll looks at once.
		send("m2", 0)
		if ms, looks, took := lease(time.Second); len(ms) != 1 || looks != 1 || took != 0 {
			t.Fatalf("after a send due now: %d messages in %d looks after %v, want 1 in 1 at once", len(ms), looks, took)
		}
		// A delayed send is not an event until it comes due: the long-poll
		// waits without looking, and the timer wakes it then.
		send("m3", 300*time.Millisecond)
		if ms, looks, took := lease(5 * time.Second); len(ms) != 1 || looks != 1 || took != 300*time.Millisecond {
			t.Fatalf("delayed send: %d messages in %d looks after %v, want 1 in 1 after 300ms", len(ms), looks, took)
		}
		// A dry look is trusted for drainedFresh only.
		time.Sleep(drainedFresh)
		if ms, looks, _ := lease(100 * time.Millisecond); len(ms) != 0 || looks != 2 {
			t.Fatalf("long-poll %v after the last look: %d messages in %d looks, want 0 in 2", drainedFresh, len(ms), looks)
		}
	})
}

// TestFullLeaseLeavesTheNextLook: a look that took as many as it asked
// for may have left more behind, so the next long-poll looks.
func TestFullLeaseLeavesTheNextLook(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		st := &countingStore{Store: memstore.New()}
		e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		defer e.Close(ctx)
		reqs := []domain.SendRequest{{ID: "a", Payload: []byte("x")}, {ID: "b", Payload: []byte("x")}, {ID: "c", Payload: []byte("x")}}
		if _, err := e.SendBatch(ctx, "t", reqs); err != nil {
			t.Fatal(err)
		}
		for _, want := range []int{2, 1} {
			start := time.Now()
			ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 2, Wait: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if len(ms) != want || time.Since(start) != 0 {
				t.Fatalf("leased %d after %v, want %d at once", len(ms), time.Since(start), want)
			}
		}
	})
}
