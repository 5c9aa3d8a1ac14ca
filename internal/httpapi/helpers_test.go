package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/openapitest"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/wire"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is one server on an engine with a memstore and the real clock.
// Requests made with do and roundTrip are checked against the API's
// OpenAPI document (internal/openapitest).
type bundle struct {
	eng *engine.Engine
	spy *spyQueue
	srv *Server
	ts  *httptest.Server

	hc       *http.Client // ts's client, through the validator
	apiCalls atomic.Int64 // API exchanges made through hc
}

func setup(t *testing.T, mod func(*Config), subs ...engine.Subscription) *bundle {
	t.Helper()
	return setupEngine(t, engine.Config{Subscriptions: subs}, mod)
}

// setupEngine is setup with the engine configured by ecfg (its store is a
// fresh memstore unless ecfg gives one, which the bundle closes); the
// server gets the engine's limits.
func setupEngine(t *testing.T, ecfg engine.Config, mod func(*Config)) *bundle {
	t.Helper()
	if ecfg.Store == nil {
		ecfg.Store = memstore.New()
	}
	st := ecfg.Store
	eng, err := engine.Open(context.Background(), ecfg)
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{eng: eng, spy: &spyQueue{Queue: eng}}
	cfg := Config{Queue: b.spy, Admin: eng, Ready: eng.Ready, Limits: eng.Limits(), OwnTopicSettings: eng.TopicOwnSettings}
	if mod != nil {
		mod(&cfg)
	}
	if b.srv, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	v := openapitest.New(t, OpenAPIDocument)
	b.ts = httptest.NewServer(b.srv.Handler())
	b.hc = &http.Client{Transport: v.Transport(b.ts.Client().Transport)}
	t.Cleanup(func() {
		b.ts.Close()
		eng.Close(context.Background())
		st.Close()
		if got, want := int64(v.Checked()), b.apiCalls.Load(); got != want {
			t.Errorf("the API document checked %d of the %d API requests made", got, want)
		}
	})
	return b
}

// resp is an answer, decoded loosely.
type resp struct {
	status int
	header http.Header
	raw    []byte
	err    wire.ErrorBody // set on error answers
}

func (b *bundle) do(t *testing.T, method, path, body string, hdr ...string) resp {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, b.ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	if body != "" && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json") // as every client must
	}
	return b.roundTrip(t, req)
}

func (b *bundle) roundTrip(t *testing.T, req *http.Request) resp {
	t.Helper()
	hc, api := b.hc, openapitest.IsAPI(req)
	if hc == nil { // a bundle around another handler (the debug one): not the API
		hc, api = b.ts.Client(), false
	}
	res, err := hc.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer res.Body.Close()
	if api {
		b.apiCalls.Add(1)
	}
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	r := resp{status: res.StatusCode, header: res.Header, raw: raw}
	if res.StatusCode >= 400 {
		var er wire.ErrorResponse
		if err := json.Unmarshal(raw, &er); err != nil {
			t.Fatalf("%s %s: %d answer is not the error shape: %q", req.Method, req.URL.Path, res.StatusCode, raw)
		}
		r.err = er.Error
	}
	return r
}

// into decodes the answer (strictly: the server's answers must match wire).
func into[T any](t *testing.T, r resp) T {
	t.Helper()
	var v T
	dec := json.NewDecoder(bytes.NewReader(r.raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("decode %T from %q: %v", v, r.raw, err)
	}
	return v
}

func want(t *testing.T, r resp, status int) {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d; body %s", r.status, status, r.raw)
	}
}

// snapshot is the observable queue state, to prove a request changed nothing.
type snapshot struct {
	Topics []domain.TopicInfo
	Msgs   map[string]*domain.Message
}

func (b *bundle) snapshot(t *testing.T, refs ...[2]string) snapshot {
	t.Helper()
	ctx := context.Background()
	topics, err := b.eng.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := snapshot{Topics: topics, Msgs: map[string]*domain.Message{}}
	for _, ref := range refs {
		m, err := b.eng.Get(ctx, ref[0], ref[1])
		if err != nil {
			t.Fatalf("get %v: %v", ref, err)
		}
		s.Msgs[ref[0]+"/"+ref[1]] = m
	}
	return s
}

func (s snapshot) equal(o snapshot) bool { return reflect.DeepEqual(s, o) }

// spyQueue counts calls that may change state and can block or observe
// Send and Lease for shutdown and disconnect tests.
type spyQueue struct {
	domain.Queue
	mu        sync.Mutex
	mutations int

	sendGate     chan struct{} // when set, Send waits for it to close
	sendEntered  chan struct{}
	leaseEntered chan struct{} // when set, signalled when Lease starts
	leaseDone    chan error    // when set, gets Lease's error
	// holdLease makes the next Lease that leases something signal
	// leaseHeld, then return only once its caller has gone (its context
	// ended): a client hanging up while its messages were being leased.
	holdLease atomic.Bool
	leaseHeld chan struct{}
}

func (q *spyQueue) mutated() {
	q.mu.Lock()
	q.mutations++
	q.mu.Unlock()
}

func (q *spyQueue) Mutations() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.mutations
}

func (q *spyQueue) Send(ctx context.Context, topic string, req domain.SendRequest) (*domain.Message, error) {
	q.mutated()
	if q.sendGate != nil {
		close(q.sendEntered)
		<-q.sendGate
	}
	return q.Queue.Send(ctx, topic, req)
}

func (q *spyQueue) SendBatch(ctx context.Context, topic string, reqs []domain.SendRequest) ([]domain.SendResult, error) {
	q.mutated()
	return q.Queue.SendBatch(ctx, topic, reqs)
}

func (q *spyQueue) Cancel(ctx context.Context, topic, id string) (*domain.Message, error) {
	q.mutated()
	return q.Queue.Cancel(ctx, topic, id)
}

func (q *spyQueue) Reschedule(ctx context.Context, topic, id string, w domain.When) (*domain.Message, error) {
	q.mutated()
	return q.Queue.Reschedule(ctx, topic, id, w)
}

func (q *spyQueue) Lease(ctx context.Context, topic string, req domain.LeaseRequest) ([]*domain.Message, error) {
	q.mutated()
	if q.leaseEntered != nil {
		q.leaseEntered <- struct{}{}
	}
	msgs, err := q.Queue.Lease(ctx, topic, req)
	if len(msgs) > 0 && q.holdLease.CompareAndSwap(true, false) {
		q.leaseHeld <- struct{}{}
		<-ctx.Done()
	}
	if q.leaseDone != nil {
		q.leaseDone <- err
	}
	return msgs, err
}

func (q *spyQueue) Ack(ctx context.Context, topic, id, receipt string) error {
	q.mutated()
	return q.Queue.Ack(ctx, topic, id, receipt)
}

func (q *spyQueue) AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error) {
	q.mutated()
	return q.Queue.AckBatch(ctx, topic, acks)
}

func (q *spyQueue) Nack(ctx context.Context, topic, id, receipt string, req domain.NackRequest) (*domain.Message, error) {
	q.mutated()
	return q.Queue.Nack(ctx, topic, id, receipt, req)
}

func (q *spyQueue) Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*domain.Message, error) {
	q.mutated()
	return q.Queue.Extend(ctx, topic, id, receipt, lease)
}

func (q *spyQueue) SetTopicSettings(ctx context.Context, topic string, s domain.TopicSettings) (*domain.TopicSettings, error) {
	q.mutated()
	return q.Queue.SetTopicSettings(ctx, topic, s)
}

func (q *spyQueue) DeadReplay(ctx context.Context, topic, id string) (*domain.Message, error) {
	q.mutated()
	return q.Queue.DeadReplay(ctx, topic, id)
}

func (q *spyQueue) DeadReplayAll(ctx context.Context, topic string) (int, error) {
	q.mutated()
	return q.Queue.DeadReplayAll(ctx, topic)
}

func (q *spyQueue) DeadDelete(ctx context.Context, topic, id string) error {
	q.mutated()
	return q.Queue.DeadDelete(ctx, topic, id)
}

func (q *spyQueue) DeadPurge(ctx context.Context, topic string) (int, error) {
	q.mutated()
	return q.Queue.DeadPurge(ctx, topic)
}
