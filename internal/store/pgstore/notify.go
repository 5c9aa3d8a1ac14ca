package pgstore

import (
	"context"
	"errors"
	"maps"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
)

// notify tells every subscribed server that each topic has a message due
// at its time (0: ready now): one NOTIFY per topic, "topic\tdueMS", sent
// after the operation committed, in a transaction of its own. Not in the
// operation's transaction: PostgreSQL serializes the commits of all
// notifying transactions on one lock held through their WAL flush, which
// would put every send, promotion and nack of every server in a single
// line; a transaction that only notifies writes no WAL and holds that
// lock for microseconds. (delayq_send does notify inside the caller's
// transaction, so that its message is announced exactly at commit.)
// A failed notification is logged, not returned: the state change is
// already durable, and the engines' safety sweep finds what a lost
// notification would have announced.
// notifyHorizonMS is how far ahead of the database's now a change must be
// due to go unannounced: a send, reschedule or retry due later is armed by
// the other servers' safety sweep (every 5 s re-reads each topic's next
// due time), as delayq_send does since schema version 5. The server that
// made the change arms its own timer. A notification costs a transaction
// of its own after every batch.
const notifyHorizonMS = 60_000

// notifySoon notifies topic's due time (0: ready now) unless it is
// notifyHorizonMS or more after now (both by the database's clock), or
// an earlier due time of the topic this store announced is still more
// than announceCoverMS away (covered).
func (s *Store) notifySoon(ctx context.Context, topic string, due, now int64) {
	if due != 0 && due-now >= notifyHorizonMS {
		return
	}
	if due != 0 && s.covered(topic, due, now) {
		return
	}
	s.notify(ctx, map[string]int64{topic: due})
}

// announceCoverMS: a due time announced at least this far ahead covers
// the later ones sent meanwhile. Every server armed its timer at the
// announced time or earlier, and when its timer fires it asks the
// database when the topic is next due (the woken lease's report, or a
// promotion), which finds every send committed by then. A send that
// commits after that look (it would have to take longer than this to
// commit) is released by the server that made it, whose own timer is
// armed at its due time: its promotion announces it as ready.
const announceCoverMS = 100

// maxAnnounced bounds the announced map (a store sending to very many
// topics): it is cleared when full, which only costs notifications.
const maxAnnounced = 10_000

// covered reports whether due is covered by an earlier due time of the
// topic announced before (see announceCoverMS); if not, due is recorded
// as the one to cover later ones. On a paced topic (sends due in send
// order, a few seconds ahead) that is about one notification per lead
// time instead of one per send: a transaction of its own on the
// database and a wake-up of every server's listener each.
func (s *Store) covered(topic string, due, now int64) bool {
	s.announcedMu.Lock()
	defer s.announcedMu.Unlock()
	if a, ok := s.announced[topic]; ok && a-now > announceCoverMS && a <= due {
		return true
	}
	if s.announced == nil || len(s.announced) >= maxAnnounced {
		s.announced = make(map[string]int64)
	}
	s.announced[topic] = due
	return false
}

func (s *Store) notify(ctx context.Context, due map[string]int64) {
	if len(due) == 0 {
		return
	}
	payloads := make([]string, 0, len(due))
	for topic, d := range due {
		payloads = append(payloads, topic+"\t"+strconv.FormatInt(d, 10))
	}
	_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", s.channel, payloads)
	if err == nil {
		return
	}
	s.announcedMu.Lock()
	for topic := range due {
		delete(s.announced, topic) // not announced: covers nothing
	}
	s.announcedMu.Unlock()
	if s.closed.Load() || errors.Is(ctx.Err(), context.Canceled) {
		return
	}
	s.log.Warn("pgstore: notify (engines' safety sweep will cover it)", "topics", len(due), "err", err)
}

// Notifications connection health: the listener expects some traffic
// (notifications, or the heartbeats that every subscribed store sends
// through its pool) at least every listenIdle, else it takes the
// connection for dead and reconnects. A TCP connection whose peer
// vanished (a failover, a dropped NAT entry) would otherwise wait
// silently for minutes.
const (
	heartbeatEvery = 10 * time.Second
	listenIdle     = 3 * heartbeatEvery
	reconnectMin   = 100 * time.Millisecond
	reconnectMax   = 5 * time.Second
	heartbeatBody  = "" // an empty payload: no topic
)

// Subscribe implements store.Notifier. It listens on a connection of its
// own (not from the pool) and blocks, calling fn for each notification,
// until ctx ends (ctx.Err()) or the store closes (ErrClosed). When the
// connection fails it reconnects with backoff (reconnectMin to
// reconnectMax) and calls subscribed again once it listens again, so the
// engine re-reads what it may have missed. fn runs on this goroutine, so
// it should not block. While subscribed, the store also sends the
// heartbeats, folds the topics' count rows every countFoldEvery and
// vacuums the queue tables as they need it (vacuumQueues): a subscribed
// store is a server's.
func (s *Store) Subscribe(ctx context.Context, subscribed func(), fn func(topic string, dueAt int64)) error {
	if err := s.check(); err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	hbDone := make(chan struct{})
	defer func() { <-hbDone }()
	go s.every(ctx, hbDone, heartbeatEvery, "heartbeat notification", s.heartbeat)
	foldDone := make(chan struct{})
	defer func() { <-foldDone }()
	go s.every(ctx, foldDone, countFoldEvery, "fold counts", s.foldCounts)
	vacuumDone := make(chan struct{})
	defer func() { <-vacuumDone }()
	go s.vacuumQueues(ctx, vacuumDone)

	wait := reconnectMin
	for {
		live, err := s.listen(ctx, subscribed, fn)
		if s.closed.Load() {
			return store.ErrClosed
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if live {
			wait = reconnectMin
		}
		s.log.Warn("pgstore: notifications interrupted; reconnecting", "err", err, "in", wait)
		// Jitter, so that servers cut off together do not reconnect in step.
		d := wait/2 + rand.N(wait/2+1) // #nosec G404 -- jitter, not a secret
		select {
		case <-ctx.Done():
			if s.closed.Load() {
				return store.ErrClosed
			}
			return ctx.Err()
		case <-time.After(d):
		}
		wait = min(wait*2, reconnectMax)
	}
}

// listen runs one LISTEN connection until it fails; live says whether it
// got as far as listening.
func (s *Store) listen(ctx context.Context, subscribed func(), fn func(string, int64)) (live bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := s.connectOwn(cctx, nil)
	if err == nil {
		if _, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize()); err != nil {
			_ = conn.Close(context.Background())
		}
	}
	cancel()
	if err != nil {
		return false, redactErr(err, s.connCfg.ConnString())
	}
	defer conn.Close(context.Background())
	if subscribed != nil {
		subscribed()
	}
	for {
		wctx, wcancel := context.WithTimeout(ctx, listenIdle)
		n, err := conn.WaitForNotification(wctx)
		wcancel()
		if err != nil {
			if ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				err = errors.New("no notification nor heartbeat for " + listenIdle.String())
			}
			return true, redactErr(err, s.connCfg.ConnString())
		}
		if n.Payload == heartbeatBody {
			continue
		}
		topic, due, ok := parseNotification(n.Payload)
		if !ok {
			s.log.Warn("pgstore: ignoring malformed notification", "payload", n.Payload)
			continue
		}
		fn(topic, due)
	}
}

// heartbeat sends an empty notification, so that every listener of the
// channel hears something.
func (s *Store) heartbeat(ctx context.Context) error {
	_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, $2)", s.channel, heartbeatBody)
	return err
}

// every runs fn every period, each call bounded by the store's timeout,
// until ctx ends; then it closes done. A failure is logged at debug
// level as what: the next call tries again.
func (s *Store) every(ctx context.Context, done chan<- struct{}, period time.Duration, what string, fn func(context.Context) error) {
	defer close(done)
	tick := time.NewTicker(period)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			cctx, cancel := context.WithTimeout(ctx, s.timeout)
			err := fn(cctx)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Debug("pgstore: "+what, "err", err)
			}
		}
	}
}

// connectOwn opens a connection of the store's own, outside the pool (the
// listener's, the vacuum's), with params set over the pool's runtime
// parameters.
func (s *Store) connectOwn(ctx context.Context, params map[string]string) (*pgx.Conn, error) {
	cfg := s.connCfg.Copy()
	if s.ownPool { // a pool passed in may dial its own way (a proxy, a tunnel)
		cfg.DialFunc = keepAliveDialer(cfg.ConnectTimeout)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	maps.Copy(cfg.RuntimeParams, params)
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, redactErr(err, s.connCfg.ConnString())
	}
	return conn, nil
}

// keepAliveDialer dials with short TCP keepalives, so that the kernel
// notices a dead peer of the listening connection within about 30 s.
func keepAliveDialer(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Timeout: timeout, KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: 15 * time.Second, Interval: 5 * time.Second, Count: 3}}
	return d.DialContext
}

func parseNotification(p string) (string, int64, bool) {
	topic, d, ok := strings.Cut(p, "\t")
	if !ok || topic == "" {
		return "", 0, false
	}
	due, err := strconv.ParseInt(d, 10, 64)
	return topic, due, err == nil
}
