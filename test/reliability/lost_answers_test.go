package reliability

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// answerDropper forwards every request and, for a share of sends, acks and nacks,
// throws the server's answer away and reports a reset connection: the
// request was carried out, and the client cannot know it (a proxy or a
// load balancer that failed between the server and the client).
type answerDropper struct {
	next       http.RoundTripper
	rng        *lockedRand
	share      float64
	sends      atomic.Int64 // answers dropped, by kind
	acks       atomic.Int64
	nacks      atomic.Int64
	seenSends  atomic.Int64 // requests that reached the server, by kind
	seenAcks   atomic.Int64
	seenNacks  atomic.Int64
	otherCalls atomic.Int64
}

func (d *answerDropper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	var dropped, seen *atomic.Int64
	switch p := r.URL.Path; {
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/ack"):
		dropped, seen = &d.acks, &d.seenAcks
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/nack"):
		dropped, seen = &d.nacks, &d.seenNacks
	case r.Method == http.MethodPost && strings.HasSuffix(p, "/messages"):
		dropped, seen = &d.sends, &d.seenSends
	default:
		d.otherCalls.Add(1)
		return resp, nil
	}
	seen.Add(1)
	if d.rng.Float64() >= d.share {
		return resp, nil
	}
	// The server answered; read it through so it surely acted, then lose it.
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	dropped.Add(1)
	return nil, errors.New("read: connection reset by peer (answer dropped by the test)")
}

type s35Results struct {
	Scenario     string     `json:"scenario"`
	Tier         string     `json:"tier"`
	Seed         uint64     `json:"seed"`
	Date         string     `json:"date"`
	Config       loadConfig `json:"config"`
	Share        float64    `json:"answers_dropped_share"`
	SendsDropped int64      `json:"send_answers_dropped"`
	AcksDropped  int64      `json:"ack_answers_dropped"`
	NacksDropped int64      `json:"nack_answers_dropped"`
	SendsSeen    int64      `json:"send_requests"`
	AcksSeen     int64      `json:"ack_requests"`
	NacksSeen    int64      `json:"nack_requests"`
	Nacked       int        `json:"ids_nacked"`
	Check        checkJSON  `json:"check"`
	AckInfo      int        `json:"acks_info"`
	AckRejected  int        `json:"acks_rejected_409"`
	DurationS    float64    `json:"duration_s"`
}

// TestS35LostAnswers: a fifth of the answers to sends, acks and nacks are
// lost after the server acted, and clients retry with the same id and the
// same receipt. Every send is created once (the retries are answered as
// duplicates of it), every ack and nack ends ok (a retry of a done ack or
// nack is answered as the first, not 409), a retried nack counts one
// failure, and with no lease running out nothing is delivered twice but
// the nacked ones (exactly twice), early or after its ack.
func TestS35LostAnswers(t *testing.T) {
	s := seed(t)
	t.Logf("tier %s seed %d", tier(), s)
	cfg := loadConfig{
		Topic: "s35", Messages: pick(4_000, 40_000), Producers: 4, Consumers: 4,
		MaxDelay: 2 * time.Second, Lease: 30 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: pick(6*time.Second, 40*time.Second), LeaseMax: 16,
	}
	p := newProc(t, "--default-lease", "30s", "--default-max-attempts", "1000")
	p.start()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	drop := &answerDropper{next: tr, rng: newRand(s + 7), share: 0.2}
	c, err := delayq.NewClient(p.url(), delayq.WithRetry(0, 0), delayq.WithTimeout(10*time.Second),
		delayq.WithHTTPClient(&http.Client{Transport: drop}))
	if err != nil {
		t.Fatal(err)
	}
	l := newLoad(t, cfg, c, s)
	// One id in ten is nacked on its first delivery, then acked; its
	// second delivery must show one failure, however often the nack was
	// retried.
	nackFirst := func(id string) bool { _, k, _ := parseMsgID(id); return k%10 == 3 }
	l.handle = func(m *delayq.Message) bool {
		if !nackFirst(m.ID) {
			return true
		}
		if m.Attempt > 1 && m.Failures != 1 {
			t.Errorf("%s delivered again after %d failures, want 1 (a retried nack counted again?)", m.ID, m.Failures)
		}
		return m.Attempt > 1
	}
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	l.produce(ctx)
	missing := l.drain(cfg.MaxDelay+30*time.Second, nil)
	// Let the last acks finish their retries (stopping the consumers
	// cancels them), the last nacked ids come due again (the backoff's
	// second), and anything delivered twice show.
	redeliveryDue := func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		n := map[string]int{}
		for _, d := range l.deliveries {
			n[d.id]++
		}
		for id, k := range n {
			if nackFirst(id) && k < 2 {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(20 * time.Second); (l.acksUnfinished() > 0 || redeliveryDue()) && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	// No kill, no lease running out: no duplicate is allowed.
	res := history.Check(l.rec.Ops(), nil, history.Options{DupBound: 0, Slack: 2 * time.Millisecond})
	t.Logf("checker: %v", res)
	t.Logf("answers dropped: %d of %d sends, %d of %d acks, %d of %d nacks", drop.sends.Load(), drop.seenSends.Load(), drop.acks.Load(), drop.seenAcks.Load(), drop.nacks.Load(), drop.seenNacks.Load())
	deliveries := map[string]int{}
	l.mu.Lock()
	for _, d := range l.deliveries {
		deliveries[d.id]++
	}
	l.mu.Unlock()
	nacked, wrongCount := 0, 0
	for id, n := range deliveries {
		want := 1
		if nackFirst(id) {
			want = 2
			nacked++
		}
		if n != want {
			wrongCount++
			if wrongCount <= 5 {
				t.Errorf("%s delivered %d times, want %d", id, n, want)
			}
		}
	}
	writeResults(t, "S35-lost-answers", s35Results{
		Scenario: "S35 lost answers", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Config: l.cfg,
		Share: drop.share, SendsDropped: drop.sends.Load(), AcksDropped: drop.acks.Load(), NacksDropped: drop.nacks.Load(),
		SendsSeen: drop.seenSends.Load(), AcksSeen: drop.seenAcks.Load(), NacksSeen: drop.seenNacks.Load(), Nacked: nacked,
		Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected, DurationS: time.Since(t0).Seconds(),
	})
	if drop.sends.Load() == 0 || drop.acks.Load() == 0 || drop.nacks.Load() == 0 {
		t.Fatalf("no answer was dropped (sends %d, acks %d, nacks %d): nothing was tested", drop.sends.Load(), drop.acks.Load(), drop.nacks.Load())
	}
	if wrongCount > 0 {
		t.Errorf("%d ids delivered a wrong number of times (nacked ones twice, others once)", wrongCount)
	}
	if res.Acked != cfg.Messages || res.Delivered != cfg.Messages || missing != 0 {
		t.Errorf("%d sent ok, %d delivered, %d missing after the drain; want all %d", res.Acked, res.Delivered, missing, cfg.Messages)
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if info+rejected != 0 {
		t.Errorf("%d acks or nacks never ended ok (%d refused 409 or 404, %d unanswered): a retried ack or nack must be answered as the first", info+rejected, rejected, info)
	}
	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
}

// acksUnfinished counts deliveries whose ack has not ended, ok or refused.
func (l *load) acksUnfinished() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, d := range l.deliveries {
		if d.ackOK < 0 && !d.nacked && !d.ackRejected {
			n++
		}
	}
	return n
}
