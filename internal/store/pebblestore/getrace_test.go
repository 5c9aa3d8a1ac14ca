package pebblestore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestGetRacesAckAndCancel: MessageGet reads a message without its topic
// lock, the state record and the body one after the other. An ack (which
// deletes the body) or a cancel (which deletes both) applied between the
// two reads must read as what the store holds then, never as a record
// whose body is missing (a false "store corrupt": nack answered 503).
func TestGetRacesAckAndCancel(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const rounds, getters = 3000, 3
	var current atomic.Value // the id the writer works on
	current.Store("")
	var stop atomic.Bool
	var reads, inflight atomic.Int64
	var wg sync.WaitGroup
	for range getters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				id := current.Load().(string)
				if id == "" {
					continue
				}
				r, err := s.MessageGet(ctx, "q", id)
				switch {
				case errors.Is(err, store.ErrNotFound):
				case err != nil:
					t.Errorf("get %s: %v", id, err)
					stop.Store(true)
					return
				default:
					reads.Add(1)
					if r.State == store.StateInflight {
						inflight.Add(1)
						if string(r.Payload) != "body-"+id {
							t.Errorf("get %s: payload %q", id, r.Payload)
						}
					}
				}
			}
		}()
	}
	for i := 0; i < rounds && !stop.Load(); i++ {
		id := fmt.Sprint("m", i)
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1,
			Messages: []store.InsertMessage{{ID: id, Payload: []byte("body-" + id), MaxAttempts: 3}}}); err != nil {
			t.Fatal(err)
		}
		current.Store(id)
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2, Max: 1, LeaseFor: 60000, Token: "t"})
		if err != nil || len(recs) != 1 {
			t.Fatalf("lease: %v, %d records", err, len(recs))
		}
		if i%2 == 0 {
			err = s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: id, Receipt: recs[0].Receipt, Now: 3})
		} else {
			_, err = s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: id, Now: 3})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	stop.Store(true)
	wg.Wait()
	// The race is only exercised if the readers saw messages inflight.
	if inflight.Load() == 0 {
		t.Fatalf("%d reads, none of an inflight message: the race was not exercised", reads.Load())
	}
	t.Logf("%d reads, %d of an inflight message", reads.Load(), inflight.Load())
}
