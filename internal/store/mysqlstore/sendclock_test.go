package mysqlstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestSendReadsClockInInsert: on the database's clock a send of ids the
// engine generated reads the clock in its insert's query, which computes
// each row's due time and state in SQL; the rows stored must be the
// records answered (due, state, created, seq), for delays and instants,
// past and future, with seqs numbered or read back, and an id that
// clashes (the insert fails on its key) falls back to the careful path
// with a clock of its own.
func TestSendReadsClockInInsert(t *testing.T) {
	for _, readBack := range []bool{false, true} {
		s := open(t, mysqlstore.TimeDB)
		if readBack {
			mysqlstore.SetReadBackSeq(s)
		}
		const now = int64(5_000_000)
		s.SetTestClock(func() int64 { return now })
		send := func(msgs ...store.InsertMessage) []store.InsertResult {
			t.Helper()
			res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "c", Messages: msgs})
			if err != nil {
				t.Fatal(err)
			}
			return res
		}
		check := func(res store.InsertResult, id string, dup bool, due int64, st store.State) {
			t.Helper()
			r := res.Record
			if r == nil || r.ID != id || res.Duplicate != dup || r.DueAt != due || r.State != st {
				t.Errorf("read back %v: %s: %+v (record %+v), want duplicate %v, due %d, %s", readBack, id, res, r, dup, due, st)
				return
			}
			got, err := s.MessageGet(ctx, "c", id)
			if err != nil || got.DueAt != r.DueAt || got.State != r.State || got.CreatedAt != r.CreatedAt || got.Seq != r.Seq {
				t.Errorf("read back %v: %s stored as %+v (%v), answered %+v", readBack, id, got, err, r)
			}
			if !dup && r.CreatedAt != now {
				t.Errorf("read back %v: %s created at %d, want %d", readBack, id, r.CreatedAt, now)
			}
		}
		res := send(store.InsertMessage{ID: "g1", Relative: true, Delay: 100, MaxAttempts: 3})
		check(res[0], "g1", false, now+100, store.StateScheduled)
		res = send(
			store.InsertMessage{ID: "g4", Generated: true, Relative: true, Delay: 200, MaxAttempts: 3},
			store.InsertMessage{ID: "g5", Generated: true, DueAt: now - 1, MaxAttempts: 3},
			store.InsertMessage{ID: "g6", Generated: true, Relative: true, MaxAttempts: 3},
			store.InsertMessage{ID: "g7", Generated: true, DueAt: now + 1, MaxAttempts: 3, Priority: 7},
		)
		check(res[0], "g4", false, now+200, store.StateScheduled)
		check(res[1], "g5", false, now-1, store.StateReady)
		check(res[2], "g6", false, now, store.StateReady)
		check(res[3], "g7", false, now+1, store.StateScheduled)
		if g, err := s.MessageGet(ctx, "c", "g7"); err != nil || g.Priority != 7 || g.MaxAttempts != 3 {
			t.Errorf("g7 stored as %+v (%v), want priority 7, 3 attempts", g, err)
		}
		// g1 exists: the multi-row insert fails on its key.
		res = send(
			store.InsertMessage{ID: "g2", Generated: true, Relative: true, MaxAttempts: 3},
			store.InsertMessage{ID: "g1", Generated: true, Relative: true, Delay: 50, MaxAttempts: 3},
			store.InsertMessage{ID: "g3", Generated: true, DueAt: now - 1000, MaxAttempts: 3},
		)
		check(res[0], "g2", false, now, store.StateReady)
		check(res[1], "g1", true, now+100, store.StateScheduled)
		check(res[2], "g3", false, now-1000, store.StateReady)
		if !(res[0].Record.Seq < res[2].Record.Seq) {
			t.Errorf("read back %v: seqs %d, %d: want batch order", readBack, res[0].Record.Seq, res[2].Record.Seq)
		}
		if t.Failed() {
			return
		}
	}
}
