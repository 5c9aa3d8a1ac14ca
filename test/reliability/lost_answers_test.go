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

// answerDropper forwards every request and, for a share of sends and acks,
// throws the server's answer away and reports a reset connection: the
// request was carried out, and the client cannot know it (a proxy or a
// load balancer that failed between the server and the client).
type answerDropper struct {
	next       http.RoundTripper
	rng        *lockedRand
	share      float64
	sends      atomic.Int64 // answers dropped, by kind
	acks       atomic.Int64
	seenSends  atomic.Int64 // requests that reached the server, by kind
	seenAcks   atomic.Int64
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
	SendsSeen    int64      `json:"send_requests"`
	AcksSeen     int64      `json:"ack_requests"`
	Check        checkJSON  `json:"check"`
	AckInfo      int        `json:"acks_info"`
	AckRejected  int        `json:"acks_rejected_409"`
	DurationS    float64    `json:"duration_s"`
}

// TestS35LostAnswers: a fifth of the answers to sends and acks are lost
// after the server acted, and clients retry with the same id and the same
// receipt. Every send is created once (the retries are answered as
// duplicates of it), every ack ends ok (a retry of a done ack is answered
// as the first, not 409), and with no lease running out nothing is
// delivered twice, early or after its ack.
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
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	l.produce(ctx)
	missing := l.drain(cfg.MaxDelay+30*time.Second, nil)
	// Let the last acks finish their retries (stopping the consumers
	// cancels them), and anything delivered twice show.
	for deadline := time.Now().Add(20 * time.Second); l.acksUnfinished() > 0 && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(time.Second)
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	// No kill, no lease running out: no duplicate is allowed.
	res := history.Check(l.rec.Ops(), nil, history.Options{DupBound: 0, Slack: 2 * time.Millisecond})
	t.Logf("checker: %v", res)
	t.Logf("answers dropped: %d of %d sends, %d of %d acks", drop.sends.Load(), drop.seenSends.Load(), drop.acks.Load(), drop.seenAcks.Load())
	writeResults(t, "S35-lost-answers", s35Results{
		Scenario: "S35 lost answers", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Config: l.cfg,
		Share: drop.share, SendsDropped: drop.sends.Load(), AcksDropped: drop.acks.Load(), SendsSeen: drop.seenSends.Load(), AcksSeen: drop.seenAcks.Load(),
		Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected, DurationS: time.Since(t0).Seconds(),
	})
	if drop.sends.Load() == 0 || drop.acks.Load() == 0 {
		t.Fatalf("no answer was dropped (sends %d, acks %d): nothing was tested", drop.sends.Load(), drop.acks.Load())
	}
	if res.Acked != cfg.Messages || res.Delivered != cfg.Messages || missing != 0 {
		t.Errorf("%d sent ok, %d delivered, %d missing after the drain; want all %d", res.Acked, res.Delivered, missing, cfg.Messages)
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if info+rejected != 0 {
		t.Errorf("%d acks never ended ok (%d refused 409 or 404, %d unanswered): a retried ack must be answered as the first", info+rejected, rejected, info)
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
