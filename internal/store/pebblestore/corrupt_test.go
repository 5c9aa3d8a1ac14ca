package pebblestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// makeDiskStore writes n messages to a store in a temp dir and closes it.
// With flush, the data is in an sstable; otherwise only in the WAL.
func makeDiskStore(t *testing.T, n int) string {
	t.Helper()
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range n {
		insert(t, s, "q", 1, m(fmt.Sprint("m", i), 0))
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func fileWith(t *testing.T, dir, pattern string) string {
	t.Helper()
	ms, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(ms) == 0 {
		t.Fatalf("no %s in %s", pattern, dir)
	}
	return ms[len(ms)-1]
}

func flip(t *testing.T, path string, at func(size int) int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[at(len(b))] ^= 0x40
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// S6: damage to the MANIFEST makes Open fail with an error wrapping
// store.ErrCorrupt that names the file.
func TestCorruptionDetectedAtOpen(t *testing.T) {
	for _, c := range []struct {
		name, pattern string
		at            func(int) int
	}{
		{"manifest-middle", "MANIFEST-*", func(n int) int { return n / 2 }},
		{"manifest-start", "MANIFEST-*", func(n int) int { return 10 }},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := makeDiskStore(t, 300)
			path := fileWith(t, dir, c.pattern)
			flip(t, path, c.at)
			s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
			if err == nil {
				// Not detected at open: then nothing acknowledged may be
				// missing (that would be silent loss).
				defer s.Close()
				for i := range 300 {
					if _, err := s.MessageGet(ctx, "q", fmt.Sprint("m", i)); err != nil {
						t.Fatalf("opened without error but m%d: %v", i, err)
					}
				}
				t.Fatalf("corruption of %s not detected at open", filepath.Base(path))
			}
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			if !strings.Contains(err.Error(), filepath.Base(path)) {
				t.Errorf("error does not name %s: %v", filepath.Base(path), err)
			}
			t.Logf("detected: %v", err)
		})
	}
}

// A damaged record value (our own CRC32C) is reported as ErrCorrupt naming
// the key when read.
func TestCorruptRecordDetectedOnRead(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	insert(t, s, "q", 1, m("a", 0))
	v, _ := s.get(messageKey("q", "a"))
	v[len(v)/2] ^= 1
	if err := s.db.Set(messageKey("q", "a"), v, nil); err != nil {
		t.Fatal(err)
	}
	_, err := s.MessageGet(ctx, "q", "a")
	if !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `m/q\x00a`) {
		t.Fatalf("err = %v", err)
	}
	if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 1, LeaseFor: 1, Token: "t"}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("lease over a corrupt record: %v", err)
	}
}

// A damaged or missing body (b/) is reported as ErrCorrupt naming its key
// by every read that needs it (MessageGet, a lease, Verify), while an ack,
// which does not read the body, still works and removes it.
func TestCorruptBodyDetectedOnRead(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	insert(t, s, "q", 1, m("a", 0), m("b", 0))
	ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 1, LeaseFor: 1000, Token: "t"})
	if err != nil || len(ls) != 1 || ls[0].ID != "a" {
		t.Fatalf("lease: %v %v", ls, err)
	}
	v, _ := s.get(bodyKey("q", "a"))
	v[len(v)/2] ^= 1
	if err := s.db.Set(bodyKey("q", "a"), v, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.db.Delete(bodyKey("q", "b"), nil); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"a", "b"} {
		if _, err := s.MessageGet(ctx, "q", id); !errors.Is(err, store.ErrCorrupt) || !strings.Contains(err.Error(), `b/q\x00`+id) {
			t.Fatalf("MessageGet %s: err = %v", id, err)
		}
	}
	if err := s.Verify(); err == nil || !strings.Contains(err.Error(), `b/q\x00a`) || !strings.Contains(err.Error(), `missing body "b/q\x00b"`) {
		t.Fatalf("Verify: %v", err)
	}
	if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 1, LeaseFor: 1, Token: "t"}); !errors.Is(err, store.ErrCorrupt) {
		t.Fatalf("lease without a body: %v", err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: "a", Receipt: ls[0].Receipt, Now: 2}); err != nil {
		t.Fatalf("ack of a message with a damaged body: %v", err)
	}
	if _, err := s.get(bodyKey("q", "a")); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("body after the ack: %v", err)
	}
}

// S6, newest WAL. Pebble v2.1.7's replay reads a bit flip inside the MOST
// RECENT WAL like the torn tail of a power loss (open.go replayWAL,
// strictWALTail=false): it stops there and opens with a prefix. The ack
// marker (ackmark.go) turns that into an Open error wrapping
// store.ErrCorrupt that names the data dir and the marker. Removing the
// marker is the documented way to accept the loss: the store then opens
// with a clean prefix (no holes, nothing resurrected) and Verify passes.
func TestCorruptLastWALDetected(t *testing.T) {
	for _, frac := range []int{2, 4} {
		t.Run(fmt.Sprint("at=1/", frac), func(t *testing.T) {
			const n = 300
			dir := makeDiskStore(t, n)
			wal := fileWith(t, dir, "*.log")
			flip(t, wal, func(size int) int { return size / frac })
			_, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
			if !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			for _, want := range []string{dir, ackMarkName, "acknowledged writes are missing"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not mention %q: %v", want, err)
				}
			}
			t.Logf("detected: %v", err)
			// Refused again (Pebble may have flushed the recovered prefix
			// and dropped the WAL: the marker still holds).
			if _, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1}); !errors.Is(err, store.ErrCorrupt) {
				t.Fatalf("second open: err = %v, want ErrCorrupt", err)
			}
			// Accepting the loss: remove the marker.
			if err := os.Remove(filepath.Join(dir, ackMarkName)); err != nil {
				t.Fatal(err)
			}
			s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
			if err != nil {
				t.Fatalf("open without the marker: %v", err)
			}
			defer s.Close()
			present := 0
			for i := range n {
				_, err := s.MessageGet(ctx, "q", fmt.Sprint("m", i))
				switch {
				case err == nil && present == i:
					present++
				case err == nil:
					t.Fatalf("m%d present after a hole at m%d", i, present)
				case !errors.Is(err, store.ErrNotFound):
					t.Fatal(err)
				}
			}
			mustVerify(t, s)
			if present == n {
				t.Fatalf("the flip lost nothing: the test proves nothing")
			}
			t.Logf("after removing the marker: %d of %d acknowledged messages (prefix)", present, n)
		})
	}
}
