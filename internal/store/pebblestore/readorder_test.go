package pebblestore

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestOrderedReaderMatchesGet: readRecord through a txn's ordered reader
// (iterators, as leases and batch acks read) returns what it returns by
// DB.Get, for ids in order, out of order, repeated and missing, over
// records in the memtable and in sstables, split, acked (no body) and in
// other topics around the one read.
func TestOrderedReaderMatchesGet(t *testing.T) {
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 11))
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	var ids []string
	for _, topic := range []string{"p", "q", "q2"} {
		for part := range 2 {
			var msgs []store.InsertMessage
			for range 150 {
				id := fmt.Sprintf("%08x", rng.Uint32())
				if topic == "q" {
					ids = append(ids, id)
				}
				payload := make([]byte, rng.IntN(3000))
				for i := range payload {
					payload[i] = byte(rng.Uint32())
				}
				var h map[string]string
				if rng.IntN(3) == 0 {
					h = map[string]string{"k": id}
				}
				msgs = append(msgs, store.InsertMessage{ID: id, Payload: payload, Headers: h, DueAt: int64(1 + rng.IntN(1000)), MaxAttempts: 3})
			}
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 1, Messages: msgs}); err != nil {
				t.Fatal(err)
			}
			if part == 0 {
				if err := s.db.Flush(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// Some inflight, some of those acked (state record only, no body).
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2000, Max: 80, LeaseFor: 60000, Token: "tok"})
	if err != nil || len(leased) == 0 {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	var items []store.AckItem
	for _, r := range leased[:len(leased)/2] {
		items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
	}
	if _, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "q", Items: items, Now: 2001}); err != nil {
		t.Fatal(err)
	}

	sorted := slices.Sorted(slices.Values(ids))
	shuffled := slices.Clone(ids)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	mixed := slices.Concat(sorted[:100], []string{"", "0", "zzzzzzzz", sorted[50]}, shuffled[:100], sorted[100:])
	for _, order := range [][]string{sorted, shuffled, mixed} {
		for _, withBody := range []bool{true, false} {
			x := s.newTxn()
			done := x.readInOrder(len(order))
			reads := x.reads
			for _, id := range order {
				want, wantErr := s.readRecord(nil, "q", id, withBody)
				got, gotErr := s.readRecord(x, "q", id, withBody)
				if (wantErr == nil) != (gotErr == nil) || !reflect.DeepEqual(got, want) {
					t.Fatalf("id %q, body %v: ordered read %+v, %v; Get %+v, %v", id, withBody, got, gotErr, want, wantErr)
				}
			}
			done()
			if reads.found == 0 {
				t.Fatal("the ordered reader served no read")
			}
			if x.reads != nil || reads.its != [2]*pebble.Iterator{} {
				t.Fatal("done left the reader or an iterator open")
			}
		}
	}
}

// TestKeysAllocateOnce: a message's keys are built in one allocation
// each, not grown append by append.
func TestKeysAllocateOnce(t *testing.T) {
	for name, build := range map[string]func(){
		"message": func() { keySink = messageKey("topic", "01ARZ3NDEKTSV4RRFFQ69G5FAV") },
		"body":    func() { keySink = bodyKey("topic", "01ARZ3NDEKTSV4RRFFQ69G5FAV") },
		"index":   func() { keySink = indexKey(pfxInflight, "topic", 1, 2) },
		"ready":   func() { keySink = readyKey("topic", 0, 1, 2) },
		"prio":    func() { keySink = readyKey("topic", 3, 1, 2) },
	} {
		if n := testing.AllocsPerRun(100, build); n != 1 {
			t.Errorf("%s key: %v allocations, want 1", name, n)
		}
	}
}

var keySink []byte

// TestEntryInMatchesEntryOf: the keys a txn builds in its reused buffer
// are entryOf's, for every state, priority and a dirty buffer.
func TestEntryInMatchesEntryOf(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 5))
	states := []store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead, store.StateAcked, 0}
	buf := []byte("left over from the previous key, longer than most")
	for range 2000 {
		r := &store.Record{
			Topic: fmt.Sprintf("t%d", rng.IntN(1000)), ID: fmt.Sprintf("%x", rng.Uint64()),
			State: states[rng.IntN(len(states))], Seq: rng.Uint64(), Priority: uint8(rng.IntN(3) * rng.IntN(256)),
			DueAt: rng.Int64() - rng.Int64(), LeaseUntil: rng.Int64(), DeadAt: rng.Int64(), AckedAt: rng.Int64(),
		}
		want := entryOf(r)
		var got indexEntry
		got, buf = entryIn(buf, r)
		if got.ix != want.ix || !bytes.Equal(got.key, want.key) || !bytes.Equal(got.global, want.global) ||
			(got.key == nil) != (want.key == nil) || (got.global == nil) != (want.global == nil) {
			t.Fatalf("%+v: entryIn %d %q %q, entryOf %d %q %q", r, got.ix, got.key, got.global, want.ix, want.key, want.global)
		}
	}
}
