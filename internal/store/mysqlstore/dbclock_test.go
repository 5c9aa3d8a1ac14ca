package mysqlstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/storetest"
)

// The suites drive a logical clock through each call's Now. To run them on
// the production path (TimeDB: the SQL reads NOW() and the store never
// sends a now), the test sets the database session's clock (SET
// timestamp, which NOW() then reads) to each call's Now just before the
// call. The suites' concurrent cases only run calls with equal Nows
// together, so one clock per store serves them.

type testStore struct {
	*mysqlstore.Store
	t   testing.TB
	now atomic.Int64
}

// ClockPerCall implements storetest.ClockPerCall.
func (c *testStore) ClockPerCall() bool { return true }

func openDBClock(t *testing.T) store.Store {
	s := open(t, mysqlstore.TimeDB)
	ts := &testStore{Store: s, t: t}
	s.SetTestClock(ts.now.Load)
	return ts
}

func TestConformanceDBClock(t *testing.T) {
	storetest.Run(t, func(t *testing.T) store.Store { return openDBClock(t) })
}

// TestModelDBClock is the randomized model test against memstore, on the
// production path. (It runs once: with TimeCaller only where the now
// comes from differs, which the conformance suite covers.)
// Under -race the model test takes about 9 minutes on two cores (each
// step is a few SQL round trips through an instrumented driver); it adds
// nothing the race detector needs that the conformance suites do not
// exercise, so scripts/test.sh runs it once more without -race instead.
func TestModelDBClock(t *testing.T) {
	if raceOn {
		t.Skip("runs without -race (scripts/test.sh): 9 min under -race")
	}
	storetest.RunModel(t, func(t *testing.T) store.Store { return openDBClock(t) })
}

// TestDBClockIgnoresNow: with TimeDB the store judges by the database's
// clock, whatever Now the call passes (here one an hour off).
func TestDBClockIgnoresNow(t *testing.T) {
	s := open(t, mysqlstore.TimeDB)
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

func (c *testStore) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	c.now.Store(p.Now)
	return c.Store.MessageInsertMany(ctx, p)
}

func (c *testStore) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageCancel(ctx, p)
}

func (c *testStore) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageReschedule(ctx, p)
}

// MessagePromote must report the database's now, which it hides, as the
// suites compare with memstore, which reports 0.
func (c *testStore) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	c.now.Store(p.Now)
	r, err := c.Store.MessagePromote(ctx, p)
	if err == nil {
		c.hideNow("promote", &r.Now, p.Now)
	}
	return r, err
}

// hideNow checks that a call reported the database's now (want) and
// zeroes it, as the suites compare with memstore, which reports 0.
func (c *testStore) hideNow(what string, got *int64, want int64) {
	if *got != want {
		c.t.Errorf("%s judged by %d, want the database's now %d", what, *got, want)
	}
	*got = 0
}

func (c *testStore) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageLease(ctx, p)
}

func (c *testStore) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	c.now.Store(p.Now)
	return c.Store.MessageAck(ctx, p)
}

func (c *testStore) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	c.now.Store(p.Now)
	return c.Store.MessageAckMany(ctx, p)
}

func (c *testStore) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageNack(ctx, p)
}

func (c *testStore) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageExtend(ctx, p)
}

func (c *testStore) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.LeaseExpire(ctx, p)
}

func (c *testStore) DeadReplay(ctx context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.DeadReplay(ctx, p)
}

func (c *testStore) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (int, error) {
	c.now.Store(p.Now)
	return c.Store.DedupPurge(ctx, p)
}

func (c *testStore) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	c.now.Store(p.Now)
	return c.Store.ScheduleUpsert(ctx, p)
}

func (c *testStore) RateTake(ctx context.Context, p *store.RateTakeParams) (int, time.Duration, error) {
	c.now.Store(p.Now)
	return c.Store.RateTake(ctx, p)
}

// TestLeaseDueDBClock: the store.NextDueLeaser calls on the production
// path (the picks read the database's clock).
func TestLeaseDueDBClock(t *testing.T) {
	storetest.RunDueLeaser(t, func(t *testing.T) store.Store { return openDBClock(t) })
}

func (c *testStore) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	c.now.Store(p.Now)
	return c.Store.MessageLeaseDue(ctx, p)
}

// MessageLeaseDueNext and MessagePromoteGrace must report the database's
// now, which the wrapper hides as MessagePromote's.
func (c *testStore) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (*store.LeaseDueResult, error) {
	c.now.Store(p.Now)
	r, err := c.Store.MessageLeaseDueNext(ctx, p)
	if err == nil {
		c.hideNow("due lease", &r.Now, p.Now)
	}
	return r, err
}

func (c *testStore) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	c.now.Store(p.Now)
	r, err := c.Store.MessagePromoteGrace(ctx, p, grace)
	if err == nil {
		c.hideNow("grace promotion", &r.Now, p.Now)
	}
	return r, err
}
