package engine

import (
	"context"
	"errors"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// dueCounter is implemented by stores that can count scheduled messages
// per due-time bucket (all of ours): the dashboard's "Upcoming" chart.
type dueCounter interface {
	DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error)
}

// maxDueBuckets bounds one DueCounts call.
const maxDueBuckets = 1440

// ErrUnsupported: the store cannot answer this question.
var ErrUnsupported = errors.New("engine: not supported by this store")

// DueCounts returns how many scheduled messages of topic come due in each
// of n buckets of width bucket starting at from: what is about to land, so
// a burst is visible before it does. It reads index keys only, but its cost
// on the embedded store grows with the messages in range.
func (e *Engine) DueCounts(ctx context.Context, topic string, from time.Time, bucket time.Duration, n int) ([]int64, error) {
	if err := domain.ValidateTopic(topic); err != nil {
		return nil, err
	}
	if bucket < time.Millisecond || n < 1 || n > maxDueBuckets {
		return nil, domain.Invalid("buckets", "need a bucket of at least 1ms and 1 to %d buckets", maxDueBuckets)
	}
	dc, ok := e.st.(dueCounter)
	if !ok {
		return nil, ErrUnsupported
	}
	counts, err := dc.DueCounts(ctx, topic, from.UnixMilli(), bucket.Milliseconds(), n)
	if err != nil {
		return nil, storeErr("count due messages of", "topic "+topic, err)
	}
	return counts, nil
}
