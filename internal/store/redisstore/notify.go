package redisstore

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/store"
)

// publish tells every subscribed engine that topic has a message due at
// due (0: ready now; see store.NotifyDue), for the calls whose scripts do
// not publish themselves (the insert and promote scripts do: see
// "Notifications" in doc.go). One PUBLISH per call, after the call's
// scripts succeeded, carrying the earliest due time of the call:
// "topic\tdueMS".
// A failed publish is logged, not returned: the state change is already
// durable, and engines' safety sweeps find what a lost notification
// would have announced.
func (s *Store) publish(ctx context.Context, topic string, due int64) {
	msg := topic + "\t" + strconv.FormatInt(due, 10)
	s.publishFailed(ctx, topic, s.rdb.Publish(ctx, s.keys.channel(), msg).Err())
}

// publishFailed logs a failed publish, unless the caller gave up
// (cancelled its ctx) or the store is closed. A publish cut short by the
// call's time bound (Store.bound) is logged: nobody cancelled it.
func (s *Store) publishFailed(ctx context.Context, topic string, err error) {
	if err == nil || s.closed.Load() || errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	s.log.Warn("redisstore: publish notification (engines' safety sweep will cover it)", "topic", topic, "err", err)
}

// Subscribe implements store.Notifier. It blocks, calling fn for each
// notification, until ctx ends (ctx.Err()), the store closes (ErrClosed)
// or the first subscription fails (ErrUnavailable). go-redis re-subscribes
// by itself after a connection loss; notifications published meanwhile
// are lost, which the engines' safety sweep covers. fn runs on this
// goroutine, so it should not block.
func (s *Store) Subscribe(ctx context.Context, subscribed func(), fn func(topic string, dueAt int64)) error {
	if err := s.check(); err != nil {
		return err
	}
	ps := s.rdb.Subscribe(ctx, s.keys.channel())
	defer ps.Close()
	if _, err := ps.Receive(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return s.fail("subscribe", err)
	}
	if subscribed != nil {
		subscribed()
	}
	ch := ps.Channel()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.done:
			return store.ErrClosed
		case m, ok := <-ch:
			if !ok {
				return s.fail("subscribe", errors.New("subscription closed"))
			}
			topic, due, ok := parseNotification(m.Payload)
			if !ok {
				s.log.Warn("redisstore: ignoring malformed notification", "payload", m.Payload)
				continue
			}
			fn(topic, due)
		}
	}
}

func parseNotification(p string) (string, int64, bool) {
	topic, d, ok := strings.Cut(p, "\t")
	if !ok || !validTopic(topic) {
		return "", 0, false
	}
	due, err := strconv.ParseInt(d, 10, 64)
	return topic, due, err == nil
}
