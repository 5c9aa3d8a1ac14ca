package pgstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

type note struct {
	topic string
	due   int64
}

// subscribe runs s.Subscribe in the background until t ends; it returns
// the notifications and a count of times the subscription went live.
func subscribe(t *testing.T, s *pgstore.Store) (<-chan note, *atomic.Int32, <-chan struct{}, *error) {
	t.Helper()
	sctx, cancel := context.WithCancel(ctx)
	notes := make(chan note, 100)
	var live atomic.Int32
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		err = s.Subscribe(sctx, func() { live.Add(1) }, func(topic string, due int64) { notes <- note{topic, due} })
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	waitFor(t, "subscription live", func() bool { return live.Load() >= 1 })
	return notes, &live, done, &err
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func wantNote(t *testing.T, notes <-chan note, want note) {
	t.Helper()
	select {
	case n := <-notes:
		if n != want {
			t.Fatalf("notification %+v, want %+v", n, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no notification, want %+v", want)
	}
}

// wantNoNote fails if a notification comes within 200 ms.
func wantNoNote(t *testing.T, notes <-chan note) {
	t.Helper()
	select {
	case n := <-notes:
		t.Fatalf("unexpected notification %+v", n)
	case <-time.After(200 * time.Millisecond):
	}
}

func send(t *testing.T, s store.Store, topic, id string, delay int64) *store.Record {
	t.Helper()
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: time.Now().UnixMilli(),
		Messages: []store.InsertMessage{{ID: id, Payload: []byte(id), Relative: true, Delay: delay, MaxAttempts: 3}}})
	if err != nil {
		t.Fatalf("send %s: %v", id, err)
	}
	return res[0].Record
}

// TestNotifications: what each state change announces, as redisstore
// does: sends (ready now: 0; else the due time, when within a minute),
// promotions, nacks, replays and expiries. Acks, cancels and sends due a
// minute or more ahead announce nothing.
func TestNotifications(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	notes, _, _, _ := subscribe(t, s)

	send(t, s, "t", "now", 0)
	wantNote(t, notes, note{"t", 0})
	// Due a minute or more ahead: no announcement (the other servers'
	// safety sweep arms it), so the next note is the later send's.
	send(t, s, "t", "far", 120_000)
	later := send(t, s, "t", "later", 30_000)
	wantNote(t, notes, note{"t", later.DueAt})
	_, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "t", ID: "later", Relative: true, Delay: 0})
	if err != nil {
		t.Fatal(err)
	}
	wantNote(t, notes, note{"t", 0})
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 2, LeaseFor: 60_000, Token: "tok"})
	if err != nil || len(recs) != 2 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	// (Due before the 30 s announced above: a later one would be covered.)
	r, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: recs[0].ID, Receipt: recs[0].Receipt, RetryDelay: 20_000})
	if err != nil {
		t.Fatal(err)
	}
	wantNote(t, notes, note{"t", r.DueAt})
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: recs[1].ID, Receipt: recs[1].Receipt}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: recs[0].ID}); err != nil {
		t.Fatal(err)
	}
	// (Had the ack or the cancel notified, the next note would be theirs.)
	p := send(t, s, "u", "p", 50)
	wantNote(t, notes, note{"u", p.DueAt})
	time.Sleep(100 * time.Millisecond)
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "u", Max: 10})
	if err != nil || pr.Promoted != 1 {
		t.Fatalf("promote: %+v %v", pr, err)
	}
	wantNote(t, notes, note{"u", 0}) // a promotion: ready now
	recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "u", Max: 1, LeaseFor: 1, Token: "tok2"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	time.Sleep(20 * time.Millisecond)
	if ex, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Max: 10}); err != nil || len(ex) != 1 {
		t.Fatalf("expire: %v %v", ex, err)
	}
	wantNote(t, notes, note{"u", 0})
	// A dead message replayed is ready now.
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "d", Messages: []store.InsertMessage{{ID: "x", Relative: true, MaxAttempts: 1}}})
	if err != nil || res[0].Duplicate {
		t.Fatal(err)
	}
	wantNote(t, notes, note{"d", 0})
	recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "d", Max: 1, LeaseFor: 60_000, Token: "tok3"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if r, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "d", ID: "x", Receipt: recs[0].Receipt}); err != nil || r.State != store.StateDead {
		t.Fatalf("nack to dead: %v %v", r, err)
	}
	if _, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "d", ID: "x"}); err != nil {
		t.Fatal(err)
	}
	wantNote(t, notes, note{"d", 0})
	wantNoNote(t, notes)
}

// TestNotificationsCovered: a send due after a due time of its topic this
// store announced, which is still more than announceCoverMS away, is not
// announced (every server armed its timer at that time or earlier, and
// looks at the topic then); one due earlier is, and so is one due after
// an announced time about to come. On a paced topic that is one
// notification for many sends.
func TestNotificationsCovered(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	notes, _, _, _ := subscribe(t, s)

	first := send(t, s, "c", "first", 5_000)
	wantNote(t, notes, note{"c", first.DueAt})
	for i := range 20 { // due later, in send order: covered
		send(t, s, "c", fmt.Sprint("paced", i), 5_000+int64(i)*10)
	}
	other := send(t, s, "c2", "other", 5_000) // another topic: its own
	wantNote(t, notes, note{"c2", other.DueAt})
	earlier := send(t, s, "c", "earlier", 1_000)
	wantNote(t, notes, note{"c", earlier.DueAt})
	send(t, s, "c", "covered", 1_050)
	soon := send(t, s, "c", "soon", 50) // earlier again
	wantNote(t, notes, note{"c", soon.DueAt})
	// "soon" is less than announceCoverMS away: it covers nothing.
	after := send(t, s, "c", "after", 60)
	wantNote(t, notes, note{"c", after.DueAt})
	wantNoNote(t, notes)
}

// TestSubscribeReconnects: when the database restarts, Subscribe
// reconnects by itself, says so (subscribed again: the engine re-reads
// the store), and delivers what is sent afterwards.
func TestSubscribeReconnects(t *testing.T) {
	srv := pgtest.Start(t)
	s := openAt(t, srv)
	notes, live, _, _ := subscribe(t, s)
	send(t, s, "t", "a", 0)
	wantNote(t, notes, note{"t", 0})
	srv.Restart(t)
	waitFor(t, "a second subscription", func() bool { return live.Load() >= 2 })
	var err error
	for range 50 { // the pool's connections died with the server
		if _, err = s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t",
			Messages: []store.InsertMessage{{ID: "b", Relative: true, MaxAttempts: 3}}}); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("send after restart: %v", err)
	}
	wantNote(t, notes, note{"t", 0})
}

// TestSubscribeEndsOnClose: Close ends Subscribe with ErrClosed, and a
// closed store does not subscribe.
func TestSubscribeEndsOnClose(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	_, _, done, errp := subscribe(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-done:
		if !errors.Is(*errp, store.ErrClosed) {
			t.Fatalf("Subscribe after Close: %v, want ErrClosed", *errp)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe still running after Close")
	}
	if err := s.Subscribe(ctx, nil, func(string, int64) {}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Subscribe on a closed store: %v", err)
	}
}

// TestGeneratedIDCollision: a send whose id the engine generated skips
// the duplicate lookups, but an id that exists after all is still
// answered as a duplicate (the insert conflicts, then looks).
func TestGeneratedIDCollision(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	first := send(t, s, "t", "g", 60_000)
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
		{ID: "g", Relative: true, MaxAttempts: 9, Generated: true},
		{ID: "h", Relative: true, MaxAttempts: 9, Generated: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if !res[0].Duplicate || res[0].Record.Seq != first.Seq || res[0].Record.MaxAttempts != 3 || res[1].Duplicate {
		t.Fatalf("generated ids: %+v %+v", res[0], res[1])
	}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts != (store.Counts{Scheduled: 1, Ready: 1}) {
		t.Fatalf("counts: %+v %v", tr, err)
	}
}

// TestSendRetriesRolledBack: a send that PostgreSQL rolls back for a
// deadlock (40P01, the narrow race of concurrent batches sharing ids) is
// run again by the store instead of failing the caller's request.
func TestSendRetriesRolledBack(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	s := openAt(t, srv, func(o *pgstore.Options) { o.Schema = schema })
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// The first insert into message fails as a deadlock would; a sequence
	// counts the attempts, since the failed transaction rolls back
	// everything else.
	for _, q := range []string{
		"CREATE SEQUENCE " + schema + ".attempts",
		"CREATE FUNCTION " + schema + ".fail_first() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
			"IF nextval('" + schema + ".attempts') = 1 THEN RAISE EXCEPTION 'injected deadlock' USING ERRCODE = '40P01'; END IF; " +
			"RETURN NEW; END $$",
		"CREATE TRIGGER fail_first BEFORE INSERT ON " + schema + ".message FOR EACH ROW EXECUTE FUNCTION " + schema + ".fail_first()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	r := send(t, s, "t", "m", 0)
	if r.ID != "m" || r.State != store.StateReady {
		t.Fatalf("sent %+v", r)
	}
	var attempts int64
	if err := conn.QueryRow(ctx, "SELECT last_value FROM "+schema+".attempts").Scan(&attempts); err != nil || attempts != 2 {
		t.Fatalf("%d attempts (%v), want 2: the rolled-back one and its retry", attempts, err)
	}
}
