package pebblestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/delayq/delayq/internal/store"
)

// addLeaseIndex writes the l/ entry formats 1 to 3 kept beside each i/
// entry, so that a test can build a directory as those formats left it.
func addLeaseIndex(t *testing.T, s *Store) int {
	t.Helper()
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte("i/"), UpperBound: []byte("i0")})
	if err != nil {
		t.Fatal(err)
	}
	b := s.db.NewBatch()
	n := 0
	for it.First(); it.Valid(); it.Next() {
		k := it.Key()
		topic := string(k[2 : len(k)-17]) // i/ topic \x00 leaseUntil(8) seq(8)
		until, _, _ := parseIndexSuffix(k)
		if err := b.Set(globalKey(pfxLease, until, topic, string(it.Value())), nil, nil); err != nil {
			t.Fatal(err)
		}
		n++
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(pebble.Sync); err != nil {
		t.Fatal(err)
	}
	return n
}

// A format-3 directory, with its store-wide l/ index of leases, opens as
// format 4 with l/ deleted (Verify reports any l/ key left as stale), and
// its leases still expire: in LeaseUntil order across topics when Max
// cuts a sweep short, none before its LeaseUntil, each exactly once.
func TestUpgradeFormat3DropsLeaseIndex(t *testing.T) {
	fs := vfs.NewMem()
	s := openMem(t, fs)
	// Leases ending at 1000+10i on topic a, 1005+10i on b, 2000 on c.
	for i, topic := range []string{"a", "b", "c"} {
		for j := range 5 {
			insert(t, s, topic, 0, m(fmt.Sprint(topic, j), 0))
			leaseFor := int64(1000 + 5*i + 10*j)
			if topic == "c" {
				leaseFor = 2000
			}
			ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: 0, Max: 1, LeaseFor: leaseFor, Token: "tok"})
			if err != nil || len(ls) != 1 {
				t.Fatalf("lease %s%d: %v %v", topic, j, ls, err)
			}
		}
	}
	mustVerify(t, s)
	if n := addLeaseIndex(t, s); n != 15 {
		t.Fatalf("%d l/ entries written, want 15", n)
	}
	setFormat(t, s, 3)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openMem(t, fs)
	defer s.Close()
	if got := storedFormat(t, s); got != formatVersion || formatVersion != 4 {
		t.Fatalf("format after open: %d (formatVersion %d), want 4", got, formatVersion)
	}
	if n := countKeys(t, s, "l/"); n != 0 {
		t.Fatalf("%d l/ keys after the upgrade", n)
	}
	mustVerify(t, s)

	expire := func(now int64, max int) []string {
		t.Helper()
		recs, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: max})
		if err != nil {
			t.Fatal(err)
		}
		ids := make([]string, len(recs))
		for i, r := range recs {
			if r.State != store.StateReady || r.LastError != "lease expired" {
				t.Fatalf("expired %s: %+v", r.ID, r)
			}
			ids[i] = r.ID
		}
		return ids
	}
	if got := expire(999, 100); len(got) != 0 {
		t.Fatalf("expired before any lease ended: %v", got)
	}
	// Due by 1025: a0 1000, b0 1005, a1 1010, b1 1015, a2 1020, b2 1025.
	if got, want := expire(1025, 4), []string{"a0", "b0", "a1", "b1"}; !slices.Equal(got, want) {
		t.Fatalf("first sweep: %v, want %v", got, want)
	}
	if got, want := expire(1025, 4), []string{"a2", "b2"}; !slices.Equal(got, want) {
		t.Fatalf("second sweep: %v, want %v", got, want)
	}
	if got := expire(1999, 100); len(got) != 4 {
		t.Fatalf("by 1999: %v, want a3 b3 a4 b4", got)
	}
	if got := expire(2000, 100); len(got) != 5 || got[0] != "c0" {
		t.Fatalf("by 2000: %v, want c0…c4", got)
	}
	if got := expire(1e9, 100); len(got) != 0 {
		t.Fatalf("expired again: %v", got)
	}
	mustVerify(t, s)
}
