// Package rabbitmq is the RabbitMQ delivery target: it publishes due
// messages to an exchange as persistent messages with publisher confirms.
//
// A message counts as delivered only when the broker acked it and did not
// return it: every publish is mandatory, so a message no queue is bound
// for comes back as a basic.return and fails, as does a nack (for example
// a queue at x-max-length with overflow reject-publish). Each in-flight
// batch uses its own channel in confirm mode; a lost connection or channel
// fails the unconfirmed messages of the batch (the runtime retries them)
// and the next Publish dials again.
//
// Properties: message-id = the delayq id, delivery mode persistent,
// content type application/octet-stream, the message's own headers plus
// x-delayq-topic, x-delayq-attempt and x-delayq-priority (integers).
package rabbitmq

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/internal/deliver"
)

// Config says where to publish.
type Config struct {
	// URL is the AMQP URI, amqp://user:pass@host:5672/vhost or amqps://.
	URL string
	// Exchange to publish to; "" is the default exchange, where RoutingKey
	// names the queue.
	Exchange string
	// RoutingKey of every message.
	RoutingKey string
	// TLS configures amqps:// connections (nil: system roots).
	TLS *deliver.TLSConfig
	// Timeout bounds dialling, each socket write and, when the caller's
	// context has no earlier deadline, the wait for a batch's confirms.
	// Default 10s.
	Timeout time.Duration
}

// DefaultTimeout is used when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// maxIdleChannels bounds the confirm-mode channels kept for reuse.
const maxIdleChannels = 16

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("rabbitmq: target closed")

// Target publishes to one exchange and routing key. Safe for concurrent
// use: concurrent batches use separate channels of one connection.
type Target struct {
	cfg      Config
	amqpCfg  amqp.Config
	where    string // URL without its password, for errors
	password string // scrubbed from every error text

	mu     sync.Mutex // guards conn, idle, closed; held while dialling
	conn   *amqp.Connection
	idle   []*pubChannel
	closed bool
}

var _ deliver.Target = (*Target)(nil)

// pubChannel is one channel in confirm mode with its return and close
// notifications. A Publish owns it exclusively until it is put back, so
// the returns it reads belong to its own batch.
type pubChannel struct {
	conn    *amqp.Connection
	ch      *amqp.Channel
	returns chan amqp.Return
	closes  chan *amqp.Error
	why     error // the close reason once read from closes
}

// New checks cfg, connects and, for a named exchange, checks that it
// exists. The returned Target reconnects by itself after a lost
// connection.
func New(ctx context.Context, cfg Config) (*Target, error) {
	if cfg.URL == "" {
		return nil, errors.New("rabbitmq: url is required")
	}
	uri, err := amqp.ParseURI(cfg.URL)
	if err != nil {
		// ParseURI errors do not echo the URI, but scrub anyway.
		return nil, fmt.Errorf("rabbitmq: url: %s", scrub(err.Error(), passwordOf(cfg.URL)))
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("rabbitmq: timeout must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("rabbitmq: %w", err)
	}
	if tlsCfg != nil && uri.Scheme != "amqps" {
		return nil, errors.New("rabbitmq: tls is set but url is not amqps://")
	}
	t := &Target{
		cfg:      cfg,
		where:    redact(cfg.URL),
		password: uri.Password,
		amqpCfg: amqp.Config{
			TLSClientConfig: tlsCfg,
			Dial:            dialer(cfg.Timeout),
			Properties:      amqp.Table{"connection_name": "delayq deliver"},
		},
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.dialLocked(ctx); err != nil {
		return nil, err
	}
	if cfg.Exchange != "" {
		ch, err := t.conn.Channel()
		if err != nil {
			_ = t.conn.Close()
			return nil, t.errorf("open channel: %v", err)
		}
		if err := ch.ExchangeDeclarePassive(cfg.Exchange, "", false, false, false, false, nil); err != nil {
			_ = t.conn.Close()
			return nil, t.errorf("exchange %q: %v", cfg.Exchange, err)
		}
		_ = ch.Close()
	}
	return t, nil
}

// Publish implements deliver.Target.
func (t *Target) Publish(ctx context.Context, msgs []deliver.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.cfg.Timeout)
		defer cancel()
	}
	pc, err := t.channel(ctx)
	if err != nil {
		fill(errs, 0, err)
		return errs
	}

	// A basic.return precedes the ack of the same message on the wire, and
	// the client hands it to pc.returns before it processes that ack, so
	// once every confirm is in, every return of the batch has been queued.
	// Returns are read while publishing too: the client drops one it cannot
	// hand over within 5s, which would pass an unroutable message as sent.
	returned := map[string]amqp.Return{}
	returns := pc.returns
	takeReturns := func() {
		for returns != nil {
			select {
			case r, ok := <-returns:
				if !ok {
					returns = nil
					return
				}
				returned[r.MessageId] = r
			default:
				return
			}
		}
	}

	dcs := make([]*amqp.DeferredConfirmation, len(msgs))
	for i := range msgs {
		takeReturns()
		if err := ctx.Err(); err != nil {
			fill(errs, i, t.errorf("not published: %v", err))
			break
		}
		dc, err := pc.ch.PublishWithDeferredConfirmWithContext(ctx, t.cfg.Exchange, t.cfg.RoutingKey,
			true, false, publishing(&msgs[i]))
		if err != nil {
			fill(errs, i, t.errorf("publish: %v", pc.reason(err)))
			break
		}
		dcs[i] = dc
	}

	abandoned := false
wait:
	for i, dc := range dcs {
		if dc == nil {
			continue
		}
		for {
			select {
			case <-dc.Done():
				continue wait
			case r, ok := <-returns:
				if !ok {
					returns = nil
					continue
				}
				returned[r.MessageId] = r
			case <-ctx.Done():
				abandoned = true
				for j := i; j < len(dcs); j++ {
					if dcs[j] != nil && !isDone(dcs[j]) {
						errs[j] = t.errorf("not confirmed: %v", ctx.Err())
					}
				}
				break wait
			}
		}
	}
	takeReturns()

	for i, dc := range dcs {
		if dc == nil || errs[i] != nil {
			continue
		}
		switch {
		case !dc.Acked() && pc.ch.IsClosed():
			errs[i] = t.errorf("not confirmed: %v", pc.reason(amqp.ErrClosed))
		case !dc.Acked():
			errs[i] = t.errorf("message %q nacked by the broker", msgs[i].ID)
		default:
			if r, ok := returned[msgs[i].ID]; ok {
				errs[i] = t.errorf("message %q returned unroutable from exchange %q with routing key %q: %d %s",
					msgs[i].ID, r.Exchange, r.RoutingKey, r.ReplyCode, r.ReplyText)
			}
		}
	}
	t.release(pc, abandoned)
	return errs
}

// Close closes the connection; Publish fails afterwards.
func (t *Target) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	t.closed = true
	t.idle = nil
	if t.conn == nil {
		return nil
	}
	err := t.conn.Close()
	t.conn = nil
	if err != nil && !errors.Is(err, amqp.ErrClosed) {
		return t.errorf("close: %v", err)
	}
	return nil
}

func publishing(m *deliver.Message) amqp.Publishing {
	h := make(amqp.Table, len(m.Headers)+3)
	for k, v := range m.Headers {
		h[k] = v
	}
	h["x-delayq-topic"] = m.Topic
	h["x-delayq-attempt"] = int64(m.Attempt)
	// Not AMQP's own priority field: that one is 0-9 with 9 the most
	// urgent and needs a priority queue; delayq's is 0-255, 0 first.
	h["x-delayq-priority"] = int64(m.Priority)
	return amqp.Publishing{
		Headers:      h,
		ContentType:  "application/octet-stream",
		DeliveryMode: amqp.Persistent,
		MessageId:    m.ID,
		Timestamp:    time.Now(),
		Body:         m.Payload,
	}
}

// channel returns an idle confirm-mode channel of the live connection or
// opens one, dialling first when the connection is gone.
func (t *Target) channel(ctx context.Context) (*pubChannel, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	for len(t.idle) > 0 {
		pc := t.idle[len(t.idle)-1]
		t.idle = t.idle[:len(t.idle)-1]
		if pc.conn == t.conn && !pc.ch.IsClosed() {
			return pc, nil
		}
	}
	if t.conn == nil || t.conn.IsClosed() {
		if err := t.dialLocked(ctx); err != nil {
			return nil, err
		}
	}
	ch, err := t.conn.Channel()
	if err != nil {
		return nil, t.errorf("open channel: %v", err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, t.errorf("confirm mode: %v", err)
	}
	return &pubChannel{
		conn:    t.conn,
		ch:      ch,
		returns: ch.NotifyReturn(make(chan amqp.Return, 256)),
		closes:  ch.NotifyClose(make(chan *amqp.Error, 1)),
	}, nil
}

// release keeps pc for the next batch unless it is dead or was abandoned
// with confirms or returns still due, which would otherwise be taken for
// the next batch's.
func (t *Target) release(pc *pubChannel, abandoned bool) {
	t.mu.Lock()
	keep := !abandoned && !t.closed && pc.conn == t.conn && !pc.ch.IsClosed() && len(t.idle) < maxIdleChannels
	if keep {
		t.idle = append(t.idle, pc)
	}
	t.mu.Unlock()
	if !keep && !pc.ch.IsClosed() {
		// Close waits for the broker's close-ok; do not hold the batch.
		go pc.ch.Close()
	}
}

// dialLocked connects and watches the connection so a lost one is
// dropped (with its channels) and dialled again by the next Publish.
func (t *Target) dialLocked(ctx context.Context) error {
	type result struct {
		conn *amqp.Connection
		err  error
	}
	done := make(chan result, 1)
	go func() {
		conn, err := amqp.DialConfig(t.cfg.URL, t.amqpCfg)
		done <- result{conn, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.conn != nil {
				_ = r.conn.Close()
			}
		}()
		return t.errorf("connect to %s: %v", t.where, ctx.Err())
	}
	if r.err != nil {
		return t.errorf("connect to %s: %v", t.where, r.err)
	}
	t.conn = r.conn
	t.idle = nil
	closes := r.conn.NotifyClose(make(chan *amqp.Error, 1))
	go func(conn *amqp.Connection) {
		<-closes
		t.mu.Lock()
		if t.conn == conn {
			t.conn = nil
			t.idle = nil
		}
		t.mu.Unlock()
	}(r.conn)
	return nil
}

// reason prefers the broker's channel or connection close reason (a
// 404 for a missing exchange, a lost connection) over a generic err.
// The client marks a channel closed before it hands out the reason, so a
// closed channel's reason is awaited briefly.
func (pc *pubChannel) reason(err error) error {
	if pc.why != nil {
		return pc.why
	}
	if !pc.ch.IsClosed() && !errors.Is(err, amqp.ErrClosed) {
		return err
	}
	select {
	case e, ok := <-pc.closes:
		if ok && e != nil {
			pc.why = e
			return e
		}
	case <-time.After(time.Second):
	}
	return err
}

func isDone(dc *amqp.DeferredConfirmation) bool {
	select {
	case <-dc.Done():
		return true
	default:
		return false
	}
}

func fill(errs []error, from int, err error) {
	for i := from; i < len(errs); i++ {
		errs[i] = err
	}
}

// errorf formats a "rabbitmq: " error with the password scrubbed.
func (t *Target) errorf(format string, args ...any) error {
	return errors.New(scrub("rabbitmq: "+fmt.Sprintf(format, args...), t.password))
}

func scrub(s, password string) string {
	if password == "" {
		return s
	}
	return strings.ReplaceAll(s, password, "xxxxx")
}

func passwordOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.User != nil {
		p, _ := u.User.Password()
		return p
	}
	return ""
}

func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "the broker"
	}
	return u.Redacted()
}

// dialer bounds connecting and the AMQP handshake like amqp.DefaultDial
// and also every later write, so a broker that stops reading (a resource
// alarm, a dead peer) fails the batch instead of blocking it forever.
func dialer(timeout time.Duration) func(network, addr string) (net.Conn, error) {
	return func(network, addr string) (net.Conn, error) {
		conn, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		if err := conn.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = conn.Close()
			return nil, err
		}
		return &writeTimeoutConn{Conn: conn, timeout: timeout}, nil
	}
}

type writeTimeoutConn struct {
	net.Conn
	timeout time.Duration
}

func (c *writeTimeoutConn) Write(p []byte) (int, error) {
	if err := c.Conn.SetWriteDeadline(time.Now().Add(c.timeout)); err != nil {
		return 0, err
	}
	return c.Conn.Write(p)
}
