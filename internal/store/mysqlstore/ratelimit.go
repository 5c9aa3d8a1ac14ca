package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"math"
	"time"

	"github.com/delayq/delayq/internal/store"
)

var _ store.RateLimiter = (*Store)(nil)

// RateTake implements store.RateLimiter: a token bucket per topic, in the
// database and on its clock. A clock that went back refills nothing until
// it passes the stored time.
func (s *Store) RateTake(ctx context.Context, p *store.RateTakeParams) (int, time.Duration, error) {
	var granted int
	var retry time.Duration
	err := s.txn(ctx, p.Now, func(tx *conntx, now int64) error {
		granted, retry = 0, 0
		var tok float64
		var ts int64
		q := "SELECT tokens, ts FROM " + s.t("rate_bucket") + " WHERE topic = ? FOR UPDATE"
		err := tx.QueryRowContext(ctx, q, p.Topic).Scan(&tok, &ts)
		if errors.Is(err, sql.ErrNoRows) {
			if _, err := tx.ExecContext(ctx, "INSERT IGNORE INTO "+s.t("rate_bucket")+" (topic, tokens, ts) VALUES (?, ?, ?)", p.Topic, float64(p.Burst), now); err != nil { // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
				return err
			}
			err = tx.QueryRowContext(ctx, q, p.Topic).Scan(&tok, &ts)
		}
		if err != nil {
			return err
		}
		if now > ts {
			tok = math.Min(float64(p.Burst), tok+float64(now-ts)*p.PerSecond/1000)
			ts = now
		}
		if p.N < 0 {
			tok = math.Min(float64(p.Burst), tok-float64(p.N))
		} else {
			granted = min(p.N, int(math.Floor(tok)))
			tok -= float64(granted)
		}
		if p.N > 0 && granted < p.N && p.PerSecond > 0 {
			retry = time.Duration(math.Ceil((1-tok)*1e6/p.PerSecond)) * time.Microsecond
		}
		_, err = tx.ExecContext(ctx, "UPDATE "+s.t("rate_bucket")+" SET tokens = ?, ts = ? WHERE topic = ?", tok, ts, p.Topic) // #nosec G202 -- only a table name (s.t: the prefix validated at Open) is concatenated; values are parameters
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	return granted, retry, nil
}
