package delayq_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/openapitest"
)

// ackLeaseServer is a real server whose lease and batch-ack calls are
// counted; refuse, when set, answers a lease carrying acks instead of
// the server (nothing carried out).
type ackLeaseServer struct {
	c *delayq.Client

	mu             sync.Mutex
	leasesWithAcks int // leases that carried acks and reached the server
	acksInLeases   int
	ackCalls       int // POST …/acks
	acksInCalls    int
	refused        int
	refuse         func(n int) (status int, body string, ok bool) // n: leases with acks refused so far
}

func setupAckLease(t *testing.T) *ackLeaseServer {
	t.Helper()
	eng := newEngine(t)
	srv, err := httpapi.New(httpapi.Config{Queue: eng, Scheduler: eng, Ready: eng.Ready, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	s := &ackLeaseServer{}
	h := srv.Handler()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/lease") || strings.HasSuffix(r.URL.Path, "/acks")) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var in struct {
				Acks []json.RawMessage `json:"acks"`
			}
			_ = json.Unmarshal(body, &in)
			s.mu.Lock()
			switch {
			case strings.HasSuffix(r.URL.Path, "/acks"):
				s.ackCalls++
				s.acksInCalls += len(in.Acks)
			case len(in.Acks) > 0 && s.refuse != nil:
				if status, answer, ok := s.refuse(s.refused); ok {
					s.refused++
					s.mu.Unlock()
					w.Header().Set("Content-Type", "application/json")
					if status == http.StatusServiceUnavailable {
						w.Header().Set("Retry-After", "1")
					}
					w.WriteHeader(status)
					_, _ = io.WriteString(w, answer)
					return
				}
				fallthrough
			case len(in.Acks) > 0:
				s.leasesWithAcks++
				s.acksInLeases += len(in.Acks)
			}
			s.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(ts.Close)
	v := openapitest.New(t, httpapi.OpenAPIDocument)
	s.c, err = delayq.NewClient(ts.URL, delayq.WithHTTPClient(&http.Client{Transport: v.Transport(nil)}))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// run sends n messages due now, consumes them with a Worker whose acks
// wait up to a second for their batch, and checks that each was handled
// once and acked.
func (s *ackLeaseServer) run(t *testing.T, n int) {
	t.Helper()
	ctx := context.Background()
	for i := 0; i < n; i += 100 {
		reqs := make([]delayq.SendRequest, min(100, n-i))
		for j := range reqs {
			reqs[j] = delayq.SendRequest{Payload: []byte("x")}
		}
		if _, err := s.c.SendBatch(ctx, "q", reqs); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	seen := map[string]int{}
	var handled atomic.Int32
	all := make(chan struct{})
	w := delayq.NewWorker(s.c, delayq.WorkerConfig{Concurrency: 8, BatchSize: 8, Lease: 30 * time.Second, Wait: 200 * time.Millisecond, AckFlush: time.Second, Logger: quiet})
	w.HandleFunc("q", func(ctx context.Context, m *delayq.Message) error {
		mu.Lock()
		seen[m.ID]++
		mu.Unlock()
		if handled.Add(1) == int32(n) {
			close(all)
		}
		return nil
	})
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-all:
	case <-time.After(30 * time.Second):
		t.Fatalf("handled %d of %d", handled.Load(), n)
	}
	stopWorker(t, w)
	if len(seen) != n {
		t.Fatalf("%d messages handled, want %d", len(seen), n)
	}
	for id, k := range seen {
		if k != 1 {
			t.Fatalf("%s handled %d times", id, k)
		}
	}
	info, err := s.c.Topic(ctx, "q")
	if err != nil || info.Counts != (delayq.TopicCounts{}) {
		t.Fatalf("after the worker: %+v %v (every message acked: all counts zero)", info.Counts, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	t.Logf("%d acks in %d leases, %d in %d batch acks, %d leases with acks refused", s.acksInLeases, s.leasesWithAcks, s.acksInCalls, s.ackCalls, s.refused)
}

// TestWorkerAcksWithLease: a Worker on a Client sends the acks waiting
// for their batch with its next lease; every message is acked once
// handled, most of them that way.
func TestWorkerAcksWithLease(t *testing.T) {
	t.Parallel()
	s := setupAckLease(t)
	const n = 300
	s.run(t, n)
	if s.leasesWithAcks == 0 || s.acksInLeases < n/2 {
		t.Fatalf("%d acks went with %d leases: want most of the %d", s.acksInLeases, s.leasesWithAcks, n)
	}
}

// TestWorkerAckLeaseOldServer: a server that does not know a lease's
// acks refuses them (400 naming the field, as one older than them
// does): the Worker sends them apart from then on and loses none.
func TestWorkerAckLeaseOldServer(t *testing.T) {
	t.Parallel()
	s := setupAckLease(t)
	s.refuse = func(int) (int, string, bool) {
		return http.StatusBadRequest, `{"error":{"code":"invalid_argument","message":"invalid acks: is not a known field","field":"acks"}}`, true
	}
	s.run(t, 200)
	if s.refused != 1 || s.leasesWithAcks != 0 || s.acksInCalls < 200 {
		t.Fatalf("%d leases with acks refused, %d let through, %d acks in batch acks: want 1, 0 and every ack", s.refused, s.leasesWithAcks, s.acksInCalls)
	}
}

// TestWorkerAckLeaseFails: a lease carrying acks that fails leaves the
// acks' fate unknown; the Worker sends them again in a batch ack.
func TestWorkerAckLeaseFails(t *testing.T) {
	t.Parallel()
	s := setupAckLease(t)
	s.refuse = func(n int) (int, string, bool) {
		return http.StatusServiceUnavailable, `{"error":{"code":"unavailable","message":"store unavailable"}}`, n < 3
	}
	s.run(t, 200)
	if s.refused != 3 || s.ackCalls == 0 {
		t.Fatalf("%d leases with acks failed, %d batch acks: want 3, and their acks sent again", s.refused, s.ackCalls)
	}
}
