package pgstore_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestSendManyTx: SendManyTx (delayq_send_many) stores what SendTx does —
// payload, headers, due times, max attempts from the topic's settings,
// priority — answers in order, and a repeated id, in the call or already
// in the topic, is a duplicate.
func TestSendManyTx(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	if err := s.TopicSettingsPut(ctx, "t", []byte(`{"max_attempts":7,"backoff":{}}`)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
		{ID: "old", Payload: []byte("old"), Relative: true, Delay: 3_600_000, MaxAttempts: 3},
	}}); err != nil {
		t.Fatal(err)
	}
	conn := appConn(t, srv.URL())
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond).Add(300 * time.Microsecond)
	hdr := map[string]string{"content-type": "application/json", "ünï": "cödé", "empty": ""}
	var res []pgstore.TxResult
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		var err error
		res, err = pgstore.SendManyTx(ctx, tx, s.Schema(), "t",
			pgstore.TxMessage{ID: "h", Payload: []byte{0, 1, 2}, Headers: hdr, MaxAttempts: 3},
			pgstore.TxMessage{ID: "d", Delay: 1500*time.Millisecond + time.Microsecond, Priority: 9},
			pgstore.TxMessage{ID: "at", DeliverAt: at},
			pgstore.TxMessage{}, // a generated id
			pgstore.TxMessage{ID: "h", Payload: []byte("again")},
			pgstore.TxMessage{ID: "old", Payload: []byte("new")},
		)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 || res[0].ID != "h" || res[1].ID != "d" || res[2].ID != "at" || res[3].ID == "" || res[5].ID != "old" {
		t.Fatalf("results out of order: %+v", res)
	}
	for i, dup := range []bool{false, false, false, false, true, true} {
		if res[i].Duplicate != dup {
			t.Errorf("result %d: duplicate %v, want %v", i, res[i].Duplicate, dup)
		}
	}
	if !res[4].DueAt.Equal(res[0].DueAt) {
		t.Errorf("the repeated id answers the first one's due time: %v, want %v", res[4].DueAt, res[0].DueAt)
	}
	h, err := s.MessageGet(ctx, "t", "h")
	if err != nil {
		t.Fatal(err)
	}
	if string(h.Payload) != "\x00\x01\x02" || !maps.Equal(h.Headers, hdr) || h.MaxAttempts != 3 || h.State != store.StateReady {
		t.Errorf("h: %+v", *h)
	}
	d, err := s.MessageGet(ctx, "t", "d")
	if err != nil {
		t.Fatal(err)
	}
	if d.DueAt != d.CreatedAt+1501 || d.MaxAttempts != 7 || d.State != store.StateScheduled || d.Priority != 9 || d.Seq <= h.Seq {
		t.Errorf("d (delay 1.5 s + 1 µs, rounded up; the topic's max attempts; priority 9; seq after h's %d): %+v", h.Seq, *d)
	}
	a, err := s.MessageGet(ctx, "t", "at")
	if err != nil {
		t.Fatal(err)
	}
	if a.DueAt != at.UnixMilli()+1 || a.Seq <= d.Seq {
		t.Errorf("at: DueAt %d seq %d, want %d (deliver_at rounded up), after %d", a.DueAt, a.Seq, at.UnixMilli()+1, d.Seq)
	}
	if o, err := s.MessageGet(ctx, "t", "old"); err != nil || string(o.Payload) != "old" {
		t.Errorf("old: %v %v", o, err)
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.Counts != (store.Counts{Scheduled: 3, Ready: 2}) {
		t.Fatalf("counts: %+v %v", tr, err)
	}
	// An empty call sends nothing and needs no statement.
	if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		r, err := pgstore.SendManyTx(ctx, tx, s.Schema(), "t")
		if err == nil && len(r) != 0 {
			err = fmt.Errorf("%d results", len(r))
		}
		return err
	}); err != nil {
		t.Fatal(err)
	}
}

// TestDelayqSendManyRefuses: delayq_send_many checks what delayq_send
// checks, naming the message, and arrays of the wrong length; nothing is
// sent.
func TestDelayqSendManyRefuses(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	conn := appConn(t, srv.URL())
	q := pgx.Identifier{s.Schema()}.Sanitize() + ".delayq_send_many"
	wantRefused(t, conn, s, []refusal{
		{"SELECT * FROM " + q + "($1, NULL, ARRAY['x']::bytea[])", []any{"bad topic"}, "topic"},
		{"SELECT * FROM " + q + "($1, NULL, ARRAY['x']::bytea[])", []any{strings.Repeat("t", 201)}, "topic"},
		{"SELECT * FROM " + q + "('t', ARRAY['a', 'b/c'], ARRAY['x', 'y']::bytea[])", nil, "message 2: id"},
		{"SELECT * FROM " + q + "('t', ARRAY['a', $1], ARRAY['x', 'y']::bytea[])", []any{strings.Repeat("x", 201)}, "message 2: id"},
		{"SELECT * FROM " + q + "('t', ARRAY['', 'a'], ARRAY['x', 'y']::bytea[])", nil, "message 1: id"},
		{"SELECT * FROM " + q + "('t', ARRAY['é'], ARRAY['x']::bytea[])", nil, "message 1: id"},
		{"SELECT * FROM " + q + "('t', ARRAY['a'], ARRAY['x', 'y']::bytea[])", nil, "as long as payloads"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], ARRAY[1, 2])", nil, "as long as payloads"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x', 'y']::bytea[], ARRAY[0, -1])", nil, "message 2: delay_ms"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], ARRAY[5], deliver_at => ARRAY[now()])", nil, "either"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], deliver_at => ARRAY[now() + interval '11 years'])", nil, "maximum delay"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], max_attempts => ARRAY[0])", nil, "max_attempts"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], priorities => ARRAY[256])", nil, "priority"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY['x']::bytea[], headers => ARRAY['{\"k\": 1}']::jsonb[])", nil, "headers"},
		{"SELECT * FROM " + q + "('t', NULL, ARRAY[$1::bytea])", []any{make([]byte, 1<<20+1)}, "payload"},
	})
}

// TestInsertRacesAck: a send of an id whose message an uncommitted ack is
// moving to tombstone waits for the ack (the unique key), then inserts —
// the row it conflicted with is gone — and must find the tombstone in
// its next statement: the send answers the tombstone as a duplicate and
// leaves no live message, in a batch (the set-based insert), alone, and
// through delayq_send (its own insert since schema 9).
func TestInsertRacesAck(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	adm := adminPool(t, srv)
	q := pgx.Identifier{s.Schema()}.Sanitize()
	for _, mode := range []string{"batch", "alone", "delayq_send"} {
		batch := mode == "batch"
		topic := "t-" + mode
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: []store.InsertMessage{
			{ID: "x", Payload: []byte("x"), Relative: true, MaxAttempts: 3},
		}}); err != nil {
			t.Fatal(err)
		}
		leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Max: 1, LeaseFor: 60_000, Token: "tok"})
		if err != nil || len(leased) != 1 {
			t.Fatalf("lease: %v %v", leased, err)
		}
		ackTx, err := adm.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// An open transaction would hold the schema's cleanup forever.
		t.Cleanup(func() { _ = ackTx.Rollback(ctx) })
		var st int32
		if err := ackTx.QueryRow(ctx, "SELECT * FROM "+q+".op_ack_many(NULL, $1, ARRAY['x'], ARRAY[$2])", topic, leased[0].Receipt).Scan(&st); err != nil || st != 0 {
			t.Fatalf("ack: %d %v", st, err)
		}
		msgs := []store.InsertMessage{{ID: "x", Payload: []byte("again"), Relative: true, Delay: 1000, MaxAttempts: 3}}
		if batch {
			msgs = []store.InsertMessage{
				{ID: "a", Relative: true, Delay: 1000, MaxAttempts: 3},
				msgs[0],
				{ID: "z", Relative: true, MaxAttempts: 3},
			}
		}
		type answer struct {
			res []store.InsertResult
			err error
		}
		done := make(chan answer, 1)
		fn := "op_insert"
		go func() {
			if mode != "delayq_send" {
				res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: msgs})
				done <- answer{res, err}
				return
			}
			var r store.InsertResult
			var dueAt time.Time
			err := adm.QueryRow(ctx, "SELECT message_id, duplicate, due_at FROM "+q+".delayq_send($1, 'x', 'again', 1000)", topic).
				Scan(new(string), &r.Duplicate, &dueAt)
			if err == nil {
				r.Record, err = s.MessageGet(ctx, topic, "x")
			}
			done <- answer{[]store.InsertResult{r}, err}
		}()
		if mode == "delayq_send" {
			fn = "delayq_send"
		}
		// The send waits for the ack's transaction: the race is on.
		waiting := false
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline) && !waiting; time.Sleep(20 * time.Millisecond) {
			var n int
			if err := adm.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%' || $2 || '%'", s.Schema(), fn).Scan(&n); err != nil {
				t.Fatal(err)
			}
			waiting = n > 0
		}
		if !waiting {
			t.Fatalf("%s: the send never waited for the ack", mode)
		}
		if err := ackTx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		a := <-done
		if a.err != nil {
			t.Fatalf("%s: send: %v", mode, a.err)
		}
		x := a.res[0]
		if batch {
			x = a.res[1]
			if a.res[0].Duplicate || a.res[2].Duplicate || a.res[0].Record.ID != "a" || a.res[2].Record.ID != "z" {
				t.Errorf("the other messages: %+v %+v", a.res[0], a.res[2])
			}
		}
		if !x.Duplicate || x.Record.ID != "x" || x.Record.State != store.StateAcked {
			t.Errorf("%s: x answered %+v (duplicate %v), want the acked tombstone as a duplicate", mode, *x.Record, x.Duplicate)
		}
		if r, err := s.MessageGet(ctx, topic, "x"); err != nil || r.State != store.StateAcked {
			t.Errorf("%s: x is %+v %v, want acked", mode, r, err)
		}
		want := store.Counts{Acked: 1}
		if batch {
			want = store.Counts{Scheduled: 1, Ready: 1, Acked: 1}
		}
		if tr, err := s.TopicGet(ctx, topic); err != nil || tr.Counts != want {
			t.Errorf("%s: counts %+v %v, want %+v", mode, tr, err, want)
		}
	}
}

// TestConcurrentOverlappingBatches: batches sharing ids, in different
// orders, sent at once: each id is sent exactly once (one answer new,
// the others duplicates of it), seq follows each batch's order among
// the ids it sent, no batch fails (ids are inserted in one order, so
// they wait for each other without deadlock) and the counts match.
func TestConcurrentOverlappingBatches(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	const ids, senders, rounds, per = 60, 8, 5, 25
	var mu sync.Mutex
	newBy := map[string]uint64{} // id -> seq of its one new answer
	var wg sync.WaitGroup
	errs := make(chan error, senders)
	for w := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range rounds {
				msgs := make([]store.InsertMessage, per)
				for i := range msgs {
					msgs[i] = store.InsertMessage{ID: fmt.Sprintf("id-%02d", rng.IntN(ids)), Relative: true, Delay: int64(rng.IntN(2)) * 60_000, MaxAttempts: 3}
				}
				res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs})
				if err != nil {
					errs <- err
					return
				}
				last := uint64(0)
				mu.Lock()
				for i, r := range res {
					if r.Record.ID != msgs[i].ID {
						errs <- fmt.Errorf("answer %d is %q, want %q", i, r.Record.ID, msgs[i].ID)
					}
					if r.Duplicate {
						continue
					}
					if _, dup := newBy[r.Record.ID]; dup {
						errs <- fmt.Errorf("%s sent twice", r.Record.ID)
					}
					newBy[r.Record.ID] = r.Record.Seq
					if r.Record.Seq <= last {
						errs <- fmt.Errorf("seq %d after %d: not in batch order", r.Record.Seq, last)
					}
					last = r.Record.Seq
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(newBy) == 0 {
		t.Fatal("nothing was sent")
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.Counts.Scheduled + tr.Counts.Ready; got != int64(len(newBy)) {
		t.Errorf("counts %+v: %d messages, want %d", tr.Counts, got, len(newBy))
	}
	for id, seq := range newBy {
		r, err := s.MessageGet(ctx, "t", id)
		if err != nil || r.Seq != seq {
			t.Errorf("%s: %+v %v, want seq %d", id, r, err, seq)
		}
	}
}

// TestSendManyTxNotifies: delayq_send_many notifies at commit with the
// batch's earliest due time (0 for a message due now) when that is within
// 60 s, and not at all for a batch due later.
func TestSendManyTxNotifies(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	notes, _, _, _ := subscribe(t, s)
	conn := appConn(t, srv.URL())
	send := func(msgs ...pgstore.TxMessage) []pgstore.TxResult {
		t.Helper()
		var res []pgstore.TxResult
		if err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			var err error
			res, err = pgstore.SendManyTx(ctx, tx, s.Schema(), "t", msgs...)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return res
	}
	next := func(what string) note {
		t.Helper()
		select {
		case n := <-notes:
			return n
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification for %s", what)
		}
		return note{}
	}
	send(pgstore.TxMessage{ID: "in-2h", Delay: 2 * time.Hour}, pgstore.TxMessage{ID: "in-61s", Delay: 61 * time.Second})
	res := send(pgstore.TxMessage{ID: "in-2h-b", Delay: 2 * time.Hour}, pgstore.TxMessage{ID: "in-7s", Delay: 7 * time.Second},
		pgstore.TxMessage{ID: "in-5s", Delay: 5 * time.Second})
	if n := next("the batch due in 5 s"); n.topic != "t" || n.due != res[2].DueAt.UnixMilli() {
		t.Fatalf("first notification %+v, want the batch's earliest due %d: the batch due later notified", n, res[2].DueAt.UnixMilli())
	}
	send(pgstore.TxMessage{ID: "in-1h", Delay: time.Hour}, pgstore.TxMessage{ID: "now"})
	if n := next("the batch with a message due now"); n.topic != "t" || n.due != 0 {
		t.Fatalf("notification %+v, want due 0 (ready)", n)
	}
}
