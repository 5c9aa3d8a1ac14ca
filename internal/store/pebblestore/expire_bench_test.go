package pebblestore

import (
	"fmt"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// BenchmarkLeaseExpireSweep: one op = one LeaseExpire over 1,000 topics
// holding 10 leases each, none expired (the sweep the engine runs at the
// earliest lease end when consumers acked in time), and, per sweep, one
// expired lease on one topic that is then leased again. Since format 4
// the sweep visits the topics' own i/ indexes instead of a store-wide one.
func BenchmarkLeaseExpireSweep(b *testing.B) {
	s := openDisk(b, true)
	const topics, leases = 1000, 10
	for i := range topics {
		topic := fmt.Sprint("t", i)
		msgs := make([]store.InsertMessage, leases)
		for j := range msgs {
			msgs[j] = store.InsertMessage{ID: fmt.Sprint("m", j), Payload: payload256, DueAt: 0, MaxAttempts: 1000}
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 0, Messages: msgs}); err != nil {
			b.Fatal(err)
		}
		if ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: 0, Max: leases, LeaseFor: 1 << 40, Token: "t"}); err != nil || len(ls) != leases {
			b.Fatal(len(ls), err)
		}
	}
	// One message on t0 whose lease ends every sweep.
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t0", Now: 0, Messages: []store.InsertMessage{{ID: "short", DueAt: 0, MaxAttempts: 1 << 30}}}); err != nil {
		b.Fatal(err)
	}
	now := int64(1)
	for b.Loop() {
		if ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t0", Now: now, Max: 1, LeaseFor: 1, Token: "t"}); err != nil || len(ls) != 1 {
			b.Fatal(len(ls), err)
		}
		now += 2
		recs, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 1000})
		if err != nil || len(recs) != 1 || recs[0].ID != "short" {
			b.Fatal(recs, err)
		}
	}
}
