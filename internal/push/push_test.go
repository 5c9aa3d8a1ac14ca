package push_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/push"
	"github.com/delayq/delayq/internal/pushsig"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const secret = "s3cret-for-tests"

// receiver is an httptest server that records every push, checks its
// signature, and answers what respond says.
type receiver struct {
	t   *testing.T
	srv *httptest.Server

	mu          sync.Mutex
	got         []got
	inflight    int            // pushes being answered
	maxInflight int            // the most at once
	perMsg      map[string]int // pushes being answered, per message id
	respond     func(g got) (status int, hold time.Duration)
	notify      chan got
}

type got struct {
	id       string
	attempt  int
	body     wire.PushBody
	sigErr   error
	topicHdr string
	priority string
}

func newReceiver(t *testing.T, respond func(g got) (int, time.Duration)) *receiver {
	r := &receiver{t: t, perMsg: map[string]int{}, respond: respond, notify: make(chan got, 1000)}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	raw, _ := io.ReadAll(req.Body)
	g := got{id: req.Header.Get(pushsig.HeaderMessageID), topicHdr: req.Header.Get(pushsig.HeaderTopic)}
	g.attempt, _ = strconv.Atoi(req.Header.Get(pushsig.HeaderAttempt))
	g.priority = req.Header.Get(pushsig.HeaderPriority)
	g.sigErr = pushsig.Verify(secret, req.Header.Get(pushsig.HeaderSignature), raw, time.Now(), time.Minute)
	if err := json.Unmarshal(raw, &g.body); err != nil {
		r.t.Errorf("push body %q: %v", raw, err)
	}
	r.mu.Lock()
	r.got = append(r.got, g)
	r.inflight++
	r.maxInflight = max(r.maxInflight, r.inflight)
	r.perMsg[g.id]++
	if r.perMsg[g.id] > 1 {
		r.t.Errorf("message %s pushed twice at once", g.id)
	}
	status, hold := r.respond(g)
	r.mu.Unlock()
	select {
	case <-time.After(hold):
	case <-req.Context().Done():
	}
	r.mu.Lock()
	r.inflight--
	r.perMsg[g.id]--
	r.mu.Unlock()
	w.WriteHeader(status)
	_, _ = w.Write([]byte("answer " + strconv.Itoa(status) + "\x1b[31m"))
	r.notify <- g
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

type bundle struct {
	e   *engine.Engine
	s   *push.Service
	q   domain.Queue
	ctx context.Context
	obs *observer
}

// observer records what the Service reports of each push.
type observer struct {
	mu       sync.Mutex
	outcomes []string // "topic outcome"
}

func (o *observer) ObservePush(topic string, outcome push.Outcome, d time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if d <= 0 {
		o.outcomes = append(o.outcomes, "non-positive duration")
	}
	o.outcomes = append(o.outcomes, topic+" "+string(outcome))
}

// saw waits (bounded) until n pushes were reported and returns them.
func (o *observer) saw(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		o.mu.Lock()
		got := slices.Clone(o.outcomes)
		o.mu.Unlock()
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func setup(t *testing.T) *bundle {
	t.Helper()
	return setupLog(t, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func setupLog(t *testing.T, log *slog.Logger) *bundle {
	t.Helper()
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	obs := &observer{}
	s, err := push.New(push.Config{Engine: e, Refresh: 50 * time.Millisecond, Wait: 200 * time.Millisecond, LeaseMargin: time.Second,
		Logger: log, Observer: obs})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	t.Cleanup(func() {
		sctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := s.Stop(sctx); err != nil {
			t.Errorf("stop: %v", err)
		}
		_ = e.Close(ctx)
	})
	return &bundle{e: e, s: s, q: e, ctx: ctx, obs: obs}
}

func (b *bundle) configure(t *testing.T, topic string, p *domain.PushSettings, maxAttempts int) {
	t.Helper()
	_, err := b.q.SetTopicSettings(b.ctx, topic, domain.TopicSettings{
		MaxAttempts: maxAttempts, Push: p,
		Backoff: domain.Backoff{Initial: 20 * time.Millisecond, Max: 40 * time.Millisecond, Multiplier: 2},
	})
	if err != nil {
		t.Fatal(err)
	}
}

func (b *bundle) send(t *testing.T, topic, id, payload string) {
	t.Helper()
	if _, err := b.e.Send(b.ctx, topic, domain.SendRequest{ID: id, Payload: []byte(payload), Headers: map[string]string{"k": "v"}, Priority: 7}); err != nil {
		t.Fatal(err)
	}
}

// waitState polls the message's state (bounded).
func (b *bundle) waitState(t *testing.T, topic, id string, want domain.State) *domain.Message {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, err := b.e.Get(b.ctx, topic, id)
		if err == nil && m.State == want {
			return m
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s: state %v (err %v), want %s", topic, id, m, err, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestPushRetriesWithBackoffThenAck: two 500s, then a 200: three signed
// pushes with attempts 1, 2, 3, then the message is acked.
func TestPushRetriesWithBackoffThenAck(t *testing.T) {
	r := newReceiver(t, func(g got) (int, time.Duration) {
		if g.attempt < 3 {
			return http.StatusInternalServerError, 0
		}
		return http.StatusNoContent, 0
	})
	b := setup(t)
	b.configure(t, "hooks", &domain.PushSettings{URL: r.srv.URL + "/in", Timeout: time.Second, Secret: secret}, 5)
	b.send(t, "hooks", "m1", `{"order":42}`)
	m := b.waitState(t, "hooks", "m1", domain.StateAcked)
	if m.Attempt != 3 || m.Failures != 2 || !strings.Contains(m.LastError, "HTTP 500") {
		t.Fatalf("acked message: attempt %d failures %d last error %q", m.Attempt, m.Failures, m.LastError)
	}
	if strings.ContainsRune(m.LastError, 0x1b) {
		t.Errorf("last error keeps control characters: %q", m.LastError)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.got) != 3 {
		t.Fatalf("%d pushes, want 3", len(r.got))
	}
	if got, want := b.obs.saw(t, 3), []string{"hooks status", "hooks status", "hooks delivered"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	for i, g := range r.got {
		if g.attempt != i+1 || g.id != "m1" || g.topicHdr != "hooks" || g.priority != "7" || g.sigErr != nil {
			t.Errorf("push %d: attempt %d id %q topic %q priority %q signature %v", i, g.attempt, g.id, g.topicHdr, g.priority, g.sigErr)
		}
		if g.body.ID != "m1" || g.body.Payload == nil || *g.body.Payload != `{"order":42}` || g.body.Headers["k"] != "v" || g.body.Attempt != i+1 || g.body.MaxAttempts != 5 || g.body.Priority != 7 {
			t.Errorf("push %d body: %+v", i, g.body)
		}
	}
}

// TestPushTimeoutEndsDead: a receiver slower than the push timeout fails
// every attempt; the message ends in dead letters with the timeout as its
// last error, and is never pushed twice at once.
func TestPushTimeoutEndsDead(t *testing.T) {
	r := newReceiver(t, func(got) (int, time.Duration) { return http.StatusOK, 5 * time.Second })
	b := setup(t)
	b.configure(t, "slow", &domain.PushSettings{URL: r.srv.URL, Timeout: 100 * time.Millisecond}, 3)
	b.send(t, "slow", "m1", "x")
	m := b.waitState(t, "slow", "m1", domain.StateDead)
	if m.Failures != 3 || !strings.Contains(m.LastError, "timeout after 100ms") {
		t.Fatalf("dead message: failures %d last error %q", m.Failures, m.LastError)
	}
	page, err := b.e.DeadList(b.ctx, "slow", domain.DeadListRequest{})
	if err != nil || len(page.Messages) != 1 {
		t.Fatalf("dead list: %v %v", page, err)
	}
	if n := r.count(); n != 3 {
		t.Errorf("%d pushes, want 3", n)
	}
	if got, want := b.obs.saw(t, 3), []string{"slow timeout", "slow timeout", "slow timeout"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
	if g := (<-r.notify); g.sigErr == nil {
		t.Errorf("push without a secret carried a valid signature")
	}
}

// TestPushConnectionErrorNacks: nothing listens at the URL.
func TestPushConnectionErrorNacks(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	b := setup(t)
	b.configure(t, "gone", &domain.PushSettings{URL: "http://" + addr + "/x", Timeout: time.Second}, 2)
	b.send(t, "gone", "m1", "x")
	m := b.waitState(t, "gone", "m1", domain.StateDead)
	if !strings.Contains(m.LastError, "connection refused") {
		t.Fatalf("last error %q", m.LastError)
	}
	if got, want := b.obs.saw(t, 2), []string{"gone network", "gone network"}; !slices.Equal(got, want) {
		t.Errorf("observed %q, want %q", got, want)
	}
}

// TestPushConcurrencyBound: 30 messages, concurrency 3, each push held
// 30 ms: never more than 3 pushes at once (and 3 are reached), never two
// of one message.
func TestPushConcurrencyBound(t *testing.T) {
	r := newReceiver(t, func(got) (int, time.Duration) { return http.StatusOK, 30 * time.Millisecond })
	b := setup(t)
	for i := range 30 {
		b.send(t, "many", "m"+strconv.Itoa(i), "x")
	}
	b.configure(t, "many", &domain.PushSettings{URL: r.srv.URL, Timeout: time.Second, Concurrency: 3}, 3)
	for i := range 30 {
		b.waitState(t, "many", "m"+strconv.Itoa(i), domain.StateAcked)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.maxInflight != 3 {
		t.Fatalf("at most %d pushes at once, want exactly 3", r.maxInflight)
	}
	if len(r.got) != 30 {
		t.Fatalf("%d pushes for 30 messages", len(r.got))
	}
}

// TestPushSettingsChanges: pushes start when a topic gets a push target
// (at once, through the engine's settings event) and stop when it is removed.
func TestPushSettingsChanges(t *testing.T) {
	r := newReceiver(t, func(got) (int, time.Duration) { return http.StatusOK, 0 })
	b := setup(t)
	b.send(t, "later", "before", "x")
	time.Sleep(200 * time.Millisecond)
	if n := r.count(); n != 0 {
		t.Fatalf("%d pushes before a push target was set", n)
	}
	b.configure(t, "later", &domain.PushSettings{URL: r.srv.URL, Secret: secret}, 3)
	b.waitState(t, "later", "before", domain.StateAcked)
	// A PUT without a secret keeps it (write-only secrets).
	b.configure(t, "later", &domain.PushSettings{URL: r.srv.URL, Concurrency: 2}, 3)
	b.send(t, "later", "kept", "x")
	b.waitState(t, "later", "kept", domain.StateAcked)
	if g := (<-r.notify); g.sigErr != nil {
		t.Fatalf("first push: %v", g.sigErr)
	}
	if g := (<-r.notify); g.id != "kept" || g.sigErr != nil {
		t.Fatalf("push after a PUT without secret: %s %v", g.id, g.sigErr)
	}
	b.configure(t, "later", nil, 3)
	time.Sleep(200 * time.Millisecond) // the old pusher's long-polls end
	b.send(t, "later", "after", "x")
	time.Sleep(500 * time.Millisecond)
	if m, _ := b.e.Get(b.ctx, "later", "after"); m.State != domain.StateReady {
		t.Fatalf("after removing push: state %s", m.State)
	}
}

// TestStopNacksPushesThatOutliveIt: Stop waits for pushes in flight up
// to its context, then cancels them; they are nacked, not lost.
func TestStopNacksPushesThatOutliveIt(t *testing.T) {
	r := newReceiver(t, func(got) (int, time.Duration) { return http.StatusOK, 10 * time.Second })
	ctx := context.Background()
	e, err := engine.Open(ctx, engine.Config{Store: memstore.New()})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(ctx)
	s, _ := push.New(push.Config{Engine: e, Refresh: 20 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	s.Start()
	if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{Push: &domain.PushSettings{URL: r.srv.URL, Timeout: 30 * time.Second}}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Send(ctx, "t", domain.SendRequest{ID: "m", Payload: []byte("x")}); err != nil {
		t.Fatal(err)
	}
	for r.count() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	sctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if err := s.Stop(sctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("stop: %v", err)
	}
	m, err := e.Get(ctx, "t", "m")
	if err != nil || m.State == domain.StateInflight || !strings.Contains(m.LastError, "shutting down") {
		t.Fatalf("after stop: %+v %v", m, err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("second stop: %v", err)
	}
}

func TestVerifyPushSignature(t *testing.T) {
	body := []byte(`{"id":"m1"}`)
	now := time.Unix(1_767_225_600, 0)
	h := pushsig.Sign(secret, now, body)
	if err := pushsig.Verify(secret, h, body, now.Add(30*time.Second), time.Minute); err != nil {
		t.Fatalf("valid signature: %v", err)
	}
	cases := map[string]error{
		"tampered body": pushsig.Verify(secret, h, []byte(`{"id":"m2"}`), now, time.Minute),
		"wrong secret":  pushsig.Verify("other", h, body, now, time.Minute),
		"replayed":      pushsig.Verify(secret, h, body, now.Add(2*time.Minute), time.Minute),
		"no header":     pushsig.Verify(secret, "", body, now, time.Minute),
		"no v1":         pushsig.Verify(secret, "t=1767225600", body, now, time.Minute),
	}
	for name, err := range cases {
		if !errors.Is(err, pushsig.ErrBadSignature) {
			t.Errorf("%s: %v, want ErrBadSignature", name, err)
		}
	}
}

// rawReceiver accepts connections, reads one request head and answers
// the given bytes verbatim, then closes.
func rawReceiver(t *testing.T, answer string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64<<10)
			var head []byte
			for !strings.Contains(string(head), "\r\n\r\n") {
				n, err := c.Read(buf)
				if err != nil {
					break
				}
				head = append(head, buf[:n]...)
			}
			_, _ = c.Write([]byte(answer))
			c.Close()
		}
	}()
	return "http://" + ln.Addr().String() + "/hook"
}

// syncBuffer is a goroutine-safe log sink.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestPushAnswersNotReflected: whatever a receiver answers (a body, a
// reason phrase of its choosing, or bytes that are not HTTP at all, such
// as an SSH banner on an internal port) never reaches last_error, which
// consume tokens and read-only dashboard viewers can read: a push URL
// pointed inside the network must not read anything back. last_error
// gets a fixed description; the details go to the server's debug log.
func TestPushAnswersNotReflected(t *testing.T) {
	logs := &syncBuffer{}
	b := setupLog(t, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	for _, tc := range []struct {
		topic, answer, want string
	}{
		{"body", "HTTP/1.1 500 Internal Server Error\r\nContent-Length: 27\r\nConnection: close\r\n\r\ninternal-secret-body-abc123", "push: HTTP 500 Internal Server Error"},
		{"reason", "HTTP/1.1 403 internal-secret-reason\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", "push: HTTP 403 Forbidden"},
		{"banner", "SSH-2.0-internal-secret-banner\r\n", "push: request failed"},
	} {
		url := rawReceiver(t, tc.answer)
		b.configure(t, tc.topic, &domain.PushSettings{URL: url, Timeout: time.Second}, 1)
		b.send(t, tc.topic, "m1", "x")
		m := b.waitState(t, tc.topic, "m1", domain.StateDead)
		if !strings.HasPrefix(m.LastError, tc.want) || strings.Contains(m.LastError, "internal-secret") {
			t.Errorf("%s: last error %q, want %q… without the receiver's words", tc.topic, m.LastError, tc.want)
		}
	}
	// The operator still finds out what happened.
	for _, s := range []string{"internal-secret-body-abc123", "internal-secret-reason"} {
		if !strings.Contains(logs.String(), s) {
			t.Errorf("debug log lacks %q:\n%s", s, logs.String())
		}
	}
}

// TestPushPausedTopic: nothing of a paused topic is pushed; sends are
// accepted and wait ready; a resume pushes them.
func TestPushPausedTopic(t *testing.T) {
	r := newReceiver(t, func(got) (int, time.Duration) { return http.StatusNoContent, 0 })
	b := setup(t)
	b.configure(t, "paused", &domain.PushSettings{URL: r.srv.URL, Secret: secret}, 3)
	if _, err := b.e.PauseTopic(b.ctx, "paused", true); err != nil {
		t.Fatal(err)
	}
	b.send(t, "paused", "m1", "x")
	// Several of the pusher's 200 ms long-polls and 50 ms refreshes.
	time.Sleep(time.Second)
	if n := r.count(); n != 0 {
		t.Fatalf("%d pushes from a paused topic", n)
	}
	b.waitState(t, "paused", "m1", domain.StateReady)
	if _, err := b.e.PauseTopic(b.ctx, "paused", false); err != nil {
		t.Fatal(err)
	}
	b.waitState(t, "paused", "m1", domain.StateAcked)
	if n := r.count(); n != 1 {
		t.Fatalf("%d pushes after resume, want 1", n)
	}
}
