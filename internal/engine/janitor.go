package engine

import (
	"context"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// janitorEvery is how often acked tombstones past the dedup window are
// purged. This is housekeeping, not delivery, so a plain ticker is fine.
const janitorEvery = time.Minute

func (e *Engine) runJanitor() {
	defer e.bg.Done()
	tick := time.NewTicker(janitorEvery)
	defer tick.Stop()
	for {
		select {
		case <-e.closing:
			return
		case <-tick.C:
			e.purgeDedup(context.Background())
		}
	}
}

// purgeDedup deletes acked tombstones older than the dedup window.
func (e *Engine) purgeDedup(ctx context.Context) int {
	// The store computes the cutoff (now - window) from the clock that
	// stamped AckedAt, so a server whose clock runs fast cannot shorten
	// the window for everyone.
	now, window := e.now(), e.dedup.Milliseconds()
	total := 0
	for !e.isClosing() {
		n, err := e.st.DedupPurge(ctx, &store.DedupPurgeParams{Now: now, Window: window, Max: purgeBatch})
		total += n
		if err != nil {
			e.log.Warn("purge dedup tombstones", "err", err)
			return total
		}
		if n < purgeBatch {
			break
		}
	}
	return total
}
