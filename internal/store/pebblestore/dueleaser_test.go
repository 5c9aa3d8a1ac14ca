package pebblestore

import (
	"fmt"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// A grace promotion does not wait for a topic another call holds: it
// answers Busy and changes nothing; once the topic is free it promotes.
// (On a store that waits, the call below never returns while the lock is
// held and the test hangs until go test's timeout.)
func TestPromoteGraceSkipsBusyTopic(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	insert(t, s, "q", 100, m("a", 200))
	tp := s.lookupTopic("q")
	p := &store.MessagePromoteParams{Topic: "q", Now: 1000, Max: 100}

	tp.mu.Lock() // as a lease in progress would
	got := make(chan *store.PromoteResult, 1)
	go func() {
		res, err := s.MessagePromoteGrace(ctx, p, 50)
		if err != nil {
			t.Error(err)
		}
		got <- res
	}()
	res := <-got
	tp.mu.Unlock()
	if res == nil || !res.Busy || res.Promoted != 0 {
		t.Fatalf("grace promotion of a held topic: %+v, want Busy and nothing promoted", res)
	}
	if r, err := s.MessageGet(ctx, "q", "a"); err != nil || r.State != store.StateScheduled {
		t.Fatalf("after the busy answer: %v %v, want a still scheduled", r, err)
	}

	res, err := s.MessagePromoteGrace(ctx, p, 50)
	if err != nil || res.Busy || res.Promoted != 1 {
		t.Fatalf("grace promotion of a free topic: %+v %v, want 1 promoted", res, err)
	}
	// A plain promotion never answers Busy: it waits.
	if res, err := s.MessagePromote(ctx, p); err != nil || res.Busy {
		t.Fatalf("MessagePromote: %+v %v", res, err)
	}
	mustVerify(t, s)
}

// MessageLeaseDue does not scan s/ while the topic's mark shows nothing
// due (the first lease learns the mark), and still takes what comes due,
// including a message inserted due before the mark.
func TestLeaseDueSkipsScanWhenNothingDue(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	insert(t, s, "q", 100, m("late", 5000))
	lease := func(now int64) []*store.Record {
		t.Helper()
		recs, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "q", Now: now, Max: 10, LeaseFor: 1000, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	if recs := lease(1000); len(recs) != 0 {
		t.Fatalf("nothing due at 1000, leased %d", len(recs))
	}
	before := scheduledScans.Load()
	for now := int64(1001); now < 1100; now++ {
		if recs := lease(now); len(recs) != 0 {
			t.Fatalf("nothing due at %d, leased %d", now, len(recs))
		}
	}
	if n := scheduledScans.Load() - before; n != 0 {
		t.Errorf("%d scans of s/ by 99 leases with nothing due, want 0", n)
	}

	insert(t, s, "q", 1100, m("early", 1200)) // lowers the mark
	if recs := lease(1150); len(recs) != 0 {
		t.Fatalf("nothing due at 1150, leased %d", len(recs))
	}
	if recs := lease(1200); len(recs) != 1 || recs[0].ID != "early" {
		t.Fatalf("at 1200 leased %v, want early", recs)
	}
	if recs := lease(5000); len(recs) != 1 || recs[0].ID != "late" {
		t.Fatalf("at 5000 leased %v, want late", recs)
	}
	if scheduledScans.Load()-before == 0 {
		t.Error("no scan of s/ counted: the check above checked nothing")
	}
	mustVerify(t, s)
}

// BenchmarkLeaseDueNothingDue: a long-poll's MessageLeaseDue on a topic
// with 1,000 messages scheduled later and nothing ready (a consumer back
// for more between due times): what the s/ mark check saves per call.
// TestDryLeaseSkipsReadyScan: once a lease found r/ and p/ empty, the
// leases that find nothing (a consumer back for more between due times)
// open no iterator; and whatever makes a message ready afterwards lowers
// the marks, so the next lease takes it: a promotion (r/, and p/ for a
// priority), a nack due now, an expired lease.
func TestDryLeaseSkipsReadyScan(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	leaseAt := func(now int64, due bool) []*store.Record {
		t.Helper()
		p := &store.MessageLeaseParams{Topic: "q", Now: now, Max: 10, LeaseFor: 100, Token: "tok"}
		var recs []*store.Record
		var err error
		if due {
			recs, err = s.MessageLeaseDue(ctx, p)
		} else {
			recs, err = s.MessageLease(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
		return recs
	}
	ids := func(recs []*store.Record) []string {
		var out []string
		for _, r := range recs {
			out = append(out, r.ID)
		}
		return out
	}
	want := func(recs []*store.Record, want ...string) {
		t.Helper()
		if got := ids(recs); !slices.Equal(got, want) {
			t.Fatalf("leased %v, want %v", got, want)
		}
	}
	insert(t, s, "q", 100, m("far", 100_000))
	want(leaseAt(1000, false)) // r/ and p/ scanned once, found empty
	before := readyScans.Load()
	for now := int64(1001); now < 1100; now++ {
		want(leaseAt(now, now%2 == 0))
	}
	if n := readyScans.Load() - before; n != 0 {
		t.Errorf("%d scans of r/ by 99 leases of an empty topic, want 0", n)
	}

	// A promotion adds to r/ and, for a priority, to p/.
	lo, hi := m("lo", 1200), m("hi", 1200)
	lo.MaxAttempts, hi.Priority = 5, 3
	insert(t, s, "q", 1100, lo, hi)
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "q", Now: 1200, Max: 10}); err != nil {
		t.Fatal(err)
	}
	leased := leaseAt(1200, false)
	want(leased, "lo", "hi")

	// A nack due now, and a lease that ran out.
	nack := leased[0]
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "q", ID: nack.ID, Receipt: nack.Receipt, Now: 1201, Error: "again"}); err != nil {
		t.Fatal(err)
	}
	want(leaseAt(1201, true), "lo")
	if _, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 1400, Max: 10}); err != nil {
		t.Fatal(err)
	}
	want(leaseAt(1400, false), "lo", "hi")
	if readyScans.Load()-before == 0 {
		t.Error("no scan of r/ counted: the check above checked nothing")
	}
	mustVerify(t, s)
}

func BenchmarkLeaseDueNothingDue(b *testing.B) {
	s := openMem(b, vfs.NewMem())
	defer s.Close()
	ms := make([]store.InsertMessage, 1000)
	for i := range ms {
		ms[i] = m(fmt.Sprint("m", i), int64(10_000+i))
	}
	insert(b, s, "q", 100, ms...)
	p := &store.MessageLeaseParams{Topic: "q", Now: 1000, Max: 100, LeaseFor: 1000, Token: "tok"}
	b.ReportAllocs()
	for b.Loop() {
		if recs, err := s.MessageLeaseDue(ctx, p); err != nil || len(recs) != 0 {
			b.Fatal(recs, err)
		}
	}
}

// BenchmarkLeaseDueRelease: the paced release, one message coming due per
// millisecond and a long-poll's MessageLeaseDue taking it with nothing
// else ready, straight from s/ (leaseScheduled) against promoting it
// first. wal-B/msg is what the lease logs to the WAL and inserts into the
// memtable per message.
func BenchmarkLeaseDueRelease(b *testing.B) {
	for _, c := range []struct {
		name    string
		promote bool
	}{{"straight", false}, {"promote-first", true}} {
		b.Run(c.name, func(b *testing.B) {
			disableLeaseScheduled = c.promote
			defer func() { disableLeaseScheduled = false }()
			s := openMem(b, vfs.NewMem())
			defer s.Close()
			// Messages are added 1,000 at a time, each due a millisecond
			// after the one before, whenever the leases have taken them
			// all: b.Loop runs as many leases as a second allows.
			const block = 1000
			pay := make([]byte, 1024)
			sent := 0
			fill := func() {
				ms := make([]store.InsertMessage, block)
				for j := range ms {
					ms[j] = m(fmt.Sprint("m", sent+j), int64(10_000+sent+j))
					ms[j].Payload = pay
				}
				insert(b, s, "q", 100, ms...)
				sent += block
			}
			fill()
			b.ReportAllocs()
			var walFill uint64 // WAL bytes of the fills inside the loop
			wal0 := s.db.Metrics().WAL.BytesIn
			i := 0
			for b.Loop() {
				if i == sent {
					b.StopTimer()
					w := s.db.Metrics().WAL.BytesIn
					fill()
					walFill += s.db.Metrics().WAL.BytesIn - w
					b.StartTimer()
				}
				p := &store.MessageLeaseParams{Topic: "q", Now: int64(10_000 + i), Max: 100, LeaseFor: 60_000, Token: "tok"}
				if recs, err := s.MessageLeaseDue(ctx, p); err != nil || len(recs) != 1 {
					b.Fatal(len(recs), err)
				}
				i++
			}
			b.ReportMetric(float64(s.db.Metrics().WAL.BytesIn-wal0-walFill)/float64(i), "wal-B/msg")
		})
	}
}
