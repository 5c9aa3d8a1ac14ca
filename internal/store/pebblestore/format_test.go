package pebblestore

import (
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

func setFormat(t *testing.T, s *Store, v byte) {
	t.Helper()
	if err := s.db.Set(keyFormat, []byte{v}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
}

func storedFormat(t *testing.T, s *Store) byte {
	t.Helper()
	v, err := s.get(keyFormat)
	if err != nil || len(v) != 1 {
		t.Fatalf("format key: %q %v", v, err)
	}
	return v[0]
}

func leaseIDs(t *testing.T, s *Store, topic string, now int64, max int) []string {
	t.Helper()
	ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: max, LeaseFor: 1000, Token: "tok"})
	if err != nil {
		t.Fatalf("lease: %v", err)
	}
	ids := make([]string, len(ls))
	for i, r := range ls {
		ids[i] = r.ID
	}
	return ids
}

// A store of format 1 (no priorities: its keys and priority-0 records are
// what this code writes for priority 0, and z/format says 1) opens,
// records format 2, keeps its messages and leases in (DueAt, Seq) order,
// with priorities working from then on.
func TestUpgradeFormat1(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	insert(t, s, "q", 100, m("c", 30), m("a", 10), m("late", 500), m("b", 20), m("d", 40), m("b2", 20))
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 100, Max: 10}); err != nil {
		t.Fatal(err)
	}
	setFormat(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMem(t, fs)
	defer s.Close()
	if got := storedFormat(t, s); got != formatVersion {
		t.Fatalf("format after open: %d, want %d", got, formatVersion)
	}
	mustVerify(t, s)
	tr, err := s.TopicGet(ctx, "q")
	if err != nil || tr.Counts.Ready != 5 || tr.Counts.Scheduled != 1 || tr.OldestReady != 10 {
		t.Fatalf("TopicGet: %+v %v", tr, err)
	}
	for _, id := range []string{"a", "b", "b2", "c", "d", "late"} {
		r, err := s.MessageGet(ctx, "q", id)
		if err != nil || string(r.Payload) != "p-"+id || r.Priority != 0 {
			t.Fatalf("MessageGet %s: %+v %v", id, r, err)
		}
	}
	// New messages, one of priority 3 (after every priority-0 one) and one
	// of priority 0 due before the old ones.
	p3 := m("p3", 5)
	p3.Priority = 3
	insert(t, s, "q", 100, p3, m("new", 5))
	want := []string{"new", "a", "b", "b2", "c", "d", "p3"}
	if got := leaseIDs(t, s, "q", 100, 100); !slices.Equal(got, want) {
		t.Fatalf("lease after upgrade: %v, want %v", got, want)
	}
	mustVerify(t, s)
}

// The v0 fixture of test/upgrade (format 1, written by the engine) opens
// with the current layout: every ready message is leased, in (DueAt, Seq)
// order, and the store verifies.
func TestUpgradeFixtureV0(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "..", "testdata", "stores", "v0", "data")
	if err := os.CopyFS(dir, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil {
			_ = os.Chmod(p, 0o700) // CopyFS keeps the fixture's read-only modes
		}
		return nil
	})
	s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
	if err != nil {
		t.Fatalf("Open v0: %v", err)
	}
	defer s.Close()
	if got := storedFormat(t, s); got != formatVersion {
		t.Fatalf("format after open: %d", got)
	}
	mustVerify(t, s)
	topics, err := s.TopicList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leased := 0
	for _, tr := range topics {
		ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: tr.Name, Now: 1 << 62, Max: 1000, LeaseFor: 1000, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		if int64(len(ls)) != tr.Counts.Ready {
			t.Errorf("topic %s: leased %d, %d ready", tr.Name, len(ls), tr.Counts.Ready)
		}
		for i := 1; i < len(ls); i++ {
			a, b := ls[i-1], ls[i]
			if a.DueAt > b.DueAt || a.DueAt == b.DueAt && a.Seq > b.Seq {
				t.Errorf("topic %s: %s (due %d seq %d) leased before %s (due %d seq %d)", tr.Name, a.ID, a.DueAt, a.Seq, b.ID, b.DueAt, b.Seq)
			}
		}
		leased += len(ls)
	}
	if leased == 0 {
		t.Fatal("the fixture has no ready message to lease: nothing was checked")
	}
	mustVerify(t, s)
}

// The fast path: a topic that only ever had priority 0 opens no p/
// iterator once one lease found p/ empty (its mark stays at the end).
func TestPriorityZeroSkipsPrioIndex(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	insert(t, s, "q", 100, m("a", 10), m("b", 20))
	if got := leaseIDs(t, s, "q", 100, 10); len(got) != 2 {
		t.Fatalf("lease: %v", got)
	}
	insert(t, s, "q", 100, m("c", 10))
	if got := leaseIDs(t, s, "q", 100, 10); len(got) != 1 {
		t.Fatalf("lease: %v", got)
	}
	if tp := s.lookupTopic("q"); !slices.Equal(tp.lw[ixReadyPrio], endPrioSuffix) {
		t.Fatalf("p/ mark %x, want the end", tp.lw[ixReadyPrio])
	}
	p := m("p", 10)
	p.Priority = 9
	insert(t, s, "q", 100, p)
	if tp := s.lookupTopic("q"); slices.Equal(tp.lw[ixReadyPrio], endPrioSuffix) {
		t.Fatal("p/ mark not lowered by a priority-9 insert")
	}
	if got := leaseIDs(t, s, "q", 100, 10); !slices.Equal(got, []string{"p"}) {
		t.Fatalf("lease: %v", got)
	}
}
