package mysqlstore_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

const insNow = int64(1_700_000_000_000)

func insert(t *testing.T, s store.Store, topic string, ids ...string) []store.InsertResult {
	t.Helper()
	p := &store.MessageInsertManyParams{Topic: topic, Now: insNow}
	for _, id := range ids {
		p.Messages = append(p.Messages, store.InsertMessage{ID: id, Payload: []byte("p-" + id), DueAt: insNow, MaxAttempts: 5})
	}
	res, err := s.MessageInsertMany(ctx, p)
	if err != nil {
		t.Fatalf("insert %v: %v", ids, err)
	}
	return res
}

// A send of one of the batch's ids that commits between the batch's lookup
// and its multi-row insert fails that insert on the duplicate key: the
// batch's new messages are then sent one at a time, the id as a
// duplicate, the others in batch order, with every other kind of
// duplicate (live, acked, repeated in the batch) answered as before.
func TestInsertManyConflictFallback(t *testing.T) {
	s := open(t, mysqlstore.TimeCaller)
	const topic = "t"
	insert(t, s, "t", "live")
	insert(t, s, "t", "acked")
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 10, LeaseFor: 60_000, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range leased {
		if r.ID == "acked" {
			if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: insNow}); err != nil {
				t.Fatal(err)
			}
		}
	}
	var raced atomic.Bool
	var racer store.InsertResult
	mysqlstore.SetAfterLookup(s, func() {
		if raced.Swap(true) {
			return // the racer's own insert
		}
		racer = insert(t, s, topic, "b")[0]
	})
	got := insert(t, s, topic, "a", "b", "live", "acked", "b", "d")
	mysqlstore.SetAfterLookup(s, nil)
	if !raced.Load() || racer.Duplicate || racer.Record == nil {
		t.Fatalf("the concurrent send did not run or was not new: %+v", racer)
	}
	want := []struct {
		dup   bool
		state store.State
	}{{false, store.StateReady}, {true, store.StateReady}, {true, store.StateInflight}, {true, store.StateAcked}, {true, store.StateReady}, {false, store.StateReady}}
	for i, w := range want {
		if got[i].Record == nil || got[i].Duplicate != w.dup || got[i].Record.State != w.state {
			t.Fatalf("result %d: %+v (record %+v), want duplicate %v in %s", i, got[i], got[i].Record, w.dup, w.state)
		}
	}
	if got[1].Record.Seq != racer.Record.Seq || got[4].Record.Seq != racer.Record.Seq {
		t.Errorf("b's duplicates have seq %d and %d, the racer's is %d", got[1].Record.Seq, got[4].Record.Seq, racer.Record.Seq)
	}
	if !(racer.Record.Seq < got[0].Record.Seq && got[0].Record.Seq < got[5].Record.Seq) {
		t.Errorf("seqs racer %d, a %d, d %d: want a and d after the racer, in batch order", racer.Record.Seq, got[0].Record.Seq, got[5].Record.Seq)
	}
	for _, id := range []string{"a", "b", "d"} {
		r, err := s.MessageGet(ctx, topic, id)
		if err != nil || string(r.Payload) != "p-"+id || r.State != store.StateReady {
			t.Errorf("get %s: %+v %v", id, r, err)
		}
	}
	tr, err := s.TopicGet(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if c := tr.Counts; c.Ready != 3 || c.Inflight != 1 || c.Acked != 1 || c.Scheduled != 0 {
		t.Errorf("counts %+v, want 3 ready (a, b, d), 1 inflight (live), 1 acked", c)
	}
	leased, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 10, LeaseFor: 60_000, Token: "tok2"})
	if err != nil || len(leased) != 3 {
		t.Fatalf("lease: %d records, %v; want a, b, d", len(leased), err)
	}
}

// Concurrent batches sharing ids (in random orders, some repeated within
// a batch): every id is sent once, every other send of it is a duplicate
// of that message, each batch's new messages have increasing seqs, and
// the counts and queues hold each message once.
func TestInsertManyConcurrentSharedIDs(t *testing.T) {
	for _, readBack := range []bool{false, true} {
		t.Run(fmt.Sprintf("readBack=%v", readBack), func(t *testing.T) {
			s := open(t, mysqlstore.TimeCaller)
			if rc, consecutive := mysqlstore.SessionSettings(s); !rc || !consecutive {
				t.Fatalf("the test server's sessions: READ COMMITTED %v, consecutive AUTO_INCREMENT %v; want both", rc, consecutive)
			}
			if readBack {
				mysqlstore.SetReadBackSeq(s)
			}
			insertManyConcurrentSharedIDs(t, s)
		})
	}
}

func insertManyConcurrentSharedIDs(t *testing.T, s *mysqlstore.Store) {
	const topic, workers, rounds, pool, batch = "t", 4, 8, 60, 40
	type sent struct {
		id  string
		res store.InsertResult
	}
	var mu sync.Mutex
	var all []sent
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for r := range rounds {
				ids := make([]string, batch)
				for i := range ids {
					ids[i] = fmt.Sprintf("r%d-%d", r, rng.IntN(pool))
				}
				p := &store.MessageInsertManyParams{Topic: topic, Now: insNow}
				for _, id := range ids {
					p.Messages = append(p.Messages, store.InsertMessage{ID: id, Payload: []byte(id), DueAt: insNow + int64(rng.IntN(2))*1000, MaxAttempts: 5})
				}
				res, err := s.MessageInsertMany(ctx, p)
				if err != nil {
					t.Errorf("insert: %v", err)
					return
				}
				var last uint64
				for i, x := range res {
					if x.Record == nil || x.Record.ID != ids[i] {
						t.Errorf("result %d: %+v for id %s", i, x.Record, ids[i])
						return
					}
					if !x.Duplicate {
						if x.Record.Seq <= last {
							t.Errorf("batch's new messages out of order: seq %d after %d", x.Record.Seq, last)
						}
						last = x.Record.Seq
					}
				}
				mu.Lock()
				for i, x := range res {
					all = append(all, sent{ids[i], x})
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	winner := map[string]uint64{}
	for _, x := range all {
		if !x.res.Duplicate {
			if _, ok := winner[x.id]; ok {
				t.Fatalf("id %s sent twice", x.id)
			}
			winner[x.id] = x.res.Record.Seq
		}
	}
	var scheduled, ready int64
	for _, x := range all {
		seq, ok := winner[x.id]
		if !ok {
			t.Fatalf("id %s never sent, only duplicates", x.id)
		}
		if x.res.Record.Seq != seq {
			t.Fatalf("duplicate of %s has seq %d, the message %d", x.id, x.res.Record.Seq, seq)
		}
		if !x.res.Duplicate {
			if x.res.Record.State == store.StateReady {
				ready++
			} else {
				scheduled++
			}
		}
	}
	if len(winner) < pool {
		t.Fatalf("only %d ids: the batches hardly overlapped", len(winner))
	}
	tr, err := s.TopicGet(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Counts.Ready != ready || tr.Counts.Scheduled != scheduled {
		t.Errorf("counts %+v, want %d ready, %d scheduled", tr.Counts, ready, scheduled)
	}
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: insNow, Max: 10 * pool * rounds, LeaseFor: 60_000, Token: "tok"})
	if err != nil || int64(len(leased)) != ready {
		t.Fatalf("lease: %d records, %v; want %d", len(leased), err, ready)
	}
}
