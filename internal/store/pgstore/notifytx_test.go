package pgstore_test

import (
	"context"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// roundTrips counts the requests a pool's connections write, less the
// statements' first preparation on each connection and the subscription's
// heartbeats: one per operation's round trip.
type roundTrips struct{ writes, prepares, beats atomic.Int64 }

type countingConn struct {
	net.Conn
	writes *atomic.Int64
}

func (c countingConn) Write(b []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(b)
}

func (c *roundTrips) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return countingConn{conn, &c.writes}, nil
}

func (c *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, "SELECT pg_notify($1, $2)") {
		c.beats.Add(1)
	}
	return ctx
}

func (c *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *roundTrips) TracePrepareStart(ctx context.Context, _ *pgx.Conn, _ pgx.TracePrepareStartData) context.Context {
	return ctx
}

func (c *roundTrips) TracePrepareEnd(_ context.Context, _ *pgx.Conn, d pgx.TracePrepareEndData) {
	if !d.AlreadyPrepared {
		c.prepares.Add(1)
	}
}

func (c *roundTrips) count() int64 { return c.writes.Load() - c.prepares.Load() - c.beats.Load() }

// TestChangesAnnounceInOneRoundTrip: each message operation that
// announces itself does so in its own round trip (the operation, then its
// notification in a transaction of its own, pipelined), not a second one
// for pg_notify; a send whose transaction rolls back announces nothing,
// and leaves nothing staged on its connection for the next operation.
func TestChangesAnnounceInOneRoundTrip(t *testing.T) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	cfg, err := pgxpool.ParseConfig(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	var count roundTrips
	cfg.ConnConfig.Tracer = &count
	cfg.ConnConfig.DialFunc = count.dial
	cfg.MaxConns = 1 // the refused send's connection is the next send's
	cfg.ShouldPing = func(context.Context, pgxpool.ShouldPingParams) bool { return false }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	s := openAt(t, srv, func(o *pgstore.Options) { o.URL, o.Pool, o.Schema = "", pool, schema })
	notes, _, _, _ := subscribe(t, s)
	oneRoundTrip := func(what string, op func() error) {
		t.Helper()
		before := count.count()
		if err := op(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := count.count() - before; n != 1 {
			t.Errorf("%s: %d round trips, want 1 (the notification pipelined after the operation)", what, n)
		}
	}

	var sent *store.Record
	oneRoundTrip("send", func() error {
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{{ID: "a", Relative: true, Delay: 30_000, MaxAttempts: 3}}})
		if err == nil {
			sent = res[0].Record
		}
		return err
	})
	wantNote(t, notes, note{"t", sent.DueAt})
	oneRoundTrip("reschedule", func() error {
		_, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "t", ID: "a", Relative: true})
		return err
	})
	wantNote(t, notes, note{"t", 0})
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 1, LeaseFor: 60_000, Token: "tok"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	var retry *store.Record
	oneRoundTrip("nack", func() error {
		retry, err = s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: "a", Receipt: recs[0].Receipt, RetryDelay: 50})
		return err
	})
	wantNote(t, notes, note{"t", retry.DueAt})
	time.Sleep(100 * time.Millisecond)
	oneRoundTrip("promote", func() error {
		pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Max: 10})
		if err == nil && pr.Promoted != 1 {
			t.Errorf("promoted %d, want 1", pr.Promoted)
		}
		return err
	})
	wantNote(t, notes, note{"t", 0})
	if recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 1, LeaseFor: 1, Token: "tok2"}); err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	time.Sleep(20 * time.Millisecond)
	oneRoundTrip("expire", func() error {
		ex, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Max: 10})
		if err == nil && (len(ex) != 1 || ex[0].State != store.StateReady) {
			t.Errorf("expired %v, want a, ready again", ex)
		}
		return err
	})
	wantNote(t, notes, note{"t", 0})
	send(t, s, "d", "d", 0)
	wantNote(t, notes, note{"d", 0})
	if recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "d", Max: 1, LeaseFor: 60_000, Token: "tok3"}); err != nil || len(recs) != 1 {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if r, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "d", ID: "d", Receipt: recs[0].Receipt, Final: true}); err != nil || r.State != store.StateDead {
		t.Fatalf("nack to dead: %v %v", r, err)
	}
	oneRoundTrip("replay", func() error {
		_, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "d", ID: "d"})
		return err
	})
	wantNote(t, notes, note{"d", 0})

	// A send that fails at commit (a deferred trigger refusing id "bad")
	// rolls back its notification with it.
	conn, err := pgx.Connect(ctx, srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	for _, q := range []string{
		"CREATE FUNCTION " + schema + ".refuse_bad() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN " +
			"IF NEW.id = 'bad' THEN RAISE EXCEPTION 'refused at commit'; END IF; RETURN NEW; END $$",
		"CREATE CONSTRAINT TRIGGER refuse_bad AFTER INSERT ON " + schema + ".message DEFERRABLE INITIALLY DEFERRED " +
			"FOR EACH ROW EXECUTE FUNCTION " + schema + ".refuse_bad()",
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "rb", Messages: []store.InsertMessage{{ID: "bad", Relative: true, MaxAttempts: 1}}}); err == nil {
		t.Fatal("send refused at commit: no error")
	}
	good := send(t, s, "ok", "good", 0)
	// The next notification is the later send's: the refused one sent none.
	wantNote(t, notes, note{"ok", 0})
	if good.State != store.StateReady {
		t.Errorf("good: %v, want ready", good.State)
	}
	select {
	case n := <-notes:
		t.Fatalf("unexpected notification %+v", n)
	case <-time.After(200 * time.Millisecond):
	}
}
