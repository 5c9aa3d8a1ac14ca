package delayq_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// answerLost passes requests to the server and, for the first lose
// requests whose path ends in suffix, throws the server's answer away and
// reports a connection reset: the request was carried out, the client
// cannot know.
type answerLost struct {
	next   http.RoundTripper
	suffix string
	lose   atomic.Int32
	sent   atomic.Int32
}

func (a *answerLost) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := a.next.RoundTrip(r)
	if err != nil || !strings.HasSuffix(r.URL.Path, a.suffix) {
		return resp, err
	}
	a.sent.Add(1)
	if a.lose.Add(-1) < 0 {
		return resp, nil
	}
	_ = resp.Body.Close()
	return nil, errors.New("read: connection reset by peer (answer dropped by the test)")
}

// TestE2EAckRetriedAfterLostAnswer: the server acks, its answer is lost,
// the client retries the ack with the same receipt and is answered ok —
// single and batched — and the message is acked once, not redelivered.
func TestE2EAckRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	for _, batch := range []bool{false, true} {
		suffix := "/ack"
		if batch {
			suffix = "/acks"
		}
		lossy := &answerLost{next: b.hc.Transport, suffix: suffix}
		lossy.lose.Store(2)
		c, err := delayq.NewClient(b.url, delayq.WithHTTPClient(&http.Client{Transport: lossy}), delayq.WithRetry(3, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		id := "order-" + suffix[1:]
		if _, err := c.Enqueue(ctx, "lossy", []byte("x"), delayq.WithID(id)); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Lease(ctx, "lossy", delayq.LeaseRequest{Max: 1, Wait: 5 * time.Second})
		if err != nil || len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease: %v %v", ms, err)
		}
		if batch {
			errs, err := c.AckBatch(ctx, "lossy", []delayq.AckRequest{{ID: id, Receipt: ms[0].Receipt}})
			if err != nil || errs[0] != nil {
				t.Fatalf("batch ack with its first two answers lost: %v %v", errs, err)
			}
		} else if err := c.Ack(ctx, "lossy", id, ms[0].Receipt); err != nil {
			t.Fatalf("ack with its first two answers lost: %v", err)
		}
		if n := lossy.sent.Load(); n != 3 {
			t.Errorf("%s: %d attempts reached the server, want 3 (two answers lost)", suffix, n)
		}
		got, err := c.Get(ctx, "lossy", id)
		if err != nil || got.State != delayq.StateAcked || got.Attempt != 1 {
			t.Fatalf("after the retried ack: %+v %v; want acked after one delivery", got, err)
		}
	}
}

// TestE2ENackRetriedAfterLostAnswer: the server nacks, its answer is lost,
// the client retries the nack and is answered with the message as the
// first nack left it — one failure, due when that nack said — for a retry
// later and for dead letters.
func TestE2ENackRetriedAfterLostAnswer(t *testing.T) {
	t.Parallel()
	b := setupE2E(t)
	ctx := context.Background()
	for _, dead := range []bool{false, true} {
		lossy := &answerLost{next: b.hc.Transport, suffix: "/nack"}
		lossy.lose.Store(2)
		c, err := delayq.NewClient(b.url, delayq.WithHTTPClient(&http.Client{Transport: lossy}), delayq.WithRetry(3, time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		id, req, want := "retry-later", delayq.NackRequest{Reason: "downstream 502", HasDelay: true, Delay: time.Hour}, delayq.StateScheduled
		if dead {
			id, req, want = "to-dead", delayq.NackRequest{Reason: "account deleted", Dead: true}, delayq.StateDead
		}
		if _, err := c.Enqueue(ctx, "lossy-nack", []byte("x"), delayq.WithID(id)); err != nil {
			t.Fatal(err)
		}
		ms, err := c.Lease(ctx, "lossy-nack", delayq.LeaseRequest{Max: 1, Wait: 5 * time.Second})
		if err != nil || len(ms) != 1 || ms[0].ID != id {
			t.Fatalf("lease: %v %v", ms, err)
		}
		before := time.Now()
		m, err := c.Nack(ctx, "lossy-nack", id, ms[0].Receipt, req)
		if err != nil || m.State != want || m.Failures != 1 || m.LastError != req.Reason {
			t.Fatalf("nack with its first two answers lost: %+v %v", m, err)
		}
		if !dead && m.DeliverAt.Before(before.Add(59*time.Minute)) {
			t.Errorf("retried nack answered due at %v, want about an hour after the first nack", m.DeliverAt)
		}
		if n := lossy.sent.Load(); n != 3 {
			t.Errorf("%s: %d attempts reached the server, want 3 (two answers lost)", id, n)
		}
		got, err := c.Get(ctx, "lossy-nack", id)
		if err != nil || got.State != want || got.Failures != 1 || got.Attempt != 1 {
			t.Fatalf("after the retried nack: %+v %v; want %s after one failed delivery", got, err, want)
		}
	}
}
