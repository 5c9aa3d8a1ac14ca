package pebblestore

import (
	"bytes"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestTxnBuffersKeptAndReused: txns hand their scratch buffers to the
// store and later txns take them, while four producers and four consumers
// of ids and payloads of many lengths (and so keys that land at different
// places in a reused arena) run at once: every message is leased once
// with its own payload and acked, and what the store keeps holds no
// pointers past its length. -race catches two txns sharing a buffer.
func TestTxnBuffersKeptAndReused(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const producers, perProducer = 4, 300
	payloadOf := func(id string) []byte { return bytes.Repeat([]byte(id), 1+len(id)%7) }
	var producing, wg sync.WaitGroup
	for p := range producers {
		producing.Go(func() {
			for i := 0; i < perProducer; {
				n := min(1+i%37, perProducer-i)
				ms := make([]store.InsertMessage, n)
				for j := range ms {
					id := fmt.Sprintf("p%d-%s%d", p, strings.Repeat("x", (i+j)%50), i+j)
					ms[j] = store.InsertMessage{ID: id, Payload: payloadOf(id), MaxAttempts: 3}
				}
				if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 1, Messages: ms}); err != nil {
					t.Error(err)
					return
				}
				i += n
			}
		})
	}
	produced := make(chan struct{})
	go func() { producing.Wait(); close(produced) }()
	var mu sync.Mutex
	seen := map[string]bool{}
	for c := range 4 {
		wg.Go(func() {
			for {
				// Read before the lease: a lease that finds nothing after
				// every insert has returned means the topic is drained.
				done := isClosed(produced)
				recs, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "t", Now: 10, Max: 1 + c*30, LeaseFor: 1e9, Token: fmt.Sprint("c", c)})
				if err != nil {
					t.Error(err)
					return
				}
				if len(recs) == 0 {
					if done {
						return
					}
					continue
				}
				items := make([]store.AckItem, len(recs))
				mu.Lock()
				for i, r := range recs {
					if !bytes.Equal(r.Payload, payloadOf(r.ID)) {
						t.Errorf("message %s leased with payload %q", r.ID, r.Payload)
					}
					if seen[r.ID] {
						t.Errorf("message %s leased twice", r.ID)
					}
					seen[r.ID] = true
					items[i] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
				}
				mu.Unlock()
				errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: items, Now: 11})
				if err != nil {
					t.Error(err)
					return
				}
				for _, e := range errs {
					if e != nil {
						t.Error(e)
					}
				}
			}
		})
	}
	wg.Wait()
	producing.Wait()
	if len(seen) != producers*perProducer {
		t.Fatalf("%d messages leased, want %d", len(seen), producers*perProducer)
	}
	if len(s.txnBuffers) == 0 {
		t.Fatal("no txn buffers kept")
	}
	for len(s.txnBuffers) > 0 {
		b := <-s.txnBuffers
		if len(b.ops) != 0 || len(b.arena) != 0 {
			t.Fatalf("kept buffers not emptied: %d ops, %d arena bytes", len(b.ops), len(b.arena))
		}
		for _, o := range append(b.ops[:cap(b.ops)], b.sorted[:cap(b.sorted)]...) {
			if o.key != nil || o.value != nil {
				t.Fatal("a kept ops slice still points into an arena")
			}
		}
	}
	mustVerify(t, s)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
