package engine

import (
	"context"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/store"
)

// Shared stores (Redis) tell every engine about sends made by others. A
// notification can be lost while the subscription reconnects, so a slow
// sweep re-arms every topic from the store as a safety net. A store of
// one engine (Pebble) has no notifications to lose, but the sweep runs
// there too: whatever wake-up a bug might lose (D7 in docs/reliability.md
// lost one), a due message then waits at most sweepEvery, not for a timer
// hours away.
const (
	sweepEvery     = 5 * time.Second
	resubscribeMin = 100 * time.Millisecond
	resubscribeMax = 5 * time.Second
)

// startNotifier subscribes and waits (up to firstSubscribeWait) for the
// subscription to be live, so a send made on another server right after
// Open returns is not missed until the safety sweep.
func (e *Engine) startNotifier(n store.Notifier) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-e.closing; cancel() }()
	first := make(chan struct{})
	var once sync.Once
	e.bg.Add(2)
	go e.listen(ctx, n, func() { once.Do(func() { close(first) }) })
	go e.runSweep(ctx)
	select {
	case <-first:
	case <-time.After(firstSubscribeWait):
		e.log.Warn("store notifications not live yet; relying on the safety sweep until they are")
	}
}

const firstSubscribeWait = 2 * time.Second

// listen keeps a subscription open, re-subscribing with backoff. Each time
// it is live again it re-arms every topic from the store: notifications
// sent while it was down are lost, the store's state is not.
func (e *Engine) listen(ctx context.Context, n store.Notifier, live func()) {
	defer e.bg.Done()
	wait := resubscribeMin
	for ctx.Err() == nil {
		err := n.Subscribe(ctx, func() {
			wait = resubscribeMin
			if err := e.recover(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("re-arm after subscribing", "err", err)
			}
			live()
		}, e.onNotify)
		if ctx.Err() != nil {
			return
		}
		e.log.Warn("store notifications interrupted; re-subscribing", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, resubscribeMax)
	}
}

// onNotify wakes the topic's long-polls when messages are ready (dueAt 0:
// the store says so, whatever our clock reads) or arms its promotion at
// dueAt, an instant of the store's clock.
func (e *Engine) onNotify(topic string, dueAt int64) {
	if dueAt == store.NotifySettings {
		e.reloadSettings(topic)
		return
	}
	t := e.topic(topic)
	if dueAt <= e.storeNow() {
		t.notify()
	}
	if dueAt > 0 {
		e.dispatcher.armPromote(t, dueAt)
	}
}

// startSweep runs the safety sweep until Close.
func (e *Engine) startSweep() {
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-e.closing; cancel() }()
	e.bg.Add(1)
	go e.runSweep(ctx)
}

// runSweep re-arms every topic from the store every e.sweep.
func (e *Engine) runSweep(ctx context.Context) {
	defer e.bg.Done()
	tick := time.NewTicker(e.sweep)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if err := e.syncClock(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("read the store's clock", "err", err)
			}
			if err := e.recover(ctx); err != nil && ctx.Err() == nil {
				e.log.Warn("safety sweep", "err", err)
			}
			e.gcTopics()
		}
	}
}

// reloadSettings re-reads a topic's settings that another server changed
// (a pause, a resume), off the notification goroutine. A topic with no
// state here reads them when next used.
func (e *Engine) reloadSettings(topic string) {
	t := e.lookup(topic)
	if t == nil {
		return
	}
	epoch := e.settingsEpoch.Load()
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		ctx, cancel := context.WithTimeout(context.Background(), sweepEvery)
		defer cancel()
		rec, err := e.st.TopicGet(ctx, topic)
		if err != nil {
			return // the safety sweep reads them again
		}
		e.refreshSettings(t, rec.Settings, epoch)
	}()
}
