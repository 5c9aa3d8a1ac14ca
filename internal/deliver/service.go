package deliver

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/topicwatch"
)

// Defaults of Config.
const (
	DefaultRefresh     = 5 * time.Second
	DefaultWait        = 10 * time.Second
	DefaultLeaseMargin = 5 * time.Second
	// DefaultRebuildBackoff is how long a topic whose target could not
	// be built waits before the next try.
	DefaultRebuildBackoff = 5 * time.Second
)

// Engine is what a Service needs of the engine: topics with their
// deliver settings (credentials included), leases, acks and nacks, and
// its events.
type Engine interface {
	TopicSettings(ctx context.Context) ([]domain.TopicInfo, error)
	Lease(ctx context.Context, topic string, req domain.LeaseRequest) ([]*domain.Message, error)
	AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error)
	Nack(ctx context.Context, topic, id, receipt string, req domain.NackRequest) (*domain.Message, error)
	Subscribe(s engine.Subscription) (cancel func())
}

// Builder makes the Target of a topic's deliver settings
// (internal/deliver/targets.New).
type Builder func(ctx context.Context, topic string, s domain.DeliverSettings) (Target, error)

// Observer records publishes (internal/metrics implements it). Called
// from the topics' loops, concurrently; it must not block.
type Observer interface {
	// ObserveDeliver reports one publish of n messages to a target of
	// kind ("kafka"…): how many were confirmed, and how long the
	// publish took up to the last confirmation or failure.
	ObserveDeliver(topic, kind string, confirmed, failed int, d time.Duration)
	// DeliverInFlight adds delta to the messages being published.
	DeliverInFlight(topic, kind string, delta int)
}

// Config configures a Service. The zero value of each field means its default.
type Config struct {
	// Engine is leased from, acked and nacked. Required.
	Engine Engine
	// Build makes targets. Required.
	Build Builder
	// Logger for failed publishes and background errors. Default slog.Default().
	Logger *slog.Logger
	// Refresh is how often topic settings are re-read. Default 5 s.
	Refresh time.Duration
	// Wait is each loop's long-poll. Default 10 s.
	Wait time.Duration
	// LeaseMargin is added to the deliver timeout to make the lease, so
	// the lease outlives the publish and its ack. Default 5 s.
	LeaseMargin time.Duration
	// RebuildBackoff: see DefaultRebuildBackoff.
	RebuildBackoff time.Duration
	// Observer records publishes; nil: none.
	Observer Observer
}

// Service runs one delivery loop per topic with deliver settings.
type Service struct {
	cfg   Config
	log   *slog.Logger
	watch *topicwatch.Watch

	mu      sync.Mutex // guards loops, retired, stopped
	loops   map[string]*loop
	retired []*loop // stopped leasing; publishes may still be in flight
	stopped bool
}

// New makes a Service; Start runs it.
func New(cfg Config) (*Service, error) {
	if cfg.Engine == nil || cfg.Build == nil {
		return nil, errors.New("deliver: Config.Engine and Config.Build are required")
	}
	s := &Service{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), loops: make(map[string]*loop)}
	s.cfg.Refresh = cmp.Or(cfg.Refresh, DefaultRefresh)
	s.cfg.Wait = min(cmp.Or(cfg.Wait, DefaultWait), domain.MaxWait)
	s.cfg.LeaseMargin = cmp.Or(cfg.LeaseMargin, DefaultLeaseMargin)
	s.cfg.RebuildBackoff = cmp.Or(cfg.RebuildBackoff, DefaultRebuildBackoff)
	s.watch = topicwatch.New(cfg.Engine, s.cfg.Refresh, s.log, "deliver", s.sync)
	return s, nil
}

// Start starts watching topic settings. A second Start does nothing.
func (s *Service) Start() { s.watch.Start() }

// Notify makes the Service re-read topic settings now. It never blocks.
func (s *Service) Notify() { s.watch.Notify() }

// Stop stops leasing and waits for the publishes in flight to finish and
// be acked or nacked. When ctx ends first, they are cancelled (and so
// nacked) and Stop returns ctx's error after that. Targets are closed.
// It is idempotent.
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
	for name, l := range s.loops {
		all = append(all, l)
		delete(s.loops, name)
	}
	s.mu.Unlock()
	for _, l := range all {
		l.stopLeasing()
	}
	var err error
	for _, l := range all {
		select {
		case <-l.done:
		case <-ctx.Done():
			err = ctx.Err()
			l.cancelPublish()
			<-l.done
		}
	}
	return err
}

// Kinds answers the target kind of each topic this server delivers
// (for the dashboard).
func (s *Service) Kinds() map[string]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]string, len(s.loops))
	for name, l := range s.loops {
		out[name] = l.cfg.Kind()
	}
	return out
}

// sync starts a loop for each deliver topic without one, and replaces or
// stops those whose settings changed or went.
func (s *Service) sync(_ context.Context, infos []domain.TopicInfo) {
	want := make(map[string]domain.DeliverSettings)
	for _, ti := range infos {
		if d := ti.Settings.Deliver; d != nil && d.Kind() != "" {
			c := *d.Clone()
			c.Timeout = cmp.Or(c.Timeout, domain.DefaultDeliverTimeout)
			c.MaxInFlight = min(cmp.Or(c.MaxInFlight, domain.DefaultDeliverMaxInFlight), domain.MaxBatch)
			want[ti.Name] = c
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return
	}
	s.retired = slices.DeleteFunc(s.retired, func(l *loop) bool { return isDone(l.done) })
	for name, l := range s.loops {
		if c, ok := want[name]; !ok || !reflect.DeepEqual(c, l.cfg) {
			l.stopLeasing()
			s.retired = append(s.retired, l)
			delete(s.loops, name)
			if ok {
				// The new loop starts once the old batches are settled,
				// so the in-flight bound holds across the change.
				s.loops[name] = s.startLoop(name, c, l.done)
			} else {
				s.log.Info("deliver: topic no longer delivered", "topic", name)
			}
		}
	}
	for name, c := range want {
		if s.loops[name] == nil {
			s.loops[name] = s.startLoop(name, c, nil)
			// Endpoint is redacted: no credentials in logs.
			s.log.Info("deliver: delivering topic", "topic", name, "target", c.Endpoint(), "max_in_flight", c.MaxInFlight)
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

// loop delivers one topic with pipelineDepth lanes, each leasing a
// batch, publishing it and settling it before its next lease; while one
// batch awaits its confirmations the others are leased and published.
// The lanes' batch sizes add up to MaxInFlight, which bounds what is in
// flight however the broker behaves, and a topic's stalled broker stalls
// only its own loop.
type loop struct {
	s     *Service
	topic string
	cfg   domain.DeliverSettings
	kind  string

	mu sync.Mutex // guards pauseUntil, failing
	// pauseUntil holds off the next lease after a batch of which nothing
	// was confirmed.
	pauseUntil time.Time
	// failing is set after a batch of which nothing was confirmed, so a
	// down broker is logged once at Warn, then at Debug, until it
	// recovers.
	failing bool
	batches sync.WaitGroup // the lanes

	leaseCtx      context.Context // ends leasing
	stopLeasing   context.CancelFunc
	pubCtx        context.Context // ends a publish in flight (hard stop)
	cancelPublish context.CancelFunc
	done          chan struct{}
}

// pipelineDepth is how many batches of one topic may be leased and
// await confirms at once (the loop's lanes). One batch at a time caps a
// topic at batch/(lease + publish + ack); overlapping batches keep the
// store and the broker busy while confirms travel back. Each lane's
// batch is about MaxInFlight/pipelineDepth messages, so the bound stays
// MaxInFlight in total.
const pipelineDepth = 4

func (s *Service) startLoop(topic string, cfg domain.DeliverSettings, after <-chan struct{}) *loop {
	l := &loop{s: s, topic: topic, cfg: cfg, kind: cfg.Kind(), done: make(chan struct{})}
	l.leaseCtx, l.stopLeasing = context.WithCancel(context.Background())
	l.pubCtx, l.cancelPublish = context.WithCancel(context.Background())
	go l.run(after)
	return l
}

// errBackoff is how long a loop waits after a failed lease, or after a
// batch of which nothing was confirmed (a down broker is not hammered
// with every ready message in turn).
const errBackoff = time.Second

func (l *loop) sleep(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-l.leaseCtx.Done():
		return false
	case <-t.C:
		return true
	}
}

func (l *loop) run(after <-chan struct{}) {
	defer close(l.done)
	defer l.cancelPublish()
	if after != nil {
		select {
		case <-after:
		case <-l.leaseCtx.Done():
			return
		}
	}
	var target Target
	defer func() {
		if target != nil {
			if err := target.Close(); err != nil {
				l.s.log.Debug("deliver: close target", "topic", l.topic, "err", err)
			}
		}
	}()
	// Runs first: the target is closed only once every lane has settled
	// its batch.
	defer l.batches.Wait()
	for target == nil {
		t, err := l.s.cfg.Build(l.leaseCtx, l.topic, l.cfg)
		if err == nil {
			target = t
			break
		}
		if l.leaseCtx.Err() != nil {
			return
		}
		l.s.log.Warn("deliver: cannot set up the target; messages wait", "topic", l.topic, "target", l.cfg.Endpoint(), "err", err)
		if !l.sleep(l.s.cfg.RebuildBackoff) {
			return
		}
	}
	// Lane sizes add up to MaxInFlight: the bound holds in total.
	lanes := min(pipelineDepth, l.cfg.MaxInFlight)
	for i := range lanes {
		size := l.cfg.MaxInFlight / lanes
		if i < l.cfg.MaxInFlight%lanes {
			size++
		}
		l.batches.Add(1)
		go func() {
			defer l.batches.Done()
			l.lane(target, size)
		}()
	}
}

// lane leases a batch of at most size, publishes it and settles it, again,
// until leasing stops. The loop's lanes run side by side, so leases (a
// durable write each) and publishes overlap.
func (l *loop) lane(target Target, size int) {
	req := domain.LeaseRequest{Max: size, Lease: l.cfg.Timeout + l.s.cfg.LeaseMargin, Wait: l.s.cfg.Wait}
	for l.leaseCtx.Err() == nil {
		if !l.waitPause() {
			return
		}
		msgs, err := l.s.cfg.Engine.Lease(l.leaseCtx, l.topic, req)
		if err != nil {
			if l.leaseCtx.Err() != nil {
				return
			}
			l.s.log.Warn("deliver: lease", "topic", l.topic, "err", err)
			if !l.sleep(errBackoff) {
				return
			}
			continue
		}
		if len(msgs) == 0 {
			continue
		}
		if confirmed := l.deliver(target, msgs); confirmed == 0 {
			l.mu.Lock()
			l.pauseUntil = time.Now().Add(errBackoff)
			l.mu.Unlock()
		}
	}
}

// waitPause waits out a pause after a batch of which nothing was
// confirmed; false when leasing stopped.
func (l *loop) waitPause() bool {
	for {
		l.mu.Lock()
		pause := time.Until(l.pauseUntil)
		l.mu.Unlock()
		if pause <= 0 {
			return true
		}
		if !l.sleep(pause) {
			return false
		}
	}
}

// settleTimeout bounds the acks and nacks that end a publish.
const settleTimeout = 10 * time.Second

// deliver publishes one leased batch and acks what the broker confirmed,
// nacks the rest. It returns how many were confirmed.
func (l *loop) deliver(t Target, msgs []*domain.Message) int {
	batch := make([]Message, len(msgs))
	for i, m := range msgs {
		batch[i] = Message{Topic: l.topic, ID: m.ID, Payload: m.Payload, Headers: m.Headers, Attempt: m.Attempt, Priority: m.Priority, DueAt: m.DeliverAt}
	}
	obs := l.s.cfg.Observer
	if obs != nil {
		obs.DeliverInFlight(l.topic, l.kind, len(msgs))
		defer obs.DeliverInFlight(l.topic, l.kind, -len(msgs))
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(l.pubCtx, l.cfg.Timeout)
	errs := l.publish(ctx, t, batch)
	timedOut := errors.Is(ctx.Err(), context.DeadlineExceeded)
	cancel()
	var acks []domain.AckRequest
	var failed []int
	for i, m := range msgs {
		if errs[i] == nil {
			acks = append(acks, domain.AckRequest{ID: m.ID, Receipt: m.Receipt})
		} else {
			failed = append(failed, i)
		}
	}
	if obs != nil {
		obs.ObserveDeliver(l.topic, l.kind, len(acks), len(failed), time.Since(start))
	}
	sctx, scancel := context.WithTimeout(context.Background(), settleTimeout)
	defer scancel()
	if len(acks) > 0 {
		res, err := l.s.cfg.Engine.AckBatch(sctx, l.topic, acks)
		if err != nil {
			l.s.log.Warn("deliver: published, but the ack failed (it will be published again)", "topic", l.topic, "n", len(acks), "err", err)
		}
		for i, e := range res {
			if e != nil {
				l.s.log.Warn("deliver: published, but the ack failed (it will be published again)", "topic", l.topic, "id", acks[i].ID, "err", e)
			}
		}
	}
	if len(failed) > 0 {
		reason := l.reason(timedOut)
		// The broker's error may name hosts; it goes to the log only,
		// never to last_error, which consume tokens can read.
		level := slog.LevelWarn
		l.mu.Lock()
		if l.failing {
			level = slog.LevelDebug
		}
		l.mu.Unlock()
		l.s.log.Log(context.Background(), level, "deliver: publish failed (retried with the topic's backoff)", "topic", l.topic, "target", l.kind, "failed", len(failed), "of", len(msgs), "err", errs[failed[0]])
		for _, i := range failed {
			m := msgs[i]
			if _, err := l.s.cfg.Engine.Nack(sctx, l.topic, m.ID, m.Receipt, domain.NackRequest{Reason: reason}); err != nil {
				l.s.log.Warn("deliver: nack", "topic", l.topic, "id", m.ID, "err", err)
			}
		}
	}
	l.mu.Lock()
	recovered := len(acks) > 0 && l.failing
	l.failing = len(acks) == 0
	l.mu.Unlock()
	if recovered {
		l.s.log.Info("deliver: the target confirms again", "topic", l.topic, "target", l.kind)
	}
	return len(acks)
}

// publish calls t.Publish, turning a panic or a wrong answer into
// failures: a target's bug must not lose or ack messages.
func (l *loop) publish(ctx context.Context, t Target, batch []Message) (errs []error) {
	defer func() {
		if r := recover(); r != nil {
			l.s.log.Error("deliver: target panicked", "topic", l.topic, "target", l.kind, "panic", fmt.Sprint(r))
			errs = fill(len(batch), errors.New("target panicked"))
		}
	}()
	errs = t.Publish(ctx, batch)
	if len(errs) != len(batch) {
		l.s.log.Error("deliver: target answered the wrong number of results", "topic", l.topic, "target", l.kind, "want", len(batch), "got", len(errs))
		return fill(len(batch), errors.New("target answered the wrong number of results"))
	}
	return errs
}

func fill(n int, err error) []error {
	out := make([]error, n)
	for i := range out {
		out[i] = err
	}
	return out
}

// reason is a failed message's last error: a fixed description, never
// the broker's words (which may name hosts or echo configuration).
func (l *loop) reason(timedOut bool) string {
	switch {
	case l.pubCtx.Err() != nil:
		return "deliver: publish cancelled: server shutting down"
	case timedOut:
		return fmt.Sprintf("deliver: %s did not confirm within %s", l.kind, l.cfg.Timeout)
	}
	return fmt.Sprintf("deliver: %s refused the publish or could not be reached (details in the server's log)", l.kind)
}
