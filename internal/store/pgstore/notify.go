package pgstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/delayq/delayq/internal/store"
)

// notify tells every subscribed server that each topic has a message due
// at its time (0: ready now, or store.NotifySettings): one NOTIFY per
// topic, "topic\tdueMS", in a transaction of its own after the change
// committed. Only topic settings and deletions still use it: the message
// operations notify inside their own transaction since schema version 8
// (the *_notify functions, op_insert with p_notify), delivered at commit
// and only for what is due within 60 s (the servers' safety sweep re-reads
// every topic's next due time every 5 s and arms the rest). A failed
// notification is logged, not returned: the change is already durable,
// and the engines' safety sweep finds what it would have announced.
func (s *Store) notify(ctx context.Context, due map[string]int64) {
	if len(due) == 0 {
		return
	}
	payloads := make([]string, 0, len(due))
	for topic, d := range due {
		payloads = append(payloads, topic+"\t"+strconv.FormatInt(d, 10))
	}
	_, err := s.pool.Exec(ctx, "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p", s.channel, payloads)
	if err == nil || s.closed.Load() || errors.Is(ctx.Err(), context.Canceled) {
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
// it should not block.
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
	go s.heartbeat(ctx, hbDone)

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
	cfg := s.connCfg.Copy()
	if s.ownPool { // a pool passed in may dial its own way (a proxy, a tunnel)
		cfg.DialFunc = keepAliveDialer(cfg.ConnectTimeout)
	}
	cctx, cancel := context.WithTimeout(ctx, s.timeout)
	conn, err := pgx.ConnectConfig(cctx, cfg)
	if err == nil {
		_, err = conn.Exec(cctx, "LISTEN "+pgx.Identifier{s.channel}.Sanitize())
	}
	cancel()
	if err != nil {
		if conn != nil {
			_ = conn.Close(context.Background())
		}
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

// heartbeat sends an empty notification every heartbeatEvery until ctx
// ends, so that every listener of the channel hears something.
func (s *Store) heartbeat(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	tick := time.NewTicker(heartbeatEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			hctx, cancel := context.WithTimeout(ctx, s.timeout)
			_, err := s.pool.Exec(hctx, "SELECT pg_notify($1, $2)", s.channel, heartbeatBody)
			cancel()
			if err != nil && ctx.Err() == nil {
				s.log.Debug("pgstore: heartbeat notification", "err", err)
			}
		}
	}
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

// announced runs sql, an operation that stages its notifications in the
// session (migrations/0008), then announce() in a transaction of its own,
// both in one round trip (a pipeline with a sync point between them), and
// hands the operation's rows to read. The staged notifications are undone
// with the operation's transaction if it rolls back, so announce() then
// sends nothing; it runs either way, so that nothing staged stays on the
// connection.
func (s *Store) announced(ctx context.Context, op, sql string, read func(pgx.Rows) error, args ...any) error {
	c, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.fail(op, err)
	}
	defer c.Release()
	conn := c.Conn()
	// Prepared once per connection (pgx keeps the descriptions), so the
	// pipeline needs no describe round trip.
	opSD, err := conn.Prepare(ctx, sql, sql)
	if err != nil {
		return s.fail(op, err)
	}
	announce := "SELECT " + s.fn("announce") + "()"
	annSD, err := conn.Prepare(ctx, announce, announce)
	if err != nil {
		return s.fail(op, err)
	}
	tm := conn.TypeMap()
	if len(args) != len(opSD.ParamOIDs) {
		return fmt.Errorf("pgstore: %s: %d arguments for %d parameters", op, len(args), len(opSD.ParamOIDs))
	}
	params := make([][]byte, len(args))
	formats := make([]int16, len(args))
	for i, a := range args {
		oid := opSD.ParamOIDs[i]
		formats[i] = tm.FormatCodeForOID(oid)
		if params[i], err = tm.Encode(oid, formats[i], a, nil); err != nil {
			return fmt.Errorf("pgstore: %s: argument %d: %w", op, i+1, err)
		}
	}
	results := make([]int16, len(opSD.Fields))
	for i, f := range opSD.Fields {
		results[i] = tm.FormatCodeForOID(f.DataTypeOID)
	}
	p := conn.PgConn().StartPipeline(ctx)
	p.SendQueryStatement(opSD, params, formats, results)
	p.SendPipelineSync()
	p.SendQueryStatement(annSD, nil, nil, []int16{pgx.BinaryFormatCode})
	if err := p.Sync(); err != nil {
		_ = p.Close() // the connection failed: err says why
		return s.fail(op, err)
	}
	opErr := s.pipelineResult(p, func(rr *pgconn.ResultReader) error {
		rows := pgx.RowsFromResultReader(tm, rr)
		defer rows.Close()
		if err := read(rows); err != nil {
			return err
		}
		rows.Close()
		return rows.Err()
	})
	annErr := s.pipelineResult(p, func(rr *pgconn.ResultReader) error {
		_, err := rr.Close()
		return err
	})
	if err := p.Close(); err != nil && opErr == nil {
		opErr = s.fail(op, err)
	}
	if opErr != nil {
		return s.readErr(op, opErr)
	}
	if annErr != nil && !s.closed.Load() && !errors.Is(ctx.Err(), context.Canceled) {
		// The change is durable; the engines' safety sweep finds what the
		// notification would have announced.
		s.log.Warn("pgstore: notify (engines' safety sweep will cover it)", "op", op, "err", annErr)
	}
	return nil
}

// pipelineResult reads one statement's result and the sync point after
// it: the statement's error, if any, else read's.
func (s *Store) pipelineResult(p *pgconn.Pipeline, read func(*pgconn.ResultReader) error) error {
	var err error
	for {
		res, rerr := p.GetResults()
		if rerr != nil {
			if err == nil {
				err = rerr
			}
			var pe *pgconn.PgError
			if !errors.As(rerr, &pe) {
				return err // the connection failed: nothing more to read
			}
			continue
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			if e := read(r); e != nil && err == nil {
				err = e
			}
		case *pgconn.PipelineSync:
			return err
		case nil:
			if err == nil {
				err = errors.New("pipeline ended early")
			}
			return err
		}
	}
}
