package pgstore

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// RateTake implements store.RateLimiter: a token bucket per topic, in the
// database and on its clock, so a topic's limit holds across servers.
func (s *Store) RateTake(ctx context.Context, p *store.RateTakeParams) (_ int, _ time.Duration, err error) {
	if err := s.check(); err != nil {
		return 0, 0, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var granted int32
	var retryUS int64
	if err := s.pool.QueryRow(ctx, "SELECT granted, retry_us FROM "+s.fn("op_rate_take")+"($1, $2, $3, $4, $5)",
		s.nowArg(p.Now), p.Topic, p.N, p.PerSecond, p.Burst).Scan(&granted, &retryUS); err != nil {
		return 0, 0, s.fail("take rate tokens", err)
	}
	return int(granted), time.Duration(retryUS) * time.Microsecond, nil
}

var _ store.RateLimiter = (*Store)(nil)
