package pgstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestFoldOncePerPeriod: a topic list folds the count rows only when no
// fold of this store ran within countFoldEvery; concurrent lists past it
// (a safety sweep, a metrics scrape, GET /v1/topics; one folds, the
// others read) leave them folded; every list's counts are exact either
// way.
func TestFoldOncePerPeriod(t *testing.T) {
	ctx := context.Background()
	srv := pgtest.Shared(t)
	s, err := Open(ctx, Options{URL: srv.URL(), Schema: srv.NewSchema()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	rows := func() (n int) {
		t.Helper()
		if err := s.pool.QueryRow(ctx, "SELECT count(*) FROM "+s.q+".topic_count WHERE topic = 't'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	sent := 0
	sendMany := func(n int) {
		t.Helper()
		for range n {
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
				{ID: fmt.Sprintf("m%d", sent), Relative: true, Delay: 3_600_000, MaxAttempts: 3},
			}}); err != nil {
				t.Fatal(err)
			}
			sent++
		}
	}
	list := func() {
		t.Helper()
		trs, err := s.TopicList(ctx)
		want := store.Counts{Scheduled: int64(sent)}
		if err != nil || len(trs) != 1 || trs[0].Counts != want {
			t.Fatalf("TopicList: %v %v, want one topic with %+v", trs, err, want)
		}
	}

	sendMany(countFoldAfter + 10)
	s.foldedAt = time.Now() // as if this store had just folded
	list()
	if n := rows(); n != countFoldAfter+10 {
		t.Fatalf("count rows after a list within a fold period of the last fold: %d, want %d (not folded)", n, countFoldAfter+10)
	}

	s.foldedAt = time.Now().Add(-countFoldEvery)
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(list)
	}
	wg.Wait()
	if n := rows(); n != 1 {
		t.Fatalf("count rows after three concurrent lists past the period: %d, want 1", n)
	}
	if time.Since(s.foldedAt) > countFoldEvery {
		t.Fatalf("foldedAt %v: not set by the fold", s.foldedAt)
	}
}
