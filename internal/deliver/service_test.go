package deliver_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fake is a Target whose behaviour the test switches: confirm, refuse,
// or hang until the publish's deadline.
type fake struct {
	mu          sync.Mutex
	mode        string // "ok", "refuse", "hang"
	got         map[string]time.Time
	publishes   int
	inFlight    int
	maxInFlight int
	// batches at the broker now, the most at once, and the largest.
	batches, maxBatches, maxBatch int
	// delay is how long an "ok" publish takes to confirm.
	delay  time.Duration
	closed bool
}

func newFake(mode string) *fake { return &fake{mode: mode, got: map[string]time.Time{}} }

func (f *fake) set(mode string) { f.mu.Lock(); f.mode = mode; f.mu.Unlock() }

func (f *fake) Publish(ctx context.Context, msgs []deliver.Message) []error {
	f.mu.Lock()
	f.publishes++
	f.inFlight += len(msgs)
	f.maxInFlight = max(f.maxInFlight, f.inFlight)
	f.batches++
	f.maxBatches = max(f.maxBatches, f.batches)
	f.maxBatch = max(f.maxBatch, len(msgs))
	mode, closed, delay := f.mode, f.closed, f.delay
	f.mu.Unlock()
	defer func() { f.mu.Lock(); f.inFlight -= len(msgs); f.batches--; f.mu.Unlock() }()
	if delay > 0 && mode == "ok" {
		select {
		case <-time.After(delay):
		case <-ctx.Done():
		}
	}
	errs := make([]error, len(msgs))
	switch {
	case closed:
		mode = "refuse"
	case mode == "hang":
		<-ctx.Done()
		for i := range errs {
			errs[i] = ctx.Err()
		}
		return errs
	}
	now := time.Now()
	for i, m := range msgs {
		if mode == "refuse" {
			errs[i] = errors.New("refused by broker at 10.0.0.7 password=hunter2")
			continue
		}
		if now.Before(m.DueAt) {
			errs[i] = errors.New("published before due")
		}
		f.mu.Lock()
		if _, dup := f.got[m.ID]; !dup {
			f.got[m.ID] = now
		}
		f.mu.Unlock()
	}
	return errs
}

func (f *fake) Close() error { f.mu.Lock(); f.closed = true; f.mu.Unlock(); return nil }

func (f *fake) count() int { f.mu.Lock(); defer f.mu.Unlock(); return len(f.got) }

// bundle is an engine with a deliver Service whose targets are fakes,
// one per topic (the settings' redis stream names the fake).
type bundle struct {
	e      *engine.Engine
	s      *deliver.Service
	mu     sync.Mutex
	fakes  map[string]*fake
	builds map[string]int
}

func setup(t *testing.T) *bundle {
	t.Helper()
	e, err := engine.Open(context.Background(), engine.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{e: e, fakes: map[string]*fake{}, builds: map[string]int{}}
	b.s, err = deliver.New(deliver.Config{Engine: e, Build: b.build, Refresh: 50 * time.Millisecond, Wait: 200 * time.Millisecond,
		LeaseMargin: 500 * time.Millisecond, RebuildBackoff: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	b.s.Start()
	t.Cleanup(func() {
		if err := b.s.Stop(context.Background()); err != nil {
			t.Error(err)
		}
		_ = e.Close(context.Background())
	})
	return b
}

func (b *bundle) build(_ context.Context, _ string, s domain.DeliverSettings) (deliver.Target, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	name := s.Redis.Stream
	b.builds[name]++
	f := b.fakes[name]
	if f == nil {
		return nil, errors.New("no such fake")
	}
	// A rebuilt target starts open, with the fake's recordings.
	f.mu.Lock()
	f.closed = false
	f.mu.Unlock()
	return f, nil
}

func (b *bundle) add(t *testing.T, topic string, f *fake, maxInFlight int, timeout time.Duration, maxAttempts int) {
	t.Helper()
	b.mu.Lock()
	b.fakes[topic] = f
	b.mu.Unlock()
	_, err := b.e.SetTopicSettings(context.Background(), topic, domain.TopicSettings{
		MaxAttempts: maxAttempts,
		Backoff:     domain.Backoff{Initial: 50 * time.Millisecond, Max: 200 * time.Millisecond, Multiplier: 2},
		Deliver: &domain.DeliverSettings{Redis: &domain.RedisTarget{Addr: "127.0.0.1:1", Stream: topic},
			MaxInFlight: maxInFlight, Timeout: timeout},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) send(t *testing.T, topic string, n int, delay time.Duration) map[string]time.Time {
	t.Helper()
	due := map[string]time.Time{}
	for i := range n {
		m, err := b.e.Send(context.Background(), topic, domain.SendRequest{ID: topic + "-" + strconv.Itoa(i), Payload: []byte("x"), When: domain.When{Delay: delay}})
		if err != nil {
			t.Fatal(err)
		}
		due[m.ID] = m.DeliverAt
	}
	return due
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (b *bundle) counts(t *testing.T, topic string) domain.TopicCounts {
	ti, err := b.e.Topic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return ti.Counts
}

func (b *bundle) settled(t *testing.T, topic string) func() bool {
	return func() bool { c := b.counts(t, topic); return c.Scheduled+c.Ready+c.Inflight+c.Dead == 0 }
}

func TestDeliversWhenDueAndAcks(t *testing.T) {
	b := setup(t)
	f := newFake("ok")
	b.add(t, "orders", f, 0, time.Second, 0)
	due := b.send(t, "orders", 50, 300*time.Millisecond)
	waitFor(t, "every message published", 10*time.Second, func() bool { return f.count() == 50 })
	waitFor(t, "every message acked", 5*time.Second, b.settled(t, "orders"))
	f.mu.Lock()
	defer f.mu.Unlock()
	for id, at := range f.got {
		if at.Before(due[id]) {
			t.Errorf("%s published at %s, before its due time %s", id, at, due[id])
		}
	}
	for id := range due {
		if _, ok := f.got[id]; !ok {
			t.Errorf("%s lost", id)
		}
		m, err := b.e.Get(context.Background(), "orders", id)
		if err != nil || m.State != domain.StateAcked {
			t.Errorf("%s: %v %v, want acked", id, m, err)
		}
	}
}

// TestRefusedRetriesThenDelivers: a refusing broker gets nacks with the
// topic's backoff and a fixed last error (no broker words); once it
// accepts, everything is delivered; with few attempts, messages go dead.
func TestRefusedRetriesThenDelivers(t *testing.T) {
	b := setup(t)
	f := newFake("refuse")
	b.add(t, "orders", f, 0, time.Second, 1000)
	due := b.send(t, "orders", 20, 0)
	waitFor(t, "retries", 5*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.publishes >= 3 })
	m, err := b.e.Get(context.Background(), "orders", "orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if m.Failures == 0 || !strings.HasPrefix(m.LastError, "deliver: redis refused") || strings.Contains(m.LastError, "hunter2") || strings.Contains(m.LastError, "10.0.0.7") {
		t.Fatalf("after refusals: failures %d, last error %q", m.Failures, m.LastError)
	}
	f.set("ok")
	waitFor(t, "delivery once the broker accepts", 10*time.Second, func() bool { return f.count() == len(due) })
	waitFor(t, "every message acked", 5*time.Second, b.settled(t, "orders"))

	g := newFake("refuse")
	b.add(t, "few", g, 0, time.Second, 2)
	b.send(t, "few", 5, 0)
	waitFor(t, "dead letters", 10*time.Second, func() bool { return b.counts(t, "few").Dead == 5 })
}

// TestUnconfirmedBoundedAndRedelivered: a broker that never confirms
// gets at most max_in_flight messages at once, nothing is acked, and
// the messages are offered again (attempt grows); when it recovers they
// are delivered.
func TestUnconfirmedBoundedAndRedelivered(t *testing.T) {
	b := setup(t)
	f := newFake("hang")
	b.add(t, "orders", f, 5, 200*time.Millisecond, 1000)
	b.send(t, "orders", 40, 0)
	waitFor(t, "several timed-out publishes", 10*time.Second, func() bool {
		m, err := b.e.Get(context.Background(), "orders", "orders-0")
		f.mu.Lock()
		defer f.mu.Unlock()
		return err == nil && m.Failures > 0 && f.publishes >= 8
	})
	if c := b.counts(t, "orders"); c.Inflight > 5 {
		t.Fatalf("%d messages in flight, max_in_flight is 5", c.Inflight)
	}
	f.mu.Lock()
	maxIn := f.maxInFlight
	f.mu.Unlock()
	if maxIn > 5 || maxIn == 0 {
		t.Fatalf("at most %d in flight at the broker, want 1..5", maxIn)
	}
	if f.count() != 0 {
		t.Fatal("a hanging broker recorded messages")
	}
	m, err := b.e.Get(context.Background(), "orders", "orders-0")
	if err != nil {
		t.Fatal(err)
	}
	if m.State == domain.StateAcked || m.Failures == 0 || !strings.Contains(m.LastError, "did not confirm within 200ms") {
		t.Fatalf("orders-0 %s failures %d last error %q", m.State, m.Failures, m.LastError)
	}
	f.set("ok")
	waitFor(t, "delivery after recovery", 15*time.Second, func() bool { return f.count() == 40 })
	waitFor(t, "every message acked", 5*time.Second, b.settled(t, "orders"))
}

// TestStalledTopicDoesNotStallOthers: topic a's broker hangs; topic b's
// messages are delivered meanwhile.
func TestStalledTopicDoesNotStallOthers(t *testing.T) {
	b := setup(t)
	a, ok := newFake("hang"), newFake("ok")
	b.add(t, "a", a, 0, 5*time.Second, 0)
	b.add(t, "b", ok, 0, time.Second, 0)
	b.send(t, "a", 10, 0)
	waitFor(t, "a's publish to hang", 5*time.Second, func() bool { a.mu.Lock(); defer a.mu.Unlock(); return a.inFlight > 0 })
	b.send(t, "b", 30, 0)
	waitFor(t, "b delivered while a hangs", 3*time.Second, func() bool { return ok.count() == 30 })
}

// TestSettingsChangeRebuildsAndRemovalCloses: new settings build a new
// target; removing deliver closes it and stops leasing.
func TestSettingsChangeRebuildsAndRemovalCloses(t *testing.T) {
	b := setup(t)
	f := newFake("ok")
	b.add(t, "orders", f, 0, time.Second, 0)
	b.send(t, "orders", 1, 0)
	waitFor(t, "first delivery", 5*time.Second, func() bool { return f.count() == 1 })
	b.add(t, "orders", f, 7, time.Second, 0)
	waitFor(t, "a rebuild", 5*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.builds["orders"] == 2 })
	if _, err := b.e.SetTopicSettings(context.Background(), "orders", domain.TopicSettings{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the target closed", 5*time.Second, func() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.closed })
	if k := b.s.Kinds(); len(k) != 0 {
		t.Fatalf("still delivering %v", k)
	}
	// Now it waits for a consumer.
	if _, err := b.e.Send(context.Background(), "orders", domain.SendRequest{ID: "later", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond)
	if c := b.counts(t, "orders"); c.Ready != 1 {
		t.Fatalf("counts %+v: a topic without deliver was still leased", c)
	}
}

// TestBuildFailureWaits: a target that cannot be built leaves the
// messages ready and is retried.
func TestBuildFailureWaits(t *testing.T) {
	b := setup(t)
	if _, err := b.e.SetTopicSettings(context.Background(), "orders", domain.TopicSettings{
		Deliver: &domain.DeliverSettings{Redis: &domain.RedisTarget{Addr: "127.0.0.1:1", Stream: "orders"}}}); err != nil {
		t.Fatal(err)
	}
	b.send(t, "orders", 3, 0)
	waitFor(t, "build retries", 5*time.Second, func() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.builds["orders"] >= 3 })
	if c := b.counts(t, "orders"); c.Ready != 3 {
		t.Fatalf("counts %+v, want 3 ready", c)
	}
	f := newFake("ok")
	b.mu.Lock()
	b.fakes["orders"] = f
	b.mu.Unlock()
	waitFor(t, "delivery once the target builds", 5*time.Second, func() bool { return f.count() == 3 })
}

// TestPipelinedBatchesBounded: while a batch awaits its confirms the
// loop publishes the next ones, so a slow broker sees several batches at
// once; never more than max_in_flight messages in total, and every one
// is published once and acked.
func TestPipelinedBatchesBounded(t *testing.T) {
	b := setup(t)
	f := newFake("ok")
	f.delay = 50 * time.Millisecond
	b.add(t, "orders", f, 40, 5*time.Second, 0)
	b.send(t, "orders", 400, 0)
	waitFor(t, "every message published", 20*time.Second, func() bool { return f.count() == 400 })
	waitFor(t, "every message acked", 5*time.Second, b.settled(t, "orders"))
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.maxInFlight > 40 {
		t.Fatalf("%d messages at the broker at once, max_in_flight is 40", f.maxInFlight)
	}
	if f.maxBatches < 2 {
		t.Fatalf("at most %d batch at the broker at once: publishes are not pipelined", f.maxBatches)
	}
	if f.maxBatch > 10 {
		t.Fatalf("a batch of %d, want at most max_in_flight/4 = 10", f.maxBatch)
	}
}
