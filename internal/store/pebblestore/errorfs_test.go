package pebblestore

import (
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/delayq/delayq/internal/store"
)

// walSyncInjector fails WAL syncs (and, with writes, WAL writes) while on.
type walSyncInjector struct {
	on     atomic.Bool
	writes bool
	hits   atomic.Int64
}

func (w *walSyncInjector) String() string { return "wal-sync-injector" }

func (w *walSyncInjector) MaybeError(op errorfs.Op) error {
	if !w.on.Load() || len(op.Path) < 4 || op.Path[len(op.Path)-4:] != ".log" {
		return nil
	}
	if op.Kind == errorfs.OpFileSync || op.Kind == errorfs.OpFileSyncData ||
		(w.writes && (op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt)) {
		w.hits.Add(1)
		return errorfs.ErrInjected
	}
	return nil
}

// A failed WAL write or fsync: the insert that hit it returns an error
// wrapping store.ErrUnavailable; every later write fails the same way
// (no retry-then-ack) while reads keep working; after a crash and reopen,
// every insert acknowledged before the fault is there and the failed one
// is not reported as inserted (it may or may not be present: it was never
// acknowledged, so either is allowed — we assert only what the contract
// promises).
func TestWALSyncErrorFailsStore(t *testing.T) {
	for _, writes := range []bool{false, true} {
		t.Run(fmt.Sprint("writes=", writes), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			inj := &walSyncInjector{writes: writes}
			s := openMem(t, errorfs.Wrap(mem, inj))
			for i := range 20 {
				insert(t, s, "q", 1, m(fmt.Sprint("ok", i), 0))
			}
			inj.on.Store(true)
			_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1,
				Messages: []store.InsertMessage{m("bad", 0)}})
			if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("insert during fault: err = %v, want ErrUnavailable", err)
			}
			if inj.hits.Load() == 0 {
				t.Fatal("nothing injected")
			}
			inj.on.Store(false) // the disk "recovers": the store must not
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1,
				Messages: []store.InsertMessage{m("after", 0)}}); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("insert after a failed sync: err = %v, want ErrUnavailable", err)
			}
			if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "ok1", Receipt: "x", Now: 2}); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("ack after a failed sync: err = %v, want ErrUnavailable", err)
			}
			if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2, Max: 1, LeaseFor: 7, Token: "t"}); !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("lease after a failed sync: err = %v, want ErrUnavailable", err)
			}
			if r, err := s.MessageGet(ctx, "q", "ok3"); err != nil || r.ID != "ok3" {
				t.Fatalf("read after a failed sync: %v %v", r, err)
			}
			crashed := mem.CrashClone(vfs.CrashCloneCfg{})
			_ = s.Close()
			s2 := openMem(t, crashed)
			defer s2.Close()
			for i := range 20 {
				if _, err := s2.MessageGet(ctx, "q", fmt.Sprint("ok", i)); err != nil {
					t.Fatalf("acknowledged ok%d after recovery: %v", i, err)
				}
			}
			if _, err := s2.MessageGet(ctx, "q", "after"); !errors.Is(err, store.ErrNotFound) {
				t.Fatalf("refused insert present after recovery: %v", err)
			}
			mustVerify(t, s2)
			insert(t, s2, "q", 3, m("new", 0)) // writable again after reopen
		})
	}
}

// Open on a file system that fails: ErrUnavailable, not a panic.
func TestOpenIOError(t *testing.T) {
	fs := errorfs.Wrap(vfs.NewMem(), errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpCreate {
			return errorfs.ErrInjected
		}
		return nil
	}))
	_, err := Open("db", Options{FS: fs, Logger: quietLogger(), BallastSize: -1})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open: err = %v, want ErrUnavailable", err)
	}
}

// Disk full (S5 at unit level): WAL writes fail with ENOSPC until the
// ballast is deleted. The write that hit ENOSPC is retried by
// vfs.OnDiskFull and succeeds; from then on inserts are refused with
// ErrUnavailable+ErrDiskFull while acks and cancels still work, and
// nothing acknowledged is lost.
func TestDiskFull(t *testing.T) {
	var full atomic.Bool
	inj := errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind == errorfs.OpRemove && strings.HasSuffix(op.Path, ballastName) {
			full.Store(false) // the ballast's space is free again
			return nil
		}
		if full.Load() && strings.HasSuffix(op.Path, ".log") &&
			(op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt) {
			return fmt.Errorf("injected: %w", syscall.ENOSPC)
		}
		return nil
	})
	mem := vfs.NewCrashableMem()
	s, err := Open("db", Options{FS: errorfs.Wrap(mem, inj), Logger: quietLogger(), BallastSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	insert(t, s, "q", 1, m("a", 0), m("b", 0), m("c", 0))
	ls, _ := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 3, LeaseFor: 8, Token: "t"})
	full.Store(true)
	// This insert hits ENOSPC; OnDiskFull deletes the ballast and retries.
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: []store.InsertMessage{m("d", 0)}}); err != nil {
		t.Fatalf("insert that hit ENOSPC (retried after the ballast was freed): %v", err)
	}
	_, err = s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: []store.InsertMessage{m("e", 0)}})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, ErrDiskFull) {
		t.Fatalf("insert while full: %v", err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "a", Receipt: ls[0].Receipt, Now: 2}); err != nil {
		t.Fatalf("ack while full: %v", err)
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "q", ID: "b", Now: 2}); err != nil {
		t.Fatalf("cancel while full: %v", err)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{})
	s2 := openMem(t, crashed)
	defer s2.Close()
	for id, want := range map[string]store.State{"a": store.StateAcked, "c": store.StateInflight, "d": store.StateReady} {
		if r, err := s2.MessageGet(ctx, "q", id); err != nil || r.State != want {
			t.Fatalf("%s after crash: %v %v, want %v", id, r, err, want)
		}
	}
	for _, id := range []string{"b", "e"} {
		if _, err := s2.MessageGet(ctx, "q", id); !errors.Is(err, store.ErrNotFound) {
			t.Fatalf("%s after crash: %v", id, err)
		}
	}
}
