package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/delayq/delayq/internal/wire"
)

// consumeCalls is a real server that counts the calls consume makes: its
// leases (and the acks they carry), batch acks and single acks. With
// refuseAcks it answers a lease carrying acks as a server older than that
// field does (400 naming it).
type consumeCalls struct {
	url        string
	refuseAcks bool

	mu                                    sync.Mutex
	leases, leaseAcks, refused            int
	batchAcks, batchAcked, singleAckCalls int
}

func setupConsumeCalls(t *testing.T, refuseAcks bool) *consumeCalls {
	t.Helper()
	c := &consumeCalls{refuseAcks: refuseAcks}
	c.url = setupCLIWrapped(t, func(api http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodPost && !c.count(w, r) {
				return
			}
			api.ServeHTTP(w, r)
		})
	}).url
	return c
}

// count counts a POST; false when it answered the call itself (a lease
// carrying acks, refused as an older server does).
func (c *consumeCalls) count(w http.ResponseWriter, r *http.Request) bool {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	var in struct {
		Acks []json.RawMessage `json:"acks"`
	}
	_ = json.Unmarshal(body, &in)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.HasSuffix(r.URL.Path, "/lease") && len(in.Acks) > 0 && c.refuseAcks:
		c.refused++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = io.WriteString(w, `{"error":{"code":"invalid_argument","message":"invalid acks: is not a known field","field":"acks"}}`)
		return false
	case strings.HasSuffix(r.URL.Path, "/lease"):
		c.leases++
		c.leaseAcks += len(in.Acks)
	case strings.HasSuffix(r.URL.Path, "/acks"):
		c.batchAcks++
		c.batchAcked += len(in.Acks)
	case strings.HasSuffix(r.URL.Path, "/ack"):
		c.singleAckCalls++
	}
	return true
}

// consumeAll sends n messages to topic, consumes them all 10 per lease
// and checks that each was printed once and the topic holds nothing.
func (c *consumeCalls) consumeAll(t *testing.T, topic string, n int) {
	t.Helper()
	b := &cliBundle{url: c.url}
	for i := range n {
		b.run(t, "send", topic, "p", "--id", "m"+strconv.Itoa(i)).ok(t)
	}
	r := b.run(t, "consume", topic, "--count", strconv.Itoa(n), "--max", "10", "--wait", "1s").ok(t)
	seen := map[string]int{}
	for line := range strings.Lines(r.stdout) {
		seen[strings.Fields(line)[0]]++
	}
	for i := range n {
		if id := "m" + strconv.Itoa(i); seen[id] != 1 {
			t.Errorf("%s printed %d times, want once", id, seen[id])
		}
	}
	r = b.run(t, "stats", topic, "--json").ok(t)
	if tp := decodeJSON[wire.Topic](t, r.stdout); tp.Counts != (wire.Counts{}) {
		t.Fatalf("after consuming all %d: %+v, want every message acked", n, tp.Counts)
	}
}

// TestCLIConsumeAcksWithLease: consume acks what it printed with its next
// lease (one call where an ack and a lease made two), and what the last
// lease brought in one batch ack when --count is reached.
func TestCLIConsumeAcksWithLease(t *testing.T) {
	t.Parallel()
	c := setupConsumeCalls(t, false)
	c.consumeAll(t, "work", 30)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.singleAckCalls != 0 || c.leaseAcks+c.batchAcked != 30 || c.leaseAcks < 10 || c.batchAcks > 3 {
		t.Fatalf("%d single acks, %d acks with %d leases, %d in %d batch acks: want none single, at least 10 with leases, all 30 acked", c.singleAckCalls, c.leaseAcks, c.leases, c.batchAcked, c.batchAcks)
	}
}

// TestCLIConsumeAcksOldServer: a server that refuses acks with a lease
// gets them in batch acks, before consume's next lease, from then on.
func TestCLIConsumeAcksOldServer(t *testing.T) {
	t.Parallel()
	c := setupConsumeCalls(t, true)
	c.consumeAll(t, "work", 30)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.refused != 1 || c.leaseAcks != 0 || c.batchAcked != 30 || c.singleAckCalls != 0 {
		t.Fatalf("%d leases with acks refused, %d acks let through with leases, %d in batch acks, %d single: want 1, 0, 30, 0", c.refused, c.leaseAcks, c.batchAcked, c.singleAckCalls)
	}
}

// TestCLIConsumeSlowExecAcksAtOnce: an ack waits at most 100 ms for the
// next lease, so a slow --exec does not hold the acks of a lease's first
// messages (and let their leases run out) while it runs the rest.
func TestCLIConsumeSlowExecAcksAtOnce(t *testing.T) {
	t.Parallel()
	c := setupConsumeCalls(t, false)
	b := &cliBundle{url: c.url}
	for i := range 3 {
		b.run(t, "send", "slow", "p", "--id", "s"+strconv.Itoa(i)).ok(t)
	}
	b.run(t, "consume", "slow", "--count", "3", "--max", "3", "--wait", "1s", "--exec", "cat >/dev/null; sleep 0.2").ok(t)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.batchAcks != 3 || c.batchAcked != 3 || c.leaseAcks != 0 {
		t.Fatalf("%d batch acks of %d, %d acks with leases: want each ack sent after its message, 3 of 1", c.batchAcks, c.batchAcked, c.leaseAcks)
	}
}

// TestCLIConsumeRefusedAck: an ack the server refuses (the message was
// cancelled while consume handled it) ends consume with an error naming
// it, whether the ack went with the next lease (--count 2) or in the
// last batch ack (--count 1).
func TestCLIConsumeRefusedAck(t *testing.T) {
	t.Parallel()
	for _, count := range []string{"1", "2"} {
		t.Run("count"+count, func(t *testing.T) {
			t.Parallel()
			var b *cliBundle
			var once sync.Once
			b = setupCLIWrapped(t, func(api http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if !strings.HasSuffix(r.URL.Path, "/lease") {
						api.ServeHTTP(w, r)
						return
					}
					rec := httptest.NewRecorder()
					api.ServeHTTP(rec, r)
					var out wire.MessagesResponse
					if json.Unmarshal(rec.Body.Bytes(), &out) == nil && len(out.Messages) > 0 {
						once.Do(func() {
							if _, err := b.eng.Cancel(r.Context(), "t", out.Messages[0].ID); err != nil {
								t.Errorf("cancel %s: %v", out.Messages[0].ID, err)
							}
						})
					}
					maps.Copy(w.Header(), rec.Header())
					w.WriteHeader(rec.Code)
					_, _ = w.Write(rec.Body.Bytes())
				})
			})
			for _, id := range []string{"m0", "m1"} {
				b.run(t, "send", "t", "p", "--id", id).ok(t)
			}
			r := b.run(t, "consume", "t", "--count", count, "--max", "1", "--wait", "1s")
			if r.code == exitOK || !strings.Contains(r.stderr, "t/m0 not found") || !strings.HasPrefix(r.stdout, "m0") {
				t.Fatalf("exit %d, stderr %q, stdout %q: want m0 printed, then its refused ack named", r.code, r.stderr, r.stdout)
			}
		})
	}
}
