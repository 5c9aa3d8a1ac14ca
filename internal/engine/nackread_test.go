package engine

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// getCountingStore is a memstore that counts MessageGet calls.
type getCountingStore struct {
	*memstore.Store
	gets atomic.Int32
}

func (s *getCountingStore) MessageGet(ctx context.Context, topic, id string) (*store.Record, error) {
	s.gets.Add(1)
	return s.Store.MessageGet(ctx, topic, id)
}

// TestNackReadsOnlyForBackoff: a nack reads the message first only to
// compute the topic's backoff from its failures; one with its own delay
// or to dead letters is one store call (the store checks the lease), and
// answers a wrong receipt with ErrConflict all the same.
func TestNackReadsOnlyForBackoff(t *testing.T) {
	ctx := context.Background()
	st := &getCountingStore{Store: memstore.New()}
	defer st.Close()
	e, err := Open(ctx, Config{Store: st, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	lease := func() *domain.Message {
		t.Helper()
		ms, err := e.Lease(ctx, "q", domain.LeaseRequest{Max: 1, Lease: time.Minute})
		if err != nil || len(ms) != 1 {
			t.Fatalf("lease: %v %v", ms, err)
		}
		return ms[0]
	}
	if _, err := e.Send(ctx, "q", domain.SendRequest{ID: "a", Payload: []byte("x"), MaxAttempts: 5}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name  string
		req   domain.NackRequest
		gets  int32
		state domain.State
	}{
		{"own delay", domain.NackRequest{HasDelay: true, Delay: 0}, 0, domain.StateReady},
		{"backoff", domain.NackRequest{}, 1, domain.StateScheduled},
	} {
		m := lease()
		if _, err := e.Nack(ctx, "q", m.ID, "stale-"+m.Receipt, c.req); !errors.Is(err, domain.ErrConflict) {
			t.Fatalf("%s: nack with a wrong receipt: %v, want ErrConflict", c.name, err)
		}
		before := st.gets.Load()
		got, err := e.Nack(ctx, "q", m.ID, m.Receipt, c.req)
		if err != nil || got.State != c.state {
			t.Fatalf("%s: nack: %v %v, want %s", c.name, got, err, c.state)
		}
		if n := st.gets.Load() - before; n != c.gets {
			t.Errorf("%s: nack read the message %d times, want %d", c.name, n, c.gets)
		}
		if c.state == domain.StateScheduled {
			if _, err := e.Reschedule(ctx, "q", m.ID, domain.When{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	m := lease()
	before := st.gets.Load()
	if got, err := e.Nack(ctx, "q", m.ID, m.Receipt, domain.NackRequest{Dead: true}); err != nil || got.State != domain.StateDead {
		t.Fatalf("nack to dead letters: %v %v", got, err)
	}
	if n := st.gets.Load() - before; n != 0 {
		t.Errorf("nack to dead letters read the message %d times, want 0", n)
	}
}
