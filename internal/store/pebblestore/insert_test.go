package pebblestore

import (
	"fmt"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestInsertSameIDConcurrently: inserts look ids up outside the topic
// lock; the claims must still let exactly one of many concurrent inserts
// of an id create it, whatever the order of ids in their batches.
func TestInsertSameIDConcurrently(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const rounds, writers, ids = 20, 8, 50
	for round := range rounds {
		insertSameIDs(t, s, fmt.Sprint("r", round, "-"), writers, ids)
	}
	if got := s.lookupTopic("q").counts.Scheduled; got != rounds*ids {
		t.Errorf("%d scheduled, want %d", got, rounds*ids)
	}
	mustVerify(t, s)
}

func insertSameIDs(t *testing.T, s *Store, prefix string, writers, ids int) {
	created := make([]int, ids)
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := make(chan struct{})
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			ms := make([]store.InsertMessage, ids)
			for i := range ms {
				j := i
				if w%2 == 1 {
					j = ids - 1 - i // the other order: no deadlock
				}
				ms[i] = store.InsertMessage{ID: fmt.Sprint(prefix, j), Payload: []byte(fmt.Sprint(w)), DueAt: 1e12, MaxAttempts: 1}
			}
			res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: ms})
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			for i, r := range res {
				if !r.Duplicate {
					created[i2j(w, i, ids)]++
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	for j, n := range created {
		if n != 1 {
			t.Errorf("id %s%d created %d times", prefix, j, n)
		}
	}
}

func i2j(w, i, n int) int {
	if w%2 == 1 {
		return n - 1 - i
	}
	return i
}

// TestPromoteMovesIndexOnly: promotion leaves the record as stored
// (scheduled) and moves its index entry; every reader sees it ready, with
// UpdatedAt at the promotion, and later writes find the right entry.
func TestPromoteMovesIndexOnly(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	ms := []store.InsertMessage{{ID: "a", DueAt: 10, MaxAttempts: 1}, {ID: "b", DueAt: 10, MaxAttempts: 1}, {ID: "c", DueAt: 10, MaxAttempts: 1}, {ID: "d", DueAt: 10, MaxAttempts: 1}}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: ms}); err != nil {
		t.Fatal(err)
	}
	if res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 20, Max: 10}); err != nil || res.Promoted != 4 {
		t.Fatalf("promote: %+v %v", res, err)
	}
	raw, err := s.getRecord("q", "a")
	if err != nil || raw.State != store.StateScheduled || raw.UpdatedAt != 1 {
		t.Fatalf("stored record %+v %v: want it untouched", raw, err)
	}
	r, err := s.MessageGet(ctx, "q", "a")
	if err != nil || r.State != store.StateReady || r.UpdatedAt != 20 {
		t.Fatalf("get: %+v %v", r, err)
	}
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 21, Messages: ms[:1]})
	if err != nil || !res[0].Duplicate || res[0].Record.State != store.StateReady {
		t.Fatalf("duplicate send: %+v %v", res, err)
	}
	if r, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: "b", Now: 22}); err != nil || r.State != store.StateReady {
		t.Fatalf("cancel: %+v %v", r, err)
	}
	if r, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "q", ID: "c", DueAt: 100, Now: 23}); err != nil || r.State != store.StateScheduled {
		t.Fatalf("reschedule: %+v %v", r, err)
	}
	mustVerify(t, s)
	ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 24, Max: 10, LeaseFor: 976, Token: "t"})
	if err != nil || len(ls) != 2 || ls[0].ID != "a" || ls[1].ID != "d" || ls[0].State != store.StateInflight {
		t.Fatalf("lease: %v %v", ls, err)
	}
	if got := s.lookupTopic("q").counts; got != (store.Counts{Scheduled: 1, Inflight: 2}) {
		t.Fatalf("counts %+v", got)
	}
	mustVerify(t, s)
}

// TestInsertDupGoneMeanwhile: an id found by the lookup outside the lock
// but cancelled before the lock is taken is inserted after all, once even
// when the call names it twice.
func TestInsertDupGoneMeanwhile(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	m := store.InsertMessage{ID: "x", DueAt: 1e12, MaxAttempts: 1}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: []store.InsertMessage{m}}); err != nil {
		t.Fatal(err)
	}
	p := &store.MessageInsertManyParams{Topic: "q", Now: 2, Messages: []store.InsertMessage{m, m}}
	tp := s.topic("q")
	x := s.newTxn()
	res, first, dups, err := s.insertBuild(tp, x, p)
	if err != nil || len(dups) != 2 {
		t.Fatalf("build: dups %v, %v", dups, err)
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: "x", Now: 3}); err != nil {
		t.Fatal(err)
	}
	tp.mu.Lock()
	if err = s.insertDups(tp, x, p, res, first, dups); err == nil {
		err = x.apply(true)
	}
	tp.mu.Unlock()
	if err != nil || x.wait(true) != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || res[1].Record.CreatedAt != 2 {
		t.Fatalf("results %+v %+v: want the first created, the second its duplicate", res[0], res[1])
	}
	if got := tp.counts.Scheduled; got != 1 {
		t.Fatalf("%d scheduled, want 1", got)
	}
	mustVerify(t, s)
}

// TestInsertRepeatedIDRacesCancel: a batch naming one id several times
// looks it up outside the topic lock. If the id is found, then cancelled
// before the batch is applied, the batch must create it once (one record,
// one index entry, counted once), not once per mention.
func TestInsertRepeatedIDRacesCancel(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const rounds, minCreated = 3000, 60
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: "x", Now: 1})
		}
	}()
	// Rounds go on past rounds until the race has been seen often enough:
	// with other test binaries busy on a small machine the canceller may
	// seldom run between a batch's lookup and its apply.
	created, done := 0, 0
	for ; done < rounds || (created < minCreated && done < 10*rounds); done++ {
		ms := []store.InsertMessage{m("x", 1e12), m("x", 1e12), m("x", 1e12)}
		res := insert(t, s, "q", 1, ms...)
		n := 0
		for _, r := range res {
			if !r.Duplicate {
				n++
			}
		}
		if n > 1 {
			t.Fatalf("one batch created x %d times", n)
		}
		created += n
	}
	close(stop)
	wg.Wait()
	t.Logf("x created %d times in %d rounds", created, done)
	if created < minCreated {
		t.Fatalf("x created %d times in %d rounds: the cancels did not race the batches", created, done)
	}
	mustVerify(t, s)
}
