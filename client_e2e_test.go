package delayq_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/openapitest"
)

// e2e is a Client talking to a real server on an engine with a memstore.
// Every request and answer is checked against the API's OpenAPI document
// (internal/openapitest): hc is the HTTP client that does it.
type e2e struct {
	c   *delayq.Client
	hc  *http.Client
	eng *engine.Engine
	url string
}

func setupE2E(t *testing.T, opts ...delayq.ClientOption) *e2e {
	t.Helper()
	eng := newEngine(t)
	srv, err := httpapi.New(httpapi.Config{Queue: eng, Scheduler: eng, Ready: eng.Ready, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	v := openapitest.New(t, httpapi.OpenAPIDocument)
	t.Cleanup(func() { // after the server's Close: every exchange is over
		if v.Checked() == 0 {
			t.Error("no request was checked against the API document: the client bypassed the validator")
		}
	})
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close) // runs before the engine's Close (cleanups are LIFO)
	hc := &http.Client{Transport: v.Transport(nil)}
	c, err := delayq.NewClient(ts.URL, append([]delayq.ClientOption{delayq.WithHTTPClient(hc)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return &e2e{c: c, hc: hc, eng: eng, url: ts.URL}
}

func TestE2ESendGetCancelReschedule(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()

	m, err := b.c.Enqueue(ctx, "orders", []byte("order 42"), delayq.After(30*time.Minute), delayq.WithID("order-42"),
		delayq.WithHeaders(map[string]string{"tenant": "acme"}), delayq.WithMaxAttempts(5))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "order-42" || m.State != delayq.StateScheduled || m.Duplicate || m.MaxAttempts != 5 ||
		time.Until(m.DeliverAt) < 29*time.Minute || m.Headers["tenant"] != "acme" {
		t.Fatalf("sent %+v", m)
	}

	dup, err := b.c.Enqueue(ctx, "orders", []byte("other"), delayq.WithID("order-42"))
	if err != nil || !dup.Duplicate || string(dup.Payload) != "order 42" {
		t.Fatalf("duplicate send: %+v %v", dup, err)
	}

	got, err := b.c.Get(ctx, "orders", "order-42")
	if err != nil || got.State != delayq.StateScheduled || string(got.Payload) != "order 42" {
		t.Fatalf("get: %+v %v", got, err)
	}

	at := time.Now().Add(2 * time.Hour).Truncate(time.Millisecond)
	re, err := b.c.Reschedule(ctx, "orders", "order-42", delayq.When{DeliverAt: at})
	if err != nil || !re.DeliverAt.Equal(at) {
		t.Fatalf("reschedule: %+v %v (want due %v)", re, err, at)
	}

	cancelled, err := b.c.Cancel(ctx, "orders", "order-42")
	if err != nil || cancelled.State != delayq.StateScheduled || cancelled.ID != "order-42" {
		t.Fatalf("cancel: %+v %v", cancelled, err)
	}
	if _, err := b.c.Get(ctx, "orders", "order-42"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("get after cancel: %v", err)
	}
	if _, err := b.c.Cancel(ctx, "orders", "order-42"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("second cancel: %v", err)
	}
}

func TestE2EServerMadeAndClientMadeIDs(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	m, err := b.c.Enqueue(ctx, "ids", []byte("x"))
	if err != nil || delayq.ValidateID(m.ID) != nil || m.Duplicate {
		t.Fatalf("client-made id: %+v %v", m, err)
	}
	noRetry, err := delayq.NewClient(b.url, delayq.WithHTTPClient(b.hc), delayq.WithRetry(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	m2, err := noRetry.Enqueue(ctx, "ids", []byte("x"))
	if err != nil || m2.ID == "" {
		t.Fatalf("server-made id: %+v %v", m2, err)
	}
}

func TestE2EPayloads(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	for _, p := range [][]byte{[]byte("plain"), {0xff, 0xfe, 0, 1}, []byte("ünïcode ✓"), {}} {
		m, err := b.c.Enqueue(ctx, "bytes", p, delayq.After(time.Hour))
		if err != nil {
			t.Fatalf("send %x: %v", p, err)
		}
		got, err := b.c.Get(ctx, "bytes", m.ID)
		if err != nil || string(got.Payload) != string(p) {
			t.Fatalf("payload %x came back as %x (%v)", p, got.Payload, err)
		}
	}
}

func TestE2ESendBatch(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	res, err := b.c.SendBatch(ctx, "batch", []delayq.SendRequest{
		delayq.NewSendRequest([]byte("a"), delayq.WithID("a")),
		delayq.NewSendRequest([]byte("c")),
		delayq.NewSendRequest([]byte("again"), delayq.WithID("a")),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 3 || res[0].Err != nil || res[0].Message.ID != "a" || res[1].Err != nil || res[1].Message.ID == "" {
		t.Fatalf("results %+v", res)
	}
	if res[2].Err != nil || !res[2].Message.Duplicate || string(res[2].Message.Payload) != "a" {
		t.Fatalf("duplicate in batch: %+v", res[2])
	}
	// A malformed item rejects the whole call, naming the item.
	_, err = b.c.SendBatch(ctx, "batch", []delayq.SendRequest{
		delayq.NewSendRequest([]byte("a"), delayq.WithID("ok")),
		delayq.NewSendRequest([]byte("b"), delayq.WithID("bad id!")),
	})
	var ie *delayq.InvalidError
	if !errors.As(err, &ie) || ie.Field != "messages[1].id" {
		t.Fatalf("bad id: %v", err)
	}
	if _, err := b.c.Get(ctx, "batch", "ok"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("a rejected batch stored a message: %v", err)
	}
}

func TestE2ELeaseAckNackExtend(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		mustSend(t, b.c, "work", id, "payload-"+id)
	}
	msgs, err := b.c.Lease(ctx, "work", delayq.LeaseRequest{Max: 3, Lease: time.Minute})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("lease: %d %v", len(msgs), err)
	}
	for i, m := range msgs {
		if m.Receipt == "" || m.LeaseExpiresAt.IsZero() || m.Attempt != 1 || m.ID != []string{"a", "b", "c"}[i] {
			t.Fatalf("leased %+v", m)
		}
	}
	a, bm, c := msgs[0], msgs[1], msgs[2]

	ext, err := b.c.Extend(ctx, "work", a.ID, a.Receipt, 2*time.Minute)
	if err != nil || !ext.LeaseExpiresAt.After(a.LeaseExpiresAt) {
		t.Fatalf("extend: %+v %v", ext, err)
	}
	if err := b.c.Ack(ctx, "work", a.ID, a.Receipt); err != nil {
		t.Fatal(err)
	}
	if err := b.c.Ack(ctx, "work", a.ID, a.Receipt); err != nil {
		t.Fatalf("second ack, same receipt (a retry): %v", err)
	}
	if err := b.c.Ack(ctx, "work", a.ID, a.Receipt+"0"); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("ack of an acked message with another receipt: %v", err)
	}
	if _, err := b.c.Extend(ctx, "work", bm.ID, "stale", time.Minute); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("extend with a stale receipt: %v", err)
	}

	nacked, err := b.c.Nack(ctx, "work", bm.ID, bm.Receipt, delayq.NackRequest{Reason: "downstream 502", HasDelay: true, Delay: time.Hour})
	if err != nil || nacked.State != delayq.StateScheduled || nacked.LastError != "downstream 502" || nacked.Failures != 1 {
		t.Fatalf("nack: %+v %v", nacked, err)
	}

	errs, err := b.c.AckBatch(ctx, "work", []delayq.AckRequest{{ID: c.ID, Receipt: c.Receipt}, {ID: "zzz", Receipt: "r"}})
	if err != nil || errs[0] != nil || errs[1] == nil {
		t.Fatalf("batch ack: %v %v", errs, err)
	}

	// Nothing is ready now: a long-poll returns empty after its wait.
	empty, err := b.c.Lease(ctx, "work", delayq.LeaseRequest{Wait: 50 * time.Millisecond})
	if err != nil || len(empty) != 0 {
		t.Fatalf("empty lease: %v %v", empty, err)
	}
}

func TestE2ELongPollWakesOnSend(t *testing.T) {
	t.Parallel()
	b := setupE2E(t, delayq.WithTimeout(time.Second))
	ctx := context.Background()
	got := make(chan []*delayq.Message, 1)
	go func() {
		msgs, err := b.c.Lease(ctx, "poll", delayq.LeaseRequest{Wait: 20 * time.Second})
		if err != nil {
			t.Error(err)
		}
		got <- msgs
	}()
	time.Sleep(20 * time.Millisecond) // let the long-poll start (either order is correct)
	mustSend(t, b.c, "poll", "p1", "x")
	if msgs := <-got; len(msgs) != 1 || msgs[0].ID != "p1" {
		t.Fatalf("long-poll got %v", msgs)
	}
}

func TestE2ETopicsAndSettings(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	mustSend(t, b.c, "t1", "a", "x", delayq.After(time.Hour))
	mustSend(t, b.c, "t1", "b", "x")
	mustSend(t, b.c, "t2", "a", "x")

	set, err := b.c.SetTopicSettings(ctx, "t1", delayq.TopicSettings{
		MaxAttempts: 3, Lease: 45 * time.Second,
		Backoff: delayq.Backoff{Initial: 2 * time.Second, Max: time.Minute, Multiplier: 3, Jitter: 0.1},
	})
	if err != nil || set.MaxAttempts != 3 || set.Lease != 45*time.Second || set.Backoff.Multiplier != 3 {
		t.Fatalf("settings: %+v %v", set, err)
	}
	info, err := b.c.Topic(ctx, "t1")
	if err != nil {
		t.Fatal(err)
	}
	if info.Counts.Scheduled != 1 || info.Counts.Ready != 1 || info.NextDue.IsZero() || info.OldestReady.IsZero() || info.Settings.MaxAttempts != 3 {
		t.Fatalf("topic: %+v", info)
	}
	all, err := b.c.Topics(ctx)
	if err != nil || len(all) != 2 || all[0].Name != "t1" || all[1].Name != "t2" {
		t.Fatalf("topics: %+v %v", all, err)
	}
	if _, err := b.c.Topic(ctx, "never-used"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("unknown topic: %v", err)
	}
	_, err = b.c.SetTopicSettings(ctx, "t1", delayq.TopicSettings{MaxAttempts: -1})
	var ie *delayq.InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("bad settings: %v", err)
	}
}

// A nack with Dead goes to dead letters with attempts left (a worker's
// SkipRetry); Dead with a delay is refused naming the field.
func TestE2ENackDead(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	mustSend(t, b.c, "skip", "s1", "x", delayq.WithMaxAttempts(25))
	msgs, err := b.c.Lease(ctx, "skip", delayq.LeaseRequest{Max: 1})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("lease: %v %v", msgs, err)
	}
	m := msgs[0]
	_, err = b.c.Nack(ctx, "skip", m.ID, m.Receipt, delayq.NackRequest{Dead: true, HasDelay: true, Delay: time.Minute})
	var ie *delayq.InvalidError
	if !errors.As(err, &ie) || ie.Field != "delay" {
		t.Fatalf("dead nack with a delay: %v", err)
	}
	nm, err := b.c.Nack(ctx, "skip", m.ID, m.Receipt, delayq.NackRequest{Dead: true, Reason: "account deleted"})
	if err != nil || nm.State != delayq.StateDead || nm.Failures != 1 || nm.LastError != "account deleted" {
		t.Fatalf("dead nack: %+v %v", nm, err)
	}
	page, err := b.c.DeadList(ctx, "skip", delayq.DeadListRequest{})
	if err != nil || len(page.Messages) != 1 || page.Messages[0].ID != "s1" {
		t.Fatalf("dead letters after a dead nack: %+v %v", page, err)
	}
}

// PatchTopicSettings changes what it names and keeps the rest: a rate
// limit set on a push topic keeps its push target.
func TestE2EPatchTopicSettings(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	if _, err := b.c.SetTopicSettings(ctx, "hooks", delayq.TopicSettings{MaxAttempts: 7, Push: &delayq.PushSettings{URL: "http://127.0.0.1:1/hook"}}); err != nil {
		t.Fatal(err)
	}
	got, err := b.c.PatchTopicSettings(ctx, "hooks", map[string]any{"rate_limit": map[string]any{"per_second": 50}})
	if err != nil {
		t.Fatal(err)
	}
	if got.RateLimit == nil || got.RateLimit.PerSecond != 50 || got.Push == nil || got.Push.URL != "http://127.0.0.1:1/hook" || got.MaxAttempts != 7 {
		t.Fatalf("after a patch of the rate limit: %+v", got)
	}
	if _, err := b.c.PatchTopicSettings(ctx, "hooks", []int{1}); err == nil {
		t.Fatal("a patch that is not an object was sent")
	}
	var ie *delayq.InvalidError
	if _, err := b.c.PatchTopicSettings(ctx, "hooks", map[string]any{"max_attempts": -1}); !errors.As(err, &ie) {
		t.Fatalf("a bad patch: %v", err)
	}
}

func TestE2EDeadLetters(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	for _, id := range []string{"d1", "d2", "d3"} {
		mustSend(t, b.c, "dlq", id, "x", delayq.WithMaxAttempts(1))
	}
	msgs, err := b.c.Lease(ctx, "dlq", delayq.LeaseRequest{Max: 3})
	if err != nil || len(msgs) != 3 {
		t.Fatalf("lease: %v %v", msgs, err)
	}
	for _, m := range msgs {
		nm, err := b.c.Nack(ctx, "dlq", m.ID, m.Receipt, delayq.NackRequest{Reason: "bad " + m.ID})
		if err != nil || nm.State != delayq.StateDead {
			t.Fatalf("nack to dead: %+v %v", nm, err)
		}
	}
	page, err := b.c.DeadList(ctx, "dlq", delayq.DeadListRequest{Limit: 2})
	if err != nil || len(page.Messages) != 2 || page.Next == "" || page.Messages[0].LastError != "bad d1" {
		t.Fatalf("dead page 1: %+v %v", page, err)
	}
	page2, err := b.c.DeadList(ctx, "dlq", delayq.DeadListRequest{Limit: 2, Cursor: page.Next})
	if err != nil || len(page2.Messages) != 1 || page2.Next != "" {
		t.Fatalf("dead page 2: %+v %v", page2, err)
	}
	r, err := b.c.DeadReplay(ctx, "dlq", "d1")
	if err != nil || r.State != delayq.StateReady || r.Failures != 0 {
		t.Fatalf("replay: %+v %v", r, err)
	}
	if _, err := b.c.DeadReplay(ctx, "dlq", "d1"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("replay of a live message: %v", err)
	}
	if err := b.c.DeadDelete(ctx, "dlq", "d2"); err != nil {
		t.Fatal(err)
	}
	n, err := b.c.DeadReplayAll(ctx, "dlq")
	if err != nil || n != 1 {
		t.Fatalf("replay all: %d %v", n, err)
	}
	n, err = b.c.DeadPurge(ctx, "dlq")
	if err != nil || n != 0 {
		t.Fatalf("purge: %d %v", n, err)
	}
}

func TestE2EErrors(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	_, err := b.c.Enqueue(ctx, "errs", []byte("x"), delayq.After(-time.Second))
	var ie *delayq.InvalidError
	if !errors.As(err, &ie) || ie.Field != "delay" || !errors.Is(err, delayq.ErrInvalid) {
		t.Fatalf("negative delay: %#v", err)
	}
	_, err = b.c.Enqueue(ctx, "errs", make([]byte, delayq.DefaultMaxPayload+1))
	if !errors.Is(err, delayq.ErrTooLarge) {
		t.Fatalf("large payload: %v", err)
	}
	mustSend(t, b.c, "errs", "x1", "x")
	msgs, err := b.c.Lease(ctx, "errs", delayq.LeaseRequest{})
	if err != nil || len(msgs) != 1 {
		t.Fatal(msgs, err)
	}
	if _, err := b.c.Reschedule(ctx, "errs", "x1", delayq.When{Delay: time.Hour}); !errors.Is(err, delayq.ErrConflict) {
		t.Fatalf("reschedule inflight: %v", err)
	}
}

func TestE2EWorkerOverHTTP(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	const n = 20
	for i := range n {
		mustSend(t, b.c, "http-work", "", "x")
		_ = i
	}
	slow := mustSend(t, b.c, "http-slow", "slow-1", "x")
	var handled atomic.Int32
	all := make(chan struct{})
	slowDone := make(chan struct{})
	w := delayq.NewWorker(b.c, delayq.WorkerConfig{Concurrency: 4, Lease: time.Second, Wait: time.Second, Logger: quiet})
	w.HandleFunc("http-work", func(ctx context.Context, m *delayq.Message) error {
		if handled.Add(1) == n {
			close(all)
		}
		return nil
	})
	var slowCalls atomic.Int32
	w.HandleFunc("http-slow", func(ctx context.Context, m *delayq.Message) error {
		slowCalls.Add(1)
		time.Sleep(3 * time.Second) // three leases' worth: extension keeps it ours (a 1 s lease leaves room for an extend call that a loaded machine delays)
		close(slowDone)
		return nil
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-all
	<-slowDone
	stopWorker(t, w)
	m := mustGet(t, b.c, "http-slow", slow.ID)
	if m.State != delayq.StateAcked || m.Attempt != 1 || slowCalls.Load() != 1 {
		t.Fatalf("slow message: state %q attempt %d calls %d", m.State, m.Attempt, slowCalls.Load())
	}
	info, err := b.c.Topic(context.Background(), "http-work")
	if err != nil || info.Counts != (delayq.TopicCounts{}) {
		t.Fatalf("after worker: %+v %v", info, err)
	}
}
