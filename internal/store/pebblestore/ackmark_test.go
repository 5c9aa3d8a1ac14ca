package pebblestore

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// waitMarked waits until the marker file holds everything fsync'd so far
// (the writer runs in the background).
func waitMarked(t *testing.T, s *Store) uint64 {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		want := s.ack.durable.Load()
		s.ack.mu.Lock()
		got := s.ack.written
		s.ack.mu.Unlock()
		if got >= want {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("marker stuck at %d, durable %d", got, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// flipMem flips one bit of a file on an in-memory FS.
func flipMem(t *testing.T, fs vfs.FS, path string, at func(size int) int) {
	t.Helper()
	f, err := fs.OpenReadWrite(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	off := int64(at(int(st.Size())))
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0x40
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

func newestWAL(t *testing.T, fs vfs.FS, dir string) string {
	t.Helper()
	wals := listWALs(fs, dir)
	if len(wals) == 0 {
		t.Fatal("no WAL")
	}
	return wals[len(wals)-1]
}

// The kill -9 case: no Close, so only the background writer's value is on
// disk. A crash clone with a bit flip in the newest WAL must be refused;
// the same clone without the flip must open with everything acknowledged
// (no false positive).
func TestAckMarkAfterCrash(t *testing.T) {
	for _, flipIt := range []bool{false, true} {
		t.Run(fmt.Sprint("flip=", flipIt), func(t *testing.T) {
			mem := vfs.NewCrashableMem()
			s := openMem(t, mem)
			const n = 200
			for i := range n {
				insert(t, s, "q", 1, m(fmt.Sprint("m", i), 0))
			}
			// kill -9: the page cache survives, so the clone keeps all
			// unsynced data, including the marker's fast slot.
			marked := waitMarked(t, s)
			crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, 1))})
			_ = s.Close()
			if flipIt {
				flipMem(t, crashed, newestWAL(t, crashed, "db"), func(size int) int { return size / 3 })
			}
			s2, err := Open("db", Options{FS: crashed, Logger: quietLogger(), BallastSize: -1})
			if flipIt {
				if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), "acknowledged writes are missing") {
					t.Fatalf("err = %v, want ErrCorrupt (marker %d)", err, marked)
				}
				t.Logf("detected: %v", err)
				return
			}
			if err != nil {
				t.Fatalf("open after a clean crash: %v", err)
			}
			defer s2.Close()
			for i := range n {
				if _, err := s2.MessageGet(ctx, "q", fmt.Sprint("m", i)); err != nil {
					t.Fatalf("m%d: %v", i, err)
				}
			}
		})
	}
}

// Power loss: unsynced data dropped; the marker's synced slots trail by at
// most ackMarkSyncEvery. After a sync tick, a flip is detected; without
// one (sync far away), the clone still opens (no false positive).
func TestAckMarkPowerLoss(t *testing.T) {
	defer func(d time.Duration) { ackMarkSyncEvery = d }(ackMarkSyncEvery)
	ackMarkSyncEvery = 20 * time.Millisecond
	mem := vfs.NewCrashableMem()
	s := openMem(t, mem)
	const n = 200
	for i := range n {
		insert(t, s, "q", 1, m(fmt.Sprint("m", i), 0))
	}
	want := s.ack.durable.Load()
	deadline := time.Now().Add(5 * time.Second)
	for {
		s.ack.mu.Lock()
		synced := s.ack.synced
		s.ack.mu.Unlock()
		if synced >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("synced slot stuck at %d, want %d", synced, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	crashed := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
	_ = s.Close()
	flipMem(t, crashed, newestWAL(t, crashed, "db"), func(size int) int { return size / 3 })
	if _, err := Open("db", Options{FS: crashed, Logger: quietLogger(), BallastSize: -1}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("err = %v, want ErrCorrupt", err)
	}
}

// Damage to the marker itself (S6, our metadata): one bad slot falls back
// to the other; no valid slot (flipped in both, truncated, zeroed) is
// ErrCorrupt naming the file; a missing marker (older data dir) opens and
// writes a new one.
func TestAckMarkFileDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(b []byte) []byte
		ok     bool
	}{
		{"slot0-bitflip", func(b []byte) []byte { b[10] ^= 1; return b }, true},
		{"slot1-bitflip", func(b []byte) []byte { b[ackMarkSlot+12] ^= 1; return b }, true},
		{"both-bitflip", func(b []byte) []byte { b[10] ^= 1; b[ackMarkSlot+10] ^= 1; return b }, false},
		{"truncated", func(b []byte) []byte { return b[:10] }, false},
		{"empty", func(b []byte) []byte { return nil }, false},
		{"fast-slot-bitflip", func(b []byte) []byte { b[2*ackMarkSlot+10] ^= 1; return b }, true},
		{"zero-4-bytes-both", func(b []byte) []byte {
			copy(b[12:16], make([]byte, 4))
			copy(b[ackMarkSlot+12:], make([]byte, 4))
			return b
		}, false},
		{"removed", nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := makeDiskStore(t, 50)
			path := filepath.Join(dir, ackMarkName)
			if c.damage == nil {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, c.damage(b), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
			if !c.ok {
				if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), path) {
					t.Fatalf("err = %v, want ErrCorrupt naming %s", err, path)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			insert(t, s, "q", 1, m("after", 0))
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if seq, found, err := readAckMark(vfs.Default, dir); err != nil || !found || seq == 0 {
				t.Fatalf("marker after reopen: %d %v %v", seq, found, err)
			}
		})
	}
}

// A torn marker write (random bytes over one slot) never makes Open fail
// or pass wrongly: the other slot holds an earlier synced value.
func TestAckMarkTornSlot(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 20 {
		dir := makeDiskStore(t, 5)
		path := filepath.Join(dir, ackMarkName)
		b, _ := os.ReadFile(path)
		slot := rng.IntN(3) * ackMarkSlot
		for j := range rng.IntN(ackMarkLen) + 1 {
			b[slot+j] = byte(rng.Uint32())
		}
		_ = os.WriteFile(path, b, 0o644)
		s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
		if err != nil {
			t.Fatalf("run %d: %v", i, err)
		}
		_ = s.Close()
	}
}
