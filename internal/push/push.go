// Package push delivers the due messages of topics that have a push
// target: the server POSTs each message to the topic's URL and acks it on
// a 2xx answer, or nacks it (with the topic's backoff; dead letters when
// its attempts run out) on any other status, a timeout or a connection
// error.
//
// # A push is a lease
//
// A pusher is an ordinary consumer of the queue: each of its workers
// leases one message (lease = push timeout + LeaseMargin), POSTs it, then
// acks or nacks it with the lease's receipt. So a message is never pushed
// twice at once — on the embedded engine, on Redis, and with any number of
// servers, which all run pushers and share the work through the leases —
// and a server that dies mid-push leaves a lease that expires and is
// redelivered. Delivery is at least once: a receiver that answered 2xx
// after the timeout, or whose answer was lost, sees the message again.
// Receivers should dedup by the Delayq-Message-Id header.
//
// # Request
//
//	POST <url>
//	Content-Type: application/json
//	User-Agent: delayq-push/1
//	Delayq-Message-Id: order-42
//	Delayq-Attempt: 1
//	Delayq-Topic: orders.close
//	Delayq-Priority: 0
//	Delayq-Signature: t=1767225600,v1=<hex HMAC-SHA256(secret, "1767225600." + body)>
//
//	{"id":"order-42","topic":"orders.close","payload":"…","headers":{…},
//	 "attempt":1,"max_attempts":25,"priority":0,"deliver_at":"…","created_at":"…"}
//
// The signature is sent when the topic's push settings have a secret;
// receivers verify it with pushsig.Verify (or any HMAC
// library), which also rejects timestamps outside a tolerance (replays).
// Redirects are not followed (a 3xx is a failure).
//
// # Security
//
// Push URLs are set by admins on "*" (the HTTP API and the dashboard
// refuse a new push.url from an admin of some topics only) and the server
// POSTs wherever they point, including loopback and private addresses:
// whoever may set them may make the server send requests inside its
// network (SSRF). Only http and https URLs are
// accepted. Restrict the admin scope accordingly, or filter egress. What a
// receiver answers is never read back to API callers: a message's last
// error holds the status code or a fixed description of the failure, and
// the answer itself goes to the debug log only.
//
// # Concurrency
//
// Service is safe for concurrent use. It owns every goroutine it starts:
// one watch loop, and per push topic Concurrency workers; Stop ends them
// all and waits.
package push

import (
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/pushsig"
	"github.com/delayq/delayq/internal/topicwatch"
	"github.com/delayq/delayq/internal/wire"
)

// Defaults of Config.
const (
	DefaultRefresh     = 5 * time.Second
	DefaultWait        = 10 * time.Second
	DefaultLeaseMargin = 5 * time.Second
	// Defaults of a topic's push settings, when the engine answers none.
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 4
)

// Engine is what a Service needs of the engine: topics with their push
// settings (secrets included, which the HTTP client cannot answer),
// leases, acks and nacks, and its events.
type Engine interface {
	TopicSettings(ctx context.Context) ([]domain.TopicInfo, error)
	Lease(ctx context.Context, topic string, req domain.LeaseRequest) ([]*domain.Message, error)
	Ack(ctx context.Context, topic, id, receipt string) error
	Nack(ctx context.Context, topic, id, receipt string, req domain.NackRequest) (*domain.Message, error)
	// Subscribe is called by Start for EventTopicSettingsChanged, so
	// push changes made through this engine apply at once (changes made
	// through other servers apply within Refresh).
	Subscribe(s engine.Subscription) (cancel func())
}

// Config configures a Service. The zero value of each field means its default.
type Config struct {
	// Engine is leased from, acked and nacked. Required.
	Engine Engine
	// Logger for failed pushes and background errors. Default slog.Default().
	Logger *slog.Logger
	// HTTPClient sends the pushes. Default: a client on a clone of
	// http.DefaultTransport that follows no redirect. Each push is bounded
	// by the topic's push timeout.
	HTTPClient *http.Client
	// Now stamps signatures. Default time.Now.
	Now func() time.Time
	// Refresh is how often topic settings are re-read. Default 5 s.
	Refresh time.Duration
	// Wait is each worker's long-poll. Default 10 s.
	Wait time.Duration
	// LeaseMargin is added to the push timeout to make the lease, so the
	// lease outlives the push. Default 5 s.
	LeaseMargin time.Duration
	// Observer records every push's outcome and duration (metrics); nil:
	// none.
	Observer Observer
}

// Observer records finished pushes (internal/metrics implements it). It
// is called from the push workers, concurrently, and must not block.
type Observer interface {
	// ObservePush reports one POST to topic's push URL: its outcome and how
	// long it took, up to the end of reading the answer.
	ObservePush(topic string, outcome Outcome, d time.Duration)
}

// Outcome is how a push ended: delivered, or why it failed. The set is
// small and fixed (a metric label).
type Outcome string

// The outcomes of a push.
const (
	Delivered     Outcome = "delivered" // the receiver answered 2xx
	FailedStatus  Outcome = "status"    // the receiver answered another status (3xx included)
	FailedTimeout Outcome = "timeout"   // no answer within the topic's push timeout
	FailedSend    Outcome = "network"   // no answer: connection, DNS or TLS failure, or a bad URL
	Cancelled     Outcome = "cancelled" // cut short by shutdown
)

// Service runs the pushers of every topic with push settings.
type Service struct {
	cfg   Config
	q     Engine
	log   *slog.Logger
	hc    *http.Client
	ownTr *http.Transport // closed at Stop when we made it
	watch *topicwatch.Watch

	mu      sync.Mutex // guards pushers, retired, stopped
	pushers map[string]*pusher
	retired []*pusher // stopped leasing; pushes may still be in flight
	stopped bool
}

// New makes a Service; Start runs it.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil {
		return nil, errors.New("push: Config.Engine is required")
	}
	s := &Service{
		cfg:     cfg,
		q:       cfg.Engine,
		log:     cmp.Or(cfg.Logger, slog.Default()),
		hc:      cfg.HTTPClient,
		pushers: make(map[string]*pusher),
	}
	if s.hc == nil {
		s.ownTr = http.DefaultTransport.(*http.Transport).Clone()
		s.hc = &http.Client{
			Transport:     s.ownTr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if s.cfg.Now == nil {
		s.cfg.Now = time.Now
	}
	s.cfg.Refresh = cmp.Or(cfg.Refresh, DefaultRefresh)
	s.cfg.Wait = min(cmp.Or(cfg.Wait, DefaultWait), domain.MaxWait)
	s.cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, DefaultLeaseMargin)
	s.watch = topicwatch.New(s.q, s.cfg.Refresh, s.log, "push", s.sync)
	return s, nil
}

// Start starts the watch loop, which reads topic settings at once and
// then every Refresh, and when the engine reports a settings change. A
// second Start does nothing.
func (s *Service) Start() { s.watch.Start() }

// Notify makes the watch loop re-read topic settings now. It never
// blocks.
func (s *Service) Notify() { s.watch.Notify() }

// Stop stops leasing and waits for the pushes in flight to finish. When
// ctx ends first, they are cancelled and nacked ("push cancelled: server
// shutting down"; a failure like any other), and Stop waits for that and
// returns ctx's error. It is idempotent.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	wasStopped := s.stopped
	s.stopped = true
	s.mu.Unlock()
	if wasStopped {
		return nil
	}
	s.watch.Stop()
	s.mu.Lock()
	all := s.retired
	s.retired = nil
	for name, p := range s.pushers {
		all = append(all, p)
		delete(s.pushers, name)
	}
	s.mu.Unlock()
	for _, p := range all {
		p.stopLeasing()
	}
	var err error
	for _, p := range all {
		select {
		case <-p.done:
		case <-ctx.Done():
			err = ctx.Err()
			p.cancelPushes()
			<-p.done
		}
	}
	if s.ownTr != nil {
		s.ownTr.CloseIdleConnections()
	}
	return err
}

// sync starts a pusher for each push topic without one, and replaces or
// stops those whose settings changed or went. It runs on the watch loop.
func (s *Service) sync(_ context.Context, infos []domain.TopicInfo) {
	want := make(map[string]domain.PushSettings)
	for _, ti := range infos {
		if p := ti.Settings.Push; p != nil && p.URL != "" {
			c := *p
			c.Timeout = cmp.Or(c.Timeout, DefaultTimeout)
			c.Concurrency = cmp.Or(c.Concurrency, DefaultConcurrency)
			c.SecretSet = false
			want[ti.Name] = c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.retired = slices.DeleteFunc(s.retired, func(p *pusher) bool { return isDone(p.done) })
	for name, p := range s.pushers {
		if c, ok := want[name]; !ok || c != p.cfg {
			p.stopLeasing()
			s.retired = append(s.retired, p)
			delete(s.pushers, name)
			if ok {
				// The replacement starts leasing once the old pushes are
				// done, so the concurrency bound holds across the change.
				s.pushers[name] = s.startPusher(name, c, p.done)
			}
		}
	}
	for name, c := range want {
		if s.pushers[name] == nil {
			s.pushers[name] = s.startPusher(name, c, nil)
			s.log.Info("push: delivering topic", "topic", name, "url", c.URL, "concurrency", c.Concurrency)
		}
	}
}

func isDone(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pusher delivers one topic with cfg.Concurrency workers.
type pusher struct {
	s     *Service
	topic string
	cfg   domain.PushSettings

	leaseCtx     context.Context // ends leasing
	stopLeasing  context.CancelFunc
	pushCtx      context.Context // ends pushes in flight (hard stop)
	cancelPushes context.CancelFunc
	wg           sync.WaitGroup
	done         chan struct{} // closed when every worker returned
}

// startPusher starts a topic's workers; they lease only after `after` is
// closed (nil: at once). Called with s.mu held.
func (s *Service) startPusher(topic string, cfg domain.PushSettings, after <-chan struct{}) *pusher {
	p := &pusher{s: s, topic: topic, cfg: cfg, done: make(chan struct{})}
	p.leaseCtx, p.stopLeasing = context.WithCancel(context.Background())
	p.pushCtx, p.cancelPushes = context.WithCancel(context.Background())
	p.wg.Add(cfg.Concurrency)
	for range cfg.Concurrency {
		go p.work(after)
	}
	go func() {
		p.wg.Wait()
		p.cancelPushes() // releases the contexts' resources
		close(p.done)
	}()
	return p
}

// errBackoff is how long a worker waits after a failed lease.
const errBackoff = time.Second

func (p *pusher) work(after <-chan struct{}) {
	defer p.wg.Done()
	if after != nil {
		select {
		case <-after:
		case <-p.leaseCtx.Done():
			return
		}
	}
	req := domain.LeaseRequest{Max: 1, Lease: p.cfg.Timeout + p.s.cfg.LeaseMargin, Wait: p.s.cfg.Wait}
	for p.leaseCtx.Err() == nil {
		msgs, err := p.s.q.Lease(p.leaseCtx, p.topic, req)
		if err != nil {
			if p.leaseCtx.Err() != nil {
				return
			}
			p.s.log.Warn("push: lease", "topic", p.topic, "err", err)
			select {
			case <-p.leaseCtx.Done():
				return
			case <-time.After(errBackoff):
			}
			continue
		}
		for _, m := range msgs {
			p.deliver(m)
		}
	}
}

// settleTimeout bounds the ack or nack that ends a push.
const settleTimeout = 10 * time.Second

// deliver pushes one leased message and acks or nacks it.
func (p *pusher) deliver(m *domain.Message) {
	start := time.Now()
	outcome, reason, detail := p.push(m)
	if o := p.s.cfg.Observer; o != nil {
		o.ObservePush(p.topic, outcome, time.Since(start))
	}
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	if outcome == Delivered {
		if err := p.s.q.Ack(ctx, p.topic, m.ID, m.Receipt); err != nil {
			p.s.log.Warn("push: delivered, but the ack failed (it will be pushed again)", "topic", p.topic, "id", m.ID, "err", err)
		}
		return
	}
	p.s.log.Debug("push failed", "topic", p.topic, "id", m.ID, "attempt", m.Attempt, "reason", reason, "detail", detail)
	if _, err := p.s.q.Nack(ctx, p.topic, m.ID, m.Receipt, domain.NackRequest{Reason: reason}); err != nil {
		p.s.log.Warn("push: nack", "topic", p.topic, "id", m.ID, "err", err)
	}
}

// push POSTs m and returns its outcome and, unless delivered (a 2xx
// answer), the failure reason that becomes the message's last error, and
// for the debug log the details behind it.
//
// The reason never quotes the receiver: last_error is readable by consume
// tokens and read-only dashboard viewers, and a push URL may point inside
// the server's network (SSRF), so a receiver's body, reason phrase or
// non-HTTP banner would be read back through it. Only the status code
// (with Go's fixed text for it) or a fixed description of the failure is
// kept; the receiver's words go to the debug log for the operator.
func (p *pusher) push(m *domain.Message) (outcome Outcome, reason, detail string) {
	body := Body(m)
	ctx, cancel := context.WithTimeout(p.pushCtx, p.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, p.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return FailedSend, "push: invalid request for the push URL", err.Error()
	}
	h := req.Header
	h.Set("Content-Type", "application/json")
	h.Set("User-Agent", "delayq-push/1")
	h.Set(pushsig.HeaderMessageID, m.ID)
	h.Set(pushsig.HeaderAttempt, strconv.Itoa(m.Attempt))
	h.Set(pushsig.HeaderTopic, p.topic)
	h.Set(pushsig.HeaderPriority, strconv.Itoa(m.Priority))
	if p.cfg.Secret != "" {
		h.Set(pushsig.HeaderSignature, pushsig.Sign(p.cfg.Secret, p.s.cfg.Now(), body))
	}
	resp, err := p.s.hc.Do(req)
	if err != nil {
		switch {
		case p.pushCtx.Err() != nil:
			return Cancelled, "push cancelled: server shutting down", err.Error()
		case errors.Is(ctx.Err(), context.DeadlineExceeded):
			return FailedTimeout, fmt.Sprintf("push: timeout after %s", p.cfg.Timeout), err.Error()
		}
		return FailedSend, transportReason(err), printable([]byte(err.Error()), 1000)
	}
	defer resp.Body.Close()
	snippet, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // reuse the connection
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return Delivered, "", ""
	}
	reason = "push: HTTP " + strconv.Itoa(resp.StatusCode)
	if t := http.StatusText(resp.StatusCode); t != "" {
		reason += " " + t
	}
	return FailedStatus, reason, printable([]byte(resp.Status+": "+string(snippet)), 600)
}

// transportReason describes a failed request without quoting it: the
// error's text may carry the receiver's bytes (Go quotes a malformed
// answer, an SSH banner say, in the error).
func transportReason(err error) string {
	var dnsErr *net.DNSError
	var certErr *tls.CertificateVerificationError
	var recErr tls.RecordHeaderError
	switch {
	case errors.As(err, &dnsErr):
		return "push: cannot resolve the push URL's host"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "push: connection refused"
	case errors.As(err, &certErr):
		return "push: the receiver's TLS certificate is not trusted"
	case errors.As(err, &recErr):
		return "push: TLS handshake failed (the receiver does not speak TLS)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "push: the receiver closed the connection without an answer"
	}
	return "push: request failed (details in the server's debug log)"
}

// Body is the JSON body pushed for m (wire.NewPushBody).
func Body(m *domain.Message) []byte {
	out, _ := json.Marshal(wire.NewPushBody(m)) // plain data: cannot fail
	return out
}

// printable keeps the printable ASCII of b (so a receiver's answer cannot
// inject control characters into logs), cut to n bytes.
func printable(b []byte, n int) string {
	out := make([]byte, 0, min(len(b), n))
	for _, c := range b {
		if len(out) == n {
			break
		}
		switch {
		case c >= 0x20 && c < 0x7f:
			out = append(out, c)
		case c == '\n' || c == '\r' || c == '\t':
			out = append(out, ' ')
		}
	}
	return string(bytes.TrimSpace(out))
}
