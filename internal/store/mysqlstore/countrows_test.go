package mysqlstore_test

import (
	"fmt"
	"sync"
	"testing"

	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestSendProcedureCountRows: each call of the send procedure counts with
// a row of its own, and the servers fold those rows into the numbered
// stripes without changing a topic's counts or its change counter (ver,
// which wakes the pollers): not for rows of a transaction still open,
// which the fold skips and leaves counted once it commits.
func TestSendProcedureCountRows(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	const callers, each = 8, 40
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("c%d-%d", c, i)
				delay := int64(3_600_000)
				if i%4 == 0 {
					delay = 0 // some ready, some scheduled
				}
				if _, err := db.ExecContext(ctx, "CALL `"+prefix+"send`('orders', ?, 'x', ?, 0, @id, @dup, @due)", id, delay); err != nil { // #nosec G202 -- the test's prefix
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	const sent = callers * each
	open, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = open.Rollback() }()
	if _, err := open.ExecContext(ctx, "CALL `"+prefix+"send`('orders', 'open', 'x', 3600000, 0, @id, @dup, @due)"); err != nil { // #nosec G202 -- the test's prefix
		t.Fatal(err)
	}

	rowsOf := func() (numbered, own int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT COALESCE(SUM(stripe < 64), 0), COALESCE(SUM(stripe >= 64), 0) FROM `"+prefix+"topic_count` WHERE topic = 'orders'").Scan(&numbered, &own); err != nil { // #nosec G202 -- the test's prefix
			t.Fatal(err)
		}
		return numbered, own
	}
	verOf := func() (ver int64) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT SUM(ver) FROM `"+prefix+"topic_count` WHERE topic = 'orders'").Scan(&ver); err != nil { // #nosec G202 -- the test's prefix
			t.Fatal(err)
		}
		return ver
	}
	wantCounts := func(scheduled, ready int64) {
		t.Helper()
		ti, err := s.TopicGet(ctx, "orders")
		if err != nil || ti.Counts.Scheduled != scheduled || ti.Counts.Ready != ready {
			t.Fatalf("counts %+v (%v), want %d scheduled, %d ready", ti, err, scheduled, ready)
		}
	}
	const ready = sent / 4
	if numbered, own := rowsOf(); numbered != 0 || own != sent {
		t.Fatalf("before the fold: %d numbered stripes, %d own rows; want 0 and %d (one per committed call)", numbered, own, sent)
	}
	wantCounts(sent-ready, ready)
	ver := verOf()
	if ver != sent {
		t.Fatalf("ver %d after %d committed sends", ver, sent)
	}

	// A poll folds (more than foldAfter rows), a batch at a time.
	if err := mysqlstore.PollVers(s); err != nil {
		t.Fatal(err)
	}
	if numbered, own := rowsOf(); own != 0 || numbered < 1 {
		t.Fatalf("after a poll: %d numbered stripes, %d own rows left; want some and 0", numbered, own)
	}
	wantCounts(sent-ready, ready)
	if v := verOf(); v != ver {
		t.Fatalf("ver moved from %d to %d by the fold", ver, v)
	}
	if n, err := mysqlstore.FoldCounts(s, "orders"); err != nil || n != 0 {
		t.Fatalf("fold with only an open transaction's row: folded %d, %v; want 0", n, err)
	}

	if err := open.Commit(); err != nil {
		t.Fatal(err)
	}
	wantCounts(sent-ready+1, ready)
	if _, own := rowsOf(); own != 1 {
		t.Fatalf("after the commit: %d own rows, want 1", own)
	}
	if n, err := mysqlstore.FoldCounts(s, "orders"); err != nil || n != 1 {
		t.Fatalf("fold after the commit: folded %d, %v; want 1", n, err)
	}
	wantCounts(sent-ready+1, ready)
	if numbered, own := rowsOf(); own != 0 || numbered < 1 || numbered > 64 {
		t.Fatalf("after the last fold: %d numbered stripes, %d own rows", numbered, own)
	}
	if v := verOf(); v != ver+1 {
		t.Fatalf("ver %d, want %d", v, ver+1)
	}
}
