package pebblestore

import (
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/delayq/delayq/internal/store"
)

// BenchmarkLeaseDueSmall: due leases of k messages each, as a server
// under single sends makes them (each send its own batch, a lease per
// release or two), then a batch ack of what was leased; one op = one
// lease. reads=iterators reads every record and body through the
// orderedReader's iterators, reads=store as the store does (DB.Get for
// fewer than orderedFrom messages).
func BenchmarkLeaseDueSmall(b *testing.B) {
	for _, k := range []int{1, 2, 4, 100} {
		for _, mode := range []struct {
			name string
			from int
		}{{"iterators", 1}, {"store", orderedFrom}} {
			b.Run(fmt.Sprintf("k=%d/reads=%s", k, mode.name), func(b *testing.B) {
				defer func(v int) { orderedFrom = v }(orderedFrom)
				orderedFrom = mode.from
				s := openDisk(b, true)
				pay := make([]byte, 1024)
				const lead = 2000
				i := 0
				send := func() {
					im := m(fmt.Sprintf("%020d", i), int64(100_000+lead+i))
					im.Payload = pay
					insert(b, s, "q", int64(100_000+i), im)
					i++
				}
				for range lead {
					send()
				}
				b.ResetTimer()
				for b.Loop() {
					b.StopTimer()
					for range k {
						send()
					}
					b.StartTimer()
					p := &store.MessageLeaseParams{Topic: "q", Now: int64(100_000 + i - 1), Max: 100, LeaseFor: 60_000, Token: "tok"}
					recs, err := s.MessageLeaseDue(ctx, p)
					if err != nil || len(recs) != k {
						b.Fatal(len(recs), err)
					}
					b.StopTimer()
					items := make([]store.AckItem, len(recs))
					for j, r := range recs {
						items[j] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
					}
					if _, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "q", Items: items, Now: p.Now}); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
			})
		}
	}
}

// A call that reads one message reads it by DB.Get, not through
// iterators; two or more go through the ordered reader.
func TestReadInOrderOnlyForSeveral(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	x := s.newTxn()
	done := x.readInOrder(1)
	if x.reads != nil {
		t.Fatal("readInOrder(1) set up iterators")
	}
	done()
	done = x.readInOrder(2)
	if x.reads == nil {
		t.Fatal("readInOrder(2) did not set up the ordered reader")
	}
	done()
	if x.reads != nil {
		t.Fatal("done left the reader")
	}
}
