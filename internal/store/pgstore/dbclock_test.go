package pgstore_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
	"github.com/delayq/delayq/internal/store/storetest"
)

// The suites drive a logical clock through each call's Now. To run them
// on the production path (TimeDB: the SQL reads the database's clock and
// the store never sends a now), the test replaces the schema's clock
// function now_ms() — the only place the database's time enters — with
// one that reads a one-row table, and sets that row to each call's Now
// just before the call. Everything else, SQL and Go, is what production
// runs. The suites' concurrent cases only run calls with equal Nows
// together, so one shared clock row serves them.

var (
	adminOnce sync.Once
	admin     *pgxpool.Pool
	adminErr  error
)

// adminPool is a pool on the shared server for the tests' own SQL.
func adminPool(t testing.TB, srv *pgtest.Server) *pgxpool.Pool {
	t.Helper()
	adminOnce.Do(func() { admin, adminErr = pgxpool.New(context.Background(), srv.URL()) })
	if adminErr != nil {
		t.Fatal(adminErr)
	}
	return admin
}

// fakeClock makes schema's now_ms() read a clock the test sets.
func fakeClock(t testing.TB, pool *pgxpool.Pool, schema string) func(int64) {
	t.Helper()
	q := pgx.Identifier{schema}.Sanitize()
	_, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %[1]s.test_clock (now_ms bigint NOT NULL);
		INSERT INTO %[1]s.test_clock VALUES (0);
		CREATE OR REPLACE FUNCTION %[1]s.now_ms() RETURNS bigint LANGUAGE sql VOLATILE AS 'SELECT now_ms FROM %[1]s.test_clock'`, q))
	if err != nil {
		t.Fatalf("fake clock: %v", err)
	}
	return clockSetter(t, pool, schema)
}

// clockSetter sets the fake clock of schema.
func clockSetter(t testing.TB, pool *pgxpool.Pool, schema string) func(int64) {
	q := pgx.Identifier{schema}.Sanitize()
	return func(now int64) {
		if _, err := pool.Exec(ctx, "UPDATE "+q+".test_clock SET now_ms = $1", now); err != nil {
			t.Errorf("set the fake clock: %v", err)
		}
	}
}

// openDBClock opens a TimeDB store whose database clock the calls' Nows set.
func openDBClock(t *testing.T, srv *pgtest.Server) store.Store {
	t.Helper()
	return openFresh(t, srv, true)
}

func TestConformanceDBClock(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openDBClock(t, srv) })
}

// TestModelDBClock is the randomized model test, on the production path.
// (It runs once: with TimeCaller only the now argument of the same SQL
// differs, which the conformance suite covers.)
func TestModelDBClock(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.RunModel(t, func(t *testing.T) store.Store { return openDBClock(t, srv) })
}

// TestDBClockIgnoresNow: with TimeDB the store judges by the database's
// clock, whatever Now the call passes (here one an hour off).
func TestDBClockIgnoresNow(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	dbNow, ok, err := s.StoreNow(ctx)
	if err != nil || !ok {
		t.Fatalf("StoreNow: %d %v %v", dbNow, ok, err)
	}
	if d := time.Since(time.UnixMilli(dbNow)); d > time.Minute || d < -time.Minute {
		t.Fatalf("StoreNow %v is not the database server's clock (this machine's: %v)", time.UnixMilli(dbNow), time.Now())
	}
	wrong := dbNow - 3_600_000
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: wrong, Messages: []store.InsertMessage{
		{ID: "a", Relative: true, Delay: 60_000, MaxAttempts: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	r := res[0].Record
	if r.CreatedAt < dbNow || r.DueAt != r.CreatedAt+60_000 || r.State != store.StateScheduled {
		t.Fatalf("inserted %+v: want CreatedAt >= %d (the database's now) and DueAt 60 s later", *r, dbNow)
	}
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: wrong + 24*3_600_000, Max: 10})
	if err != nil || pr.Promoted != 0 || pr.NextDue != r.DueAt || pr.Now < dbNow || pr.Now > r.DueAt {
		t.Fatalf("promote with a Now a day ahead: %+v %v; want nothing promoted, judged by the database's now", pr, err)
	}
}

// testStore is a store of the suites: on a reused schema (see openFresh),
// and with a fake database clock, set to each call's Now (skipped when
// it already reads that), when set is not nil. Promotions must then
// report the database's now, which it hides, as the suites compare with
// memstore, which reports 0.
type testStore struct {
	*pgstore.Store
	t       testing.TB
	set     func(int64)
	mu      sync.Mutex
	last    int64
	release func()
	once    sync.Once
}

// ClockPerCall implements storetest.ClockPerCall.
func (c *testStore) ClockPerCall() bool { return c.set != nil }

func (c *testStore) clock(now int64) {
	if c.set == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if now != c.last {
		c.set(now)
		c.last = now
	}
}

// Close closes the store and gives its schema back for reuse.
func (c *testStore) Close() error {
	err := c.Store.Close()
	if err == nil {
		c.once.Do(c.release)
	}
	return err
}

func (c *testStore) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	c.clock(p.Now)
	return c.Store.MessageInsertMany(ctx, p)
}

func (c *testStore) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	c.clock(p.Now)
	return c.Store.MessageCancel(ctx, p)
}

func (c *testStore) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	c.clock(p.Now)
	return c.Store.MessageReschedule(ctx, p)
}

func (c *testStore) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	c.clock(p.Now)
	r, err := c.Store.MessagePromote(ctx, p)
	if err == nil && c.set != nil {
		if r.Now != p.Now {
			c.t.Errorf("promote judged by %d, want the database's now %d", r.Now, p.Now)
		}
		r.Now = 0
	}
	return r, err
}

func (c *testStore) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	c.clock(p.Now)
	return c.Store.MessageLease(ctx, p)
}

func (c *testStore) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	c.clock(p.Now)
	return c.Store.MessageAck(ctx, p)
}

func (c *testStore) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	c.clock(p.Now)
	return c.Store.MessageAckMany(ctx, p)
}

func (c *testStore) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	c.clock(p.Now)
	return c.Store.MessageNack(ctx, p)
}

func (c *testStore) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	c.clock(p.Now)
	return c.Store.MessageExtend(ctx, p)
}

func (c *testStore) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	c.clock(p.Now)
	return c.Store.LeaseExpire(ctx, p)
}

func (c *testStore) DeadReplay(ctx context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	c.clock(p.Now)
	return c.Store.DeadReplay(ctx, p)
}

func (c *testStore) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (int, error) {
	c.clock(p.Now)
	return c.Store.DedupPurge(ctx, p)
}

func (c *testStore) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	c.clock(p.Now)
	return c.Store.ScheduleUpsert(ctx, p)
}

func (c *testStore) RateTake(ctx context.Context, p *store.RateTakeParams) (int, time.Duration, error) {
	c.clock(p.Now)
	return c.Store.RateTake(ctx, p)
}
