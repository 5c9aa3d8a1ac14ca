// Package topicwatch runs the loop that keeps per-topic background
// workers (push, broker delivery) in step with the topics' settings: it
// reads every topic at start, every Refresh (settings changed through
// other servers sharing the store), and at once when this engine reports
// a settings change.
package topicwatch

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// Source is what a Watch reads: topics with their settings (secrets
// included; counts are not needed) and the engine's events.
type Source interface {
	TopicSettings(ctx context.Context) ([]domain.TopicInfo, error)
	Subscribe(s engine.Subscription) (cancel func())
}

// Watch calls Sync with every topic, again and again, until Stop.
type Watch struct {
	src     Source
	every   time.Duration
	log     *slog.Logger
	what    string
	sync    func(ctx context.Context, topics []domain.TopicInfo)
	notify  chan struct{}
	mu      sync.Mutex
	started bool
	stopped bool
	cancel  context.CancelFunc
	unsub   func()
	done    chan struct{}
}

// New makes a Watch; what prefixes its log lines ("push"). sync runs on
// the watch's goroutine only, never concurrently with itself.
func New(src Source, every time.Duration, log *slog.Logger, what string, sync func(ctx context.Context, topics []domain.TopicInfo)) *Watch {
	return &Watch{src: src, every: every, log: log, what: what, sync: sync, notify: make(chan struct{}, 1)}
}

// Start starts the loop; a second Start, or one after Stop, does nothing.
func (w *Watch) Start() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.started || w.stopped {
		return
	}
	w.started = true
	ctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.done = make(chan struct{})
	w.unsub = w.src.Subscribe(engine.Subscription{
		Kinds:  engine.Mask(engine.EventTopicSettingsChanged),
		Handle: func(engine.Event) { w.Notify() },
	})
	go w.loop(ctx)
}

// Notify makes the loop re-read topic settings now. It never blocks.
func (w *Watch) Notify() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

// Stop ends the loop and waits for it (a Sync in progress finishes
// first, with its context cancelled). It reports whether the loop had
// been running; it is idempotent.
func (w *Watch) Stop() bool {
	w.mu.Lock()
	w.stopped = true
	cancel, done, unsub := w.cancel, w.done, w.unsub
	w.cancel = nil
	w.mu.Unlock()
	if cancel == nil {
		return false
	}
	unsub()
	cancel()
	<-done
	return true
}

func (w *Watch) loop(ctx context.Context) {
	defer close(w.done)
	tick := time.NewTicker(w.every)
	defer tick.Stop()
	for {
		infos, err := w.src.TopicSettings(ctx)
		switch {
		case err == nil:
			w.sync(ctx, infos)
		case ctx.Err() == nil:
			// Keep the workers as they are.
			w.log.Warn(w.what+": read topic settings", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-w.notify:
		}
	}
}
