package natsjs

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delayq/delayq/internal/deliver"
)

// Config says where to publish.
type Config struct {
	// URL of the server(s), nats://host:4222 (comma-separated for several;
	// tls:// or a TLS setting for TLS).
	URL string
	// Subject every message is published to; a JetStream stream must
	// capture it.
	Subject string
	// User and Password, or Token, authenticate (all optional).
	User, Password, Token string
	// TLS configures the connection (nil: plain unless the URL says tls://).
	TLS *deliver.TLSConfig
	// Timeout bounds connecting, each publish's wait for its PubAck and,
	// when the caller's context has no earlier deadline, the whole batch.
	// Default 10s.
	Timeout time.Duration
}

// DefaultTimeout is used when Config.Timeout is zero.
const DefaultTimeout = 10 * time.Second

// Header names carried on every message besides Nats-Msg-Id.
const (
	HeaderTopic    = "Delayq-Topic"
	HeaderAttempt  = "Delayq-Attempt"
	HeaderPriority = "Delayq-Priority"
)

// ErrClosed is returned by Publish after Close.
var ErrClosed = errors.New("natsjs: target closed")

// Target publishes to one subject. Safe for concurrent use: the NATS
// connection and the JetStream async publisher are.
type Target struct {
	cfg     Config
	nc      *nats.Conn
	js      jetstream.JetStream
	secrets []string // scrubbed from every error text
}

var _ deliver.Target = (*Target)(nil)

// New checks cfg and connects. The connection reconnects by itself;
// while it is down, publishes fail at once instead of being buffered.
func New(ctx context.Context, cfg Config) (*Target, error) {
	if cfg.URL == "" {
		return nil, errors.New("natsjs: url is required")
	}
	if cfg.Subject == "" {
		return nil, errors.New("natsjs: subject is required")
	}
	if strings.ContainsAny(cfg.Subject, "*> \t\r\n") || strings.HasPrefix(cfg.Subject, ".") ||
		strings.HasSuffix(cfg.Subject, ".") || strings.Contains(cfg.Subject, "..") {
		return nil, fmt.Errorf("natsjs: subject %q is not a valid subject to publish to (no wildcards, spaces or empty tokens)", cfg.Subject)
	}
	if cfg.Token != "" && (cfg.User != "" || cfg.Password != "") {
		return nil, errors.New("natsjs: token and user/password are exclusive")
	}
	if cfg.Timeout < 0 {
		return nil, errors.New("natsjs: timeout must not be negative")
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	t := &Target{cfg: cfg}
	for _, s := range append([]string{cfg.Password, cfg.Token}, urlSecrets(cfg.URL)...) {
		if s != "" {
			t.secrets = append(t.secrets, s)
		}
	}
	tlsCfg, err := cfg.TLS.Config()
	if err != nil {
		return nil, fmt.Errorf("natsjs: %w", err)
	}
	opts := []nats.Option{
		nats.Name("delayq deliver"),
		nats.Timeout(cfg.Timeout),
		nats.MaxReconnects(-1),
		// Fail publishes during an outage rather than buffer them: the
		// runtime retries with the topic's backoff.
		nats.ReconnectBufSize(-1),
	}
	if cfg.User != "" || cfg.Password != "" {
		opts = append(opts, nats.UserInfo(cfg.User, cfg.Password))
	}
	if cfg.Token != "" {
		opts = append(opts, nats.Token(cfg.Token))
	}
	if tlsCfg != nil {
		opts = append(opts, nats.Secure(tlsCfg))
	}

	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, err := nats.Connect(cfg.URL, opts...)
		done <- result{nc, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		go func() {
			if r := <-done; r.nc != nil {
				r.nc.Close()
			}
		}()
		return nil, t.errorf("connect to %s: %v", redact(cfg.URL), ctx.Err())
	}
	if r.err != nil {
		return nil, t.errorf("connect to %s: %v", redact(cfg.URL), r.err)
	}
	js, err := jetstream.New(r.nc,
		jetstream.WithPublishAsyncTimeout(cfg.Timeout),
		jetstream.WithPublishAsyncMaxPending(4096))
	if err != nil {
		r.nc.Close()
		return nil, t.errorf("jetstream: %v", err)
	}
	t.nc, t.js = r.nc, js
	return t, nil
}

// Publish implements deliver.Target: every message is sent before any
// PubAck is awaited.
func (t *Target) Publish(ctx context.Context, msgs []deliver.Message) []error {
	errs := make([]error, len(msgs))
	if len(msgs) == 0 {
		return errs
	}
	if t.nc.IsClosed() {
		fill(errs, 0, ErrClosed)
		return errs
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.cfg.Timeout)
		defer cancel()
	}
	stall := t.cfg.Timeout
	if d, ok := ctx.Deadline(); ok {
		stall = max(time.Until(d), time.Millisecond)
	}
	futures := make([]jetstream.PubAckFuture, len(msgs))
	for i := range msgs {
		f, err := t.js.PublishMsgAsync(t.message(&msgs[i]), jetstream.WithStallWait(stall))
		if err != nil {
			errs[i] = t.publishError(msgs[i].ID, err)
			continue
		}
		futures[i] = f
	}
	for i, f := range futures {
		if f == nil {
			continue
		}
		select {
		case <-f.Ok():
			// A duplicate ack means the stream already holds this id
			// (an earlier attempt landed): delivered all the same.
		case err := <-f.Err():
			errs[i] = t.publishError(msgs[i].ID, err)
		case <-ctx.Done():
			errs[i] = t.errorf("message %q not acknowledged: %v", msgs[i].ID, ctx.Err())
		}
	}
	return errs
}

// Close drains nothing: unacknowledged publishes have already failed or
// will be retried by the caller.
func (t *Target) Close() error {
	t.nc.Close()
	return nil
}

func (t *Target) message(m *deliver.Message) *nats.Msg {
	h := make(nats.Header, len(m.Headers)+4)
	for k, v := range m.Headers {
		// Nats-* headers steer JetStream (dedup id, expected stream,
		// TTL, schedules); a user's header must not change how the
		// message is stored.
		if strings.HasPrefix(strings.ToLower(k), "nats-") {
			continue
		}
		h[k] = []string{v}
	}
	h[jetstream.MsgIDHeader] = []string{m.ID}
	h[HeaderTopic] = []string{m.Topic}
	h[HeaderAttempt] = []string{strconv.Itoa(m.Attempt)}
	h[HeaderPriority] = []string{strconv.Itoa(m.Priority)}
	return &nats.Msg{Subject: t.cfg.Subject, Header: h, Data: m.Payload}
}

func (t *Target) publishError(id string, err error) error {
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse), errors.Is(err, nats.ErrNoResponders):
		return t.errorf("message %q: no JetStream stream captures subject %q (or it is unavailable)", id, t.cfg.Subject)
	case errors.Is(err, nats.ErrConnectionClosed):
		return ErrClosed
	case errors.Is(err, nats.ErrReconnectBufExceeded):
		// Publishes are not buffered while the connection is down.
		return t.errorf("message %q: not connected to %s (reconnecting)", id, redact(t.cfg.URL))
	}
	return t.errorf("message %q: %v", id, err)
}

func fill(errs []error, from int, err error) {
	for i := from; i < len(errs); i++ {
		errs[i] = err
	}
}

// errorf formats a "natsjs: " error with passwords and tokens scrubbed.
func (t *Target) errorf(format string, args ...any) error {
	s := "natsjs: " + fmt.Sprintf(format, args...)
	for _, secret := range t.secrets {
		s = strings.ReplaceAll(s, secret, "xxxxx")
	}
	return errors.New(s)
}

// urlSecrets are the passwords (or tokens) written into the URLs.
func urlSecrets(raw string) []string {
	var out []string
	for _, one := range strings.Split(raw, ",") {
		if u, err := url.Parse(strings.TrimSpace(one)); err == nil && u.User != nil {
			if p, ok := u.User.Password(); ok {
				out = append(out, p)
			} else {
				out = append(out, u.User.Username())
			}
		}
	}
	return out
}

func redact(raw string) string {
	parts := strings.Split(raw, ",")
	for i, one := range parts {
		u, err := url.Parse(strings.TrimSpace(one))
		if err != nil {
			parts[i] = "?"
			continue
		}
		if u.User != nil {
			if _, ok := u.User.Password(); !ok {
				u.User = url.User("xxxxx") // a bare token
			}
		}
		parts[i] = u.Redacted()
	}
	return strings.Join(parts, ",")
}
