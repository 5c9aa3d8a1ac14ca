package mysqlstore_test

import (
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// An id that no message holds when a send looks it up can be sent by
// another producer, leased and acked before the send inserts it: no row
// was there to lock. The send must still answer the ack's tombstone as a
// duplicate and leave no live message (storetest's ConcurrentLease sent
// such an id again about once in 40 runs before the server read the
// tombstones after its insert). Forced here between the lookup and the
// insert, for an id in a batch and for one sent alone.
func TestInsertAckedBetweenLookupAndInsert(t *testing.T) {
	s := open(t, mysqlstore.TimeCaller)
	for _, batch := range [][]string{{"a", "x", "z"}, {"x"}} {
		topic := "t-" + batch[len(batch)-1]
		var raced atomic.Bool
		mysqlstore.SetAfterLookup(s, func() {
			if raced.Swap(true) {
				return // the other producer's own send
			}
			insert(t, s, topic, "x")
			leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 1, LeaseFor: 60_000, Token: "other"})
			if err != nil || len(leased) != 1 {
				t.Errorf("the other consumer's lease: %v %v", leased, err)
				return
			}
			if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "x", Receipt: leased[0].Receipt, Now: insNow}); err != nil {
				t.Errorf("the other consumer's ack: %v", err)
			}
		})
		got := insert(t, s, topic, batch...)
		mysqlstore.SetAfterLookup(s, nil)
		if !raced.Load() {
			t.Fatal("the hook did not run")
		}
		for i, id := range batch {
			wantDup := id == "x"
			if got[i].Duplicate != wantDup || got[i].Record == nil || (wantDup && got[i].Record.State != store.StateAcked) {
				t.Errorf("%v: result %d (%s): %+v, want duplicate %v (x: of the acked message)", batch, i, id, got[i], wantDup)
			}
		}
		if r, err := s.MessageGet(ctx, topic, "x"); err != nil || r.State != store.StateAcked {
			t.Errorf("%v: x after the race: %+v %v; want the tombstone", batch, r, err)
		}
		leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 10, LeaseFor: 60_000, Token: "tok"})
		fresh := len(batch) - 1 // all but x
		if err != nil || len(leased) != fresh {
			t.Errorf("%v: leased %d messages (%v), want the batch's %d new ones", batch, len(leased), err, fresh)
		}
		tr, err := s.TopicGet(ctx, topic)
		if err != nil || tr.Counts.Inflight != int64(fresh) || tr.Counts.Acked != 1 || tr.Counts.Ready != 0 {
			t.Errorf("%v: counts %+v %v, want %d inflight, 1 acked", batch, tr.Counts, err, fresh)
		}
	}
}
