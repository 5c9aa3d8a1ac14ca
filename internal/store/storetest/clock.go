package storetest

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// WithClock lets the suites drive a store that judges time by its own
// clock (Redis TIME: store.Clock) rather than each call's Now: before
// every call that passes a Now, set(now) moves the store's clock there.
// The store then runs its production time path — reading its own clock —
// and the suites' exact-value assertions, written against their logical
// Now, still hold. Calls that pass no Now read whatever was set last.
// Concurrent cases pass the same Now from every goroutine, so one clock
// serves them.
//
//	storetest.Run(t, func(t *testing.T) store.Store {
//		return storetest.WithClock(open(t), srv.SetTime)
//	})
func WithClock(s store.Store, set func(now int64)) store.Store {
	c := clocked{Store: s, set: set}
	if rl, ok := s.(store.RateLimiter); ok {
		return clockedLimiter{c, rl}
	}
	return c
}

type clocked struct {
	store.Store
	set func(now int64)
}

func (c clocked) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	c.set(p.Now)
	return c.Store.MessageInsertMany(ctx, p)
}

func (c clocked) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	c.set(p.Now)
	return c.Store.MessageCancel(ctx, p)
}

func (c clocked) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	c.set(p.Now)
	return c.Store.MessageReschedule(ctx, p)
}

func (c clocked) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	c.set(p.Now)
	return c.Store.MessagePromote(ctx, p)
}

func (c clocked) MessageLease(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	c.set(p.Now)
	return c.Store.MessageLease(ctx, p)
}

func (c clocked) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	c.set(p.Now)
	return c.Store.MessageAck(ctx, p)
}

func (c clocked) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	c.set(p.Now)
	return c.Store.MessageAckMany(ctx, p)
}

func (c clocked) MessageNack(ctx context.Context, p *store.MessageNackParams) (*store.Record, error) {
	c.set(p.Now)
	return c.Store.MessageNack(ctx, p)
}

func (c clocked) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	c.set(p.Now)
	return c.Store.MessageExtend(ctx, p)
}

func (c clocked) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	c.set(p.Now)
	return c.Store.LeaseExpire(ctx, p)
}

func (c clocked) DeadReplay(ctx context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	c.set(p.Now)
	return c.Store.DeadReplay(ctx, p)
}

func (c clocked) DedupPurge(ctx context.Context, p *store.DedupPurgeParams) (int, error) {
	c.set(p.Now)
	return c.Store.DedupPurge(ctx, p)
}

func (c clocked) ScheduleUpsert(ctx context.Context, p *store.ScheduleUpsertParams) (*store.Schedule, error) {
	c.set(p.Now)
	return c.Store.ScheduleUpsert(ctx, p)
}

type clockedLimiter struct {
	clocked
	rl store.RateLimiter
}

func (c clockedLimiter) RateTake(ctx context.Context, p *store.RateTakeParams) (int, time.Duration, error) {
	c.set(p.Now)
	return c.rl.RateTake(ctx, p)
}

// ClockPerCall is implemented by a test's store whose own clock the test
// moves to each call's Now and checks (the database clocks of PostgreSQL
// and MySQL): calls with different Nows at once break that, so the cases
// whose time moves on skip a store that answers true.
type ClockPerCall interface {
	ClockPerCall() bool
}
