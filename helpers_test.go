package delayq_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/memstore"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// newEngine opens an in-process engine on a memstore with the real clock.
func newEngine(t *testing.T) *engine.Engine {
	t.Helper()
	e, err := engine.Open(context.Background(), engine.Config{Store: memstore.New(), Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := e.Close(context.Background()); err != nil {
			t.Error(err)
		}
	})
	return e
}

// recordingQueue wraps a Queue and records what the worker asks of it.
type recordingQueue struct {
	delayq.Queue
	mu         sync.Mutex
	leaseMax   []int
	ackBatches []int
	acks       int
	extends    int
}

func (q *recordingQueue) Lease(ctx context.Context, topic string, req delayq.LeaseRequest) ([]*delayq.Message, error) {
	q.mu.Lock()
	q.leaseMax = append(q.leaseMax, req.Max)
	q.mu.Unlock()
	return q.Queue.Lease(ctx, topic, req)
}

func (q *recordingQueue) AckBatch(ctx context.Context, topic string, acks []delayq.AckRequest) ([]error, error) {
	q.mu.Lock()
	q.ackBatches = append(q.ackBatches, len(acks))
	q.mu.Unlock()
	return q.Queue.AckBatch(ctx, topic, acks)
}

func (q *recordingQueue) Ack(ctx context.Context, topic, id, receipt string) error {
	q.mu.Lock()
	q.acks++
	q.mu.Unlock()
	return q.Queue.Ack(ctx, topic, id, receipt)
}

func (q *recordingQueue) Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*delayq.Message, error) {
	q.mu.Lock()
	q.extends++
	q.mu.Unlock()
	return q.Queue.Extend(ctx, topic, id, receipt, lease)
}

// eventually polls cond until it holds or 10s pass. Used only to wait for
// state reached asynchronously by the server side (an ack landing), never
// to assert timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func mustSend(t *testing.T, q delayq.Queue, topic, id, payload string, opts ...delayq.SendOption) *delayq.Message {
	t.Helper()
	if id != "" {
		opts = append(opts, delayq.WithID(id))
	}
	m, err := q.Send(context.Background(), topic, delayq.NewSendRequest([]byte(payload), opts...))
	if err != nil {
		t.Fatalf("send %s/%s: %v", topic, id, err)
	}
	return m
}

func mustGet(t *testing.T, q delayq.Queue, topic, id string) *delayq.Message {
	t.Helper()
	m, err := q.Get(context.Background(), topic, id)
	if err != nil {
		t.Fatalf("get %s/%s: %v", topic, id, err)
	}
	return m
}

func stopWorker(t *testing.T, w *delayq.Worker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("stop: %v", err)
	}
}
