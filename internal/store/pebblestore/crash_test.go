package pebblestore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// crashModel is what the test knows for sure about each id: the last
// durable operation that returned nil before the crash, and whether a
// later operation that may have taken effect (anything attempted after it,
// durable or not) could have changed existence or state.
type crashModel struct {
	mu  sync.Mutex
	ids map[string]*idState
}

type idState struct {
	durable string // "inserted", "acked", "cancelled"
	// unsure: an operation attempted after the last durable one may have
	// deleted the record (cancel/purge) or changed its state (ack).
	mayDelete, mayAck bool
	receipt           string // of the current lease, if any
}

func (m *crashModel) get(id string) *idState {
	st := m.ids[id]
	if st == nil {
		st = &idState{}
		m.ids[id] = st
	}
	return st
}

// TestCrashRandomized runs random operations on a crashable in-memory FS,
// takes power-loss clones with a random fraction of unsynced data kept
// (pebble's TestWALHardCrashRandomized pattern), reopens them and checks:
// every operation that returned nil before the crash and is durable by
// contract survived; no id that was never inserted exists; Verify (counts
// = recount, indexes = records) passes.
func TestCrashRandomized(t *testing.T) {
	seeds := 4
	if testing.Short() {
		seeds = 2
	}
	for seed := range seeds {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			if lost := crashRun(t, uint64(seed), false); lost != 0 {
				t.Fatalf("%d acknowledged operations lost", lost)
			}
		})
	}
}

// TestCrashNoSyncLoses is the control: the same run with Options.NoSync
// must lose acknowledged inserts, or the crash test proves nothing.
func TestCrashNoSyncLoses(t *testing.T) {
	if lost := crashRun(t, 7, true); lost == 0 {
		t.Fatal("NoSync lost nothing: the crash test cannot detect lost writes")
	} else {
		t.Logf("NoSync lost %d acknowledged operations, as expected", lost)
	}
}

func crashRun(t *testing.T, seed uint64, noSync bool) (lost int) {
	rng := rand.New(rand.NewPCG(seed, 42))
	fs := vfs.NewCrashableMem()
	open := func(fs vfs.FS) *Store {
		s, err := Open("db", Options{FS: fs, Logger: quietLogger(), BallastSize: -1, NoSync: noSync,
			CacheSize: 8 << 20, MemTableSize: 4 << 20})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		return s
	}
	s := open(fs)
	model := &crashModel{ids: map[string]*idState{}}
	nextID := 0
	now := int64(1000)
	for round := range 5 {
		// Concurrent senders and a consumer, then a crash while they run.
		var wg sync.WaitGroup
		stop := make(chan struct{})
		sendNow, st := now, s
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					id := fmt.Sprintf("r%d-g%d-%d", round, g, k)
					model.mu.Lock()
					model.get(id) // attempted
					model.mu.Unlock()
					_, err := st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: fmt.Sprint("t", g%2), Now: sendNow,
						Messages: []store.InsertMessage{{ID: id, Payload: []byte(id), DueAt: sendNow - 1 + int64(k%3), MaxAttempts: 3}}})
					if err == nil {
						model.mu.Lock()
						if st := model.get(id); st.durable == "" {
							st.durable = "inserted"
						}
						model.mu.Unlock()
					}
				}
			}()
		}
		ops := 30 + rng.IntN(50)
		for range ops {
			now++
			crashStep(t, s, rng, model, now, &nextID)
		}
		// Crash: clone while the senders are still running. Only results
		// recorded before the clone count (the model lock orders them).
		model.mu.Lock()
		pct := rng.IntN(101)
		if noSync {
			pct = rng.IntN(30)
		}
		crashed := fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, uint64(round)))})
		snapshot := map[string]idState{}
		for id, st := range model.ids {
			snapshot[id] = *st
		}
		model.mu.Unlock()
		close(stop)
		wg.Wait()
		_ = s.Close()
		fs = crashed
		s = open(fs)
		lost += checkAfterCrash(t, s, snapshot, !noSync)
		// Continue from what survived: reset the model to the recovered
		// truth for ids still present.
		model.ids = map[string]*idState{}
		for id, st := range snapshot {
			r := findRecord(t, s, id)
			switch {
			case r == nil:
				model.ids[id] = &idState{durable: "cancelled"}
			case r.State == store.StateAcked:
				model.ids[id] = &idState{durable: "acked"}
			default:
				model.ids[id] = &idState{durable: "inserted", receipt: r.Receipt}
			}
			_ = st
		}
	}
	_ = s.Close()
	return lost
}

func topicsOf(id string) []string { return []string{"t0", "t1", "c"} }

func findRecord(t *testing.T, s *Store, id string) *store.Record {
	t.Helper()
	for _, tp := range topicsOf(id) {
		r, err := s.MessageGet(ctx, tp, id)
		if err == nil {
			return r
		}
		if !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("get %s: %v", id, err)
		}
	}
	return nil
}

// crashStep does one random single-goroutine operation on topic "c".
func crashStep(t *testing.T, s *Store, rng *rand.Rand, model *crashModel, now int64, nextID *int) {
	model.mu.Lock()
	defer model.mu.Unlock()
	pick := func() (string, *idState) {
		var cands []string
		for id, st := range model.ids {
			if id[0] == 'c' && st.durable == "inserted" {
				cands = append(cands, id)
			}
		}
		if len(cands) == 0 {
			return "", nil
		}
		// Map order is random; make the choice depend on rng only.
		slicesSort(cands)
		id := cands[rng.IntN(len(cands))]
		return id, model.ids[id]
	}
	switch op := rng.IntN(10); {
	case op < 3:
		var ms []store.InsertMessage
		for range 1 + rng.IntN(5) {
			id := fmt.Sprintf("c%d", *nextID)
			*nextID++
			model.get(id)
			ms = append(ms, store.InsertMessage{ID: id, Payload: []byte(id), DueAt: now + int64(rng.IntN(5)) - 2, MaxAttempts: 2})
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "c", Now: now, Messages: ms}); err != nil {
			t.Fatalf("insert: %v", err)
		}
		for _, m := range ms {
			model.get(m.ID).durable = "inserted"
		}
	case op < 5:
		if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "c", Now: now, Max: 10}); err != nil {
			t.Fatal(err)
		}
		ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "c", Now: now, Max: 3, LeaseFor: 5, Token: fmt.Sprint("k", now)})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ls {
			model.get(r.ID).receipt = r.Receipt
		}
	case op < 7:
		id, st := pick()
		if st == nil || st.receipt == "" {
			return
		}
		st.mayAck = true
		err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "c", ID: id, Receipt: st.receipt, Now: now})
		if err == nil {
			*st = idState{durable: "acked"}
		}
	case op < 8:
		id, st := pick()
		if st == nil {
			return
		}
		st.mayDelete = true
		if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "c", ID: id, Now: now}); err == nil {
			*st = idState{durable: "cancelled"}
		}
	case op < 9:
		if _, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 5}); err != nil {
			t.Fatal(err)
		}
		for _, st := range model.ids {
			st.receipt = "" // conservatively forget leases
		}
	default:
		for _, st := range model.ids {
			if st.durable == "acked" {
				st.mayDelete = true
			}
		}
		if _, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Now: now, Window: 3, Max: 5}); err != nil {
			t.Fatal(err)
		}
	}
}

// checkAfterCrash returns how many acknowledged operations were lost;
// with strict, it also fails the test on them.
func checkAfterCrash(t *testing.T, s *Store, snap map[string]idState, strict bool) (lost int) {
	t.Helper()
	errorf := t.Errorf
	if !strict {
		errorf = t.Logf
	}
	if err := s.Verify(); err != nil {
		t.Fatalf("Verify after crash: %v", err)
	}
	var present int64
	for id, st := range snap {
		r := findRecord(t, s, id)
		if r != nil {
			present++
		}
		switch st.durable {
		case "inserted":
			if r == nil && !st.mayDelete {
				errorf("%s: acknowledged insert lost", id)
				lost++
			}
		case "acked":
			if r == nil && !st.mayDelete {
				errorf("%s: acked tombstone lost", id)
				lost++
			} else if r != nil && r.State != store.StateAcked {
				errorf("%s: acked, but recovered as %v", id, r.State)
				lost++
			}
		case "cancelled":
			if r != nil && r.ID[0] == 'c' {
				errorf("%s: cancelled, but recovered as %v", id, r.State)
				lost++
			}
		}
	}
	// Nothing never attempted: the counts over all topics equal the
	// attempted ids found.
	var total int64
	trs, err := s.TopicList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tr := range trs {
		c := tr.Counts
		total += c.Scheduled + c.Ready + c.Inflight + c.Dead + c.Acked
	}
	if total != present {
		t.Errorf("store holds %d messages, %d of them attempted", total, present)
	}
	t.Logf("after crash: %d ids attempted, %d present", len(snap), present)
	return lost
}
