package storetest

import (
	"context"
	"slices"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// RunDueLeaser checks a store.DueLeaser: MessageLeaseDue takes ready and
// due scheduled messages in (priority, due, seq) order, never one due
// after its Now, and counts each move from the state it left (leaving no
// queue row behind); MessagePromoteGrace promotes only what is due for
// longer than the grace and says what it left (HeldDue) and what comes
// next (NextDue). open must give a store judging time by the calls' Nows.
func RunDueLeaser(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	dl, ok := s.(store.DueLeaser)
	if !ok {
		t.Fatalf("%T does not implement store.DueLeaser", s)
	}
	ctx := context.Background()
	const now = int64(1_000_000)
	ins := func(at int64, id string, due int64, prio uint8) {
		t.Helper()
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: at, Messages: []store.InsertMessage{
			{ID: id, DueAt: due, MaxAttempts: 3, Priority: prio},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	ins(now-50, "r-late", now-100, 0)  // ready at insert (due in the past)
	ins(now-200, "s-old", now-80, 0)   // scheduled, due at now-80
	ins(now-200, "s-p1", now-90, 1)    // scheduled, priority 1
	ins(now-200, "s-new", now-10, 0)   // scheduled, due within the grace
	ins(now-200, "s-next", now+10, 0)  // not due
	ins(now-200, "s-later", now+20, 0) // not due

	lease := func(at int64, max int) []string {
		t.Helper()
		recs, err := dl.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "t", Now: at, Max: max, LeaseFor: 1000, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range recs {
			if r.DueAt > at {
				t.Errorf("leased %s due at %d at %d: early", r.ID, r.DueAt, at)
			}
			if r.State != store.StateInflight || r.UpdatedAt != at || r.LeaseUntil != at+1000 || r.Deliveries != 1 {
				t.Errorf("leased %s: state %v updated %d lease until %d deliveries %d", r.ID, r.State, r.UpdatedAt, r.LeaseUntil, r.Deliveries)
			}
			ids = append(ids, r.ID)
		}
		return ids
	}
	counts := func(want store.Counts) {
		t.Helper()
		tr, err := s.TopicGet(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		if tr.Counts != want {
			t.Errorf("counts %+v, want %+v", tr.Counts, want)
		}
	}
	counts(store.Counts{Scheduled: 5, Ready: 1})

	// Grace 50 at now: s-old (80 ms overdue) and s-p1 (90) are promoted;
	// s-new (10) is left to the leases.
	res, err := dl.MessagePromoteGrace(ctx, &store.MessagePromoteParams{Topic: "t", Now: now, Max: 100}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if res.Promoted != 2 || res.HeldDue != now-10 || res.NextDue != now+10 {
		t.Errorf("promote with grace: promoted %d held %d next %d, want 2, now-10, now+10", res.Promoted, res.HeldDue-now, res.NextDue-now)
	}
	counts(store.Counts{Scheduled: 3, Ready: 3})

	// Priority 0 before 1, then due order, across both queues; s-next is
	// not due at now and never taken early.
	if got, want := lease(now, 3), []string{"r-late", "s-old", "s-new"}; !slices.Equal(got, want) {
		t.Errorf("lease at now: %v, want %v", got, want)
	}
	counts(store.Counts{Scheduled: 2, Ready: 1, Inflight: 3})
	if got := lease(now+9, 10); !slices.Equal(got, []string{"s-p1"}) {
		t.Errorf("lease at now+9: %v, want [s-p1]", got)
	}
	if got := lease(now+10, 10); !slices.Equal(got, []string{"s-next"}) {
		t.Errorf("lease at now+10: %v, want [s-next]", got)
	}
	counts(store.Counts{Scheduled: 1, Inflight: 5})

	// Nothing held: HeldDue 0, NextDue the next one.
	res, err = dl.MessagePromoteGrace(ctx, &store.MessagePromoteParams{Topic: "t", Now: now + 10, Max: 100}, 50)
	if err != nil {
		t.Fatal(err)
	}
	if res.Promoted != 0 || res.HeldDue != 0 || res.NextDue != now+20 {
		t.Errorf("promote with grace, nothing due: promoted %d held %d next %d", res.Promoted, res.HeldDue, res.NextDue-now)
	}
	// Every leased message left its queue: an ack of each empties the
	// topic but for s-later, and the queues agree with the counts.
	if got := lease(now+20, 10); !slices.Equal(got, []string{"s-later"}) {
		t.Errorf("lease at now+20: %v, want [s-later]", got)
	}
	counts(store.Counts{Inflight: 6})
	tr, err := s.TopicGet(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if tr.NextDue != 0 || tr.OldestReady != 0 {
		t.Errorf("after leasing all: NextDue %d OldestReady %d, want 0 0 (queue rows left behind)", tr.NextDue, tr.OldestReady)
	}

	// Nothing ready and several due, of mixed priorities: each lease
	// answers in lease order, priority before due time (which due ones a
	// lease of fewer than are due considers is the first Max of each
	// partition), and two leases take every due message once.
	for _, m := range []struct {
		id   string
		due  int64
		prio uint8
	}{{"u-p2", now - 30, 2}, {"u-a", now - 20, 0}, {"u-p1", now - 10, 1}, {"u-b", now - 5, 0}, {"u-next", now + 1, 0}} {
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "u", Now: now - 100, Messages: []store.InsertMessage{
			{ID: m.id, DueAt: m.due, MaxAttempts: 3, Priority: m.prio},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	var all []string
	for _, max := range []int{2, 10} {
		recs, err := dl.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "u", Now: now, Max: max, LeaseFor: 1000, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		if len(recs) != 2 {
			t.Errorf("lease of %d with 4 then 2 due: %d messages, want 2", max, len(recs))
		}
		for i, r := range recs {
			if r.State != store.StateInflight || r.Deliveries != 1 || r.DueAt > now {
				t.Errorf("leased %s: state %v deliveries %d due %d", r.ID, r.State, r.Deliveries, r.DueAt-now)
			}
			if i > 0 {
				if q := recs[i-1]; q.Priority > r.Priority || q.Priority == r.Priority && q.DueAt > r.DueAt {
					t.Errorf("lease of %d answered %s (priority %d, due %d) before %s (priority %d, due %d): not lease order",
						max, q.ID, q.Priority, q.DueAt-now, r.ID, r.Priority, r.DueAt-now)
				}
			}
			all = append(all, r.ID)
		}
	}
	slices.Sort(all)
	if want := []string{"u-a", "u-b", "u-p1", "u-p2"}; !slices.Equal(all, want) {
		t.Errorf("two leases took %v, want %v once each", all, want)
	}
	tr, err = s.TopicGet(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Counts{Scheduled: 1, Inflight: 4}); tr.Counts != want {
		t.Errorf("topic u counts %+v, want %+v", tr.Counts, want)
	}

	if nd, ok := s.(store.NextDueLeaser); ok && nd.ReportsNextDue() {
		runNextDue(t, s, nd)
	}
}

// runNextDue checks a store.NextDueLeaser's report of what its due lease
// left: the next due time the engine's timer waits for, after a lease
// that took messages, one that found nothing (on Redis a peek alone) and
// one that left a due message (Max).
func runNextDue(t *testing.T, s store.Store, nd store.NextDueLeaser) {
	ctx := context.Background()
	const now = int64(2_000_000)
	for _, m := range []struct {
		id  string
		due int64
	}{{"a", now - 5}, {"b", now + 10}, {"c", now + 30}} {
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "nd", Now: now - 100, Messages: []store.InsertMessage{
			{ID: m.id, DueAt: m.due, MaxAttempts: 3},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	lease := func(at int64, max int, want []string) int64 {
		t.Helper()
		res, err := nd.MessageLeaseDueNext(ctx, &store.MessageLeaseParams{Topic: "nd", Now: at, Max: max, LeaseFor: 1000, Token: "tok"})
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, r := range res.Records {
			ids = append(ids, r.ID)
		}
		if !slices.Equal(ids, want) {
			t.Errorf("lease at now%+d: %v, want %v", at-now, ids, want)
		}
		if res.Now != 0 && res.Now != at {
			t.Errorf("lease at now%+d judged by %d", at-now, res.Now-now)
		}
		return res.NextDue
	}
	// Exact here: nothing was cancelled (a store may report less then).
	if next := lease(now, 10, []string{"a"}); next != now+10 {
		t.Errorf("after leasing the due one: NextDue now%+d, want now+10", next-now)
	}
	if next := lease(now+1, 10, nil); next != now+10 {
		t.Errorf("after a lease that found nothing due: NextDue now%+d, want now+10", next-now)
	}
	// Both due, Max 1: the one left is due, so NextDue is at most now+30.
	if next := lease(now+30, 1, []string{"b"}); next == 0 || next > now+30 {
		t.Errorf("after a lease that left a due one: NextDue %d (now%+d), want at most now+30", next, next-now)
	}
	if next := lease(now+30, 10, []string{"c"}); next != 0 {
		t.Errorf("after leasing the last one: NextDue now%+d, want 0 (none)", next-now)
	}
}
