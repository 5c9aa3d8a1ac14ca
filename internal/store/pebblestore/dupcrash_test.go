package pebblestore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/delayq/delayq/internal/store"
)

// walSyncHook slows, holds or fails WAL fsyncs. It acts before the
// underlying sync, so a held or slowed sync has not made anything durable
// yet: a CrashClone taken meanwhile drops the waiting batches.
type walSyncHook struct {
	delay atomic.Int64 // nanoseconds slept before each WAL sync
	fail  atomic.Bool  // WAL syncs fail (checked after the gate)

	mu   sync.Mutex
	gate chan struct{} // while non-nil, WAL syncs wait for it to close
	held chan struct{} // gets a value when a sync waits at the gate
}

func (h *walSyncHook) String() string { return "wal-sync-hook" }

func (h *walSyncHook) MaybeError(op errorfs.Op) error {
	if !strings.HasSuffix(op.Path, ".log") {
		return nil
	}
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
	default:
		return nil
	}
	if d := h.delay.Load(); d > 0 {
		time.Sleep(time.Duration(d))
	}
	h.mu.Lock()
	gate, held := h.gate, h.held
	h.mu.Unlock()
	if gate != nil {
		select {
		case held <- struct{}{}:
		default:
		}
		<-gate
	}
	if h.fail.Load() {
		return errorfs.ErrInjected
	}
	return nil
}

// hold makes the next WAL syncs wait until release; the returned channel
// gets a value when one is waiting.
func (h *walSyncHook) hold() <-chan struct{} {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.gate, h.held = make(chan struct{}), make(chan struct{}, 1)
	return h.held
}

func (h *walSyncHook) release() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.gate != nil {
		close(h.gate)
		h.gate = nil
	}
}

type insertAnswer struct {
	res []store.InsertResult
	err error
}

func sendOne(s *Store, id string) insertAnswer {
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1,
		Messages: []store.InsertMessage{m(id, 0)}})
	return insertAnswer{res, err}
}

// A send of an id whose first send is applied but still waiting for its
// WAL fsync (what the client's retry of a timed-out send does) must not be
// answered "duplicate" before that fsync: a power loss in between would
// lose the message the duplicate answer said exists. If the fsync fails,
// the duplicate must fail too.
func TestDuplicateWaitsForOriginalSync(t *testing.T) {
	for _, failSync := range []bool{false, true} {
		t.Run(fmt.Sprint("failSync=", failSync), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			h := &walSyncHook{}
			s := openMem(t, errorfs.Wrap(mem, h))
			defer func() { h.release(); _ = s.Close() }()
			insert(t, s, "q", 1, m("warm", 0)) // topic known, seqs reserved

			held := h.hold()
			orig := make(chan insertAnswer, 1)
			go func() { orig <- sendOne(s, "x") }()
			<-held // "x" is applied; its fsync waits at the gate
			dup := make(chan insertAnswer, 1)
			go func() { dup <- sendOne(s, "x") }()
			select {
			case d := <-dup:
				// Answered while the original's fsync is held: show what a
				// power loss at this moment does.
				crashed := mem.CrashClone(vfs.CrashCloneCfg{})
				h.release()
				<-orig
				s2 := openMem(t, crashed)
				_, gerr := s2.MessageGet(ctx, "q", "x")
				_ = s2.Close()
				t.Fatalf("second send answered (err %v) while the first send's fsync was held; after a power loss then, get x: %v", d.err, gerr)
			case <-time.After(300 * time.Millisecond):
				// Not answered early (with the fix it cannot be: it
				// waits for a WAL sync, and the gate holds them all).
			}
			if failSync {
				h.fail.Store(true)
			}
			h.release()
			o, d := <-orig, <-dup
			if failSync {
				if !errors.Is(o.err, store.ErrUnavailable) {
					t.Fatalf("first send with a failed fsync: %v, want ErrUnavailable", o.err)
				}
				if !errors.Is(d.err, store.ErrUnavailable) {
					t.Fatalf("duplicate of a send whose fsync failed: %+v, want ErrUnavailable", d)
				}
				return
			}
			if o.err != nil || d.err != nil {
				t.Fatalf("sends: %v, %v", o.err, d.err)
			}
			if o.res[0].Duplicate || !d.res[0].Duplicate {
				t.Fatalf("duplicate flags: first %v, second %v; want false, true", o.res[0].Duplicate, d.res[0].Duplicate)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			s2 := openMem(t, crashed)
			defer s2.Close()
			if _, err := s2.MessageGet(ctx, "q", "x"); err != nil {
				t.Fatalf("x after a power loss following both answers: %v", err)
			}
		})
	}
}

// The retry storm: clients send ids while WAL fsyncs are slow; each id is
// sent by two clients at once, and one of them retries before its first
// attempt returned (a timed-out send retried). Power-loss clones taken
// while they run (only synced data kept, or a random part of the rest)
// must hold every id answered ok or duplicate before the clone.
func TestCrashRetryStormDuplicates(t *testing.T) {
	mem := vfs.NewCrashableMem()
	h := &walSyncHook{}
	s := openMem(t, errorfs.Wrap(mem, h))
	h.delay.Store(int64(2 * time.Millisecond))

	var mu sync.Mutex
	answered := map[string]bool{} // id → some answer was "duplicate"
	var next atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 1))
			for {
				select {
				case <-stop:
					return
				default:
				}
				id := fmt.Sprint("id", next.Add(1))
				// The first attempt, its retry and another client's send.
				delays := []time.Duration{0, time.Duration(rng.IntN(1500)) * time.Microsecond,
					time.Duration(rng.IntN(1000)) * time.Microsecond}
				var sends sync.WaitGroup
				for _, d := range delays {
					sends.Add(1)
					go func() {
						defer sends.Done()
						time.Sleep(d)
						a := sendOne(s, id)
						if a.err != nil {
							t.Errorf("send %s: %v", id, a.err)
							return
						}
						mu.Lock()
						answered[id] = answered[id] || a.res[0].Duplicate
						mu.Unlock()
					}()
				}
				sends.Wait()
			}
		}()
	}
	type crash struct {
		fs   *vfs.MemFS
		want map[string]bool
	}
	var crashes []crash
	clones := 6 // DELAYQ_RELIABILITY=full: 60 clones, ~10 s of storm
	if os.Getenv("DELAYQ_RELIABILITY") == "full" {
		clones = 60
	}
	for i := range clones {
		time.Sleep(150 * time.Millisecond)
		mu.Lock()
		pct := 0
		if i%2 == 1 {
			pct = rand.IntN(101)
		}
		c := crash{fs: mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(uint64(i), 2))}),
			want: make(map[string]bool, len(answered))}
		for id, dup := range answered {
			c.want[id] = dup
		}
		mu.Unlock()
		crashes = append(crashes, c)
	}
	close(stop)
	wg.Wait()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	lost, dups := 0, 0
	for i, c := range crashes {
		s2 := openMem(t, c.fs)
		mustVerify(t, s2)
		for id, dup := range c.want {
			if dup {
				dups++
			}
			if _, err := s2.MessageGet(ctx, "q", id); err != nil {
				lost++
				if lost <= 5 {
					t.Errorf("crash %d: %s answered ok (duplicate answer: %v), after reopen: %v", i, id, dup, err)
				}
			}
		}
		_ = s2.Close()
	}
	last := crashes[len(crashes)-1].want
	t.Logf("%d crashes; %d ids answered by the last; %d duplicate-answered ids checked; %d lost", len(crashes), len(last), dups, lost)
	if lost > 0 {
		t.Fatalf("%d ids answered ok or duplicate were lost by a power loss", lost)
	}
	if len(last) == 0 || dups == 0 {
		t.Fatalf("nothing checked: %d ids answered, %d duplicate answers", len(last), dups)
	}
}
