package reliability

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

type s11Results struct {
	Scenario         string         `json:"scenario"`
	Tier             string         `json:"tier"`
	Seed             uint64         `json:"seed"`
	Date             string         `json:"date"`
	Fault            string         `json:"fault"`
	Config           loadConfig     `json:"config"`
	FaultMS          float64        `json:"fault_ms"`
	Check            checkJSON      `json:"check"`
	AckInfo          int            `json:"acks_info"`
	AckRejected      int            `json:"acks_rejected_409"`
	ProbesDuring     int            `json:"probe_sends_during_fault"`
	StatusDuring     map[string]int `json:"probe_status_during_fault"`
	AnswerDuring     latencyJSON    `json:"probe_answer_time_during_fault"`
	ReadyzDuring     map[string]int `json:"readyz_status_during_fault"`
	ProbeSteady      latencyJSON    `json:"probe_latency_before_fault"`
	ResumeMS         float64        `json:"resume_ms"` // fault cleared → first ok probe send answered
	GoroutinesBefore int            `json:"goroutines_before"`
	GoroutinesPeak   int            `json:"goroutines_peak"`
	GoroutinesAfter  int            `json:"goroutines_after"`
	DrainMissing     int            `json:"drain_missing"`
	DurationS        float64        `json:"duration_s"`
}

// TestS11RedisUnreachable: Redis goes away under load while `delayq
// serve --redis` keeps running, in several ways: the process is killed
// (connections refused), frozen with SIGSTOP (connections hang), cut off
// by a network blackhole in a proxy (Redis alive), every connection
// reset over and over, and 200 ± 100 ms latency on every chunk. A probe
// sends every 20 ms and checks /readyz. Pass: during an outage every
// send answers 503 within Redis' 1 s timeout + slack, /readyz is 503;
// the server resumes by itself when Redis returns (time measured); the
// producers' retries with the same id leave exactly one message each;
// lost 0, unexpected 0, early 0, resurrected 0.
func TestS11RedisUnreachable(t *testing.T) {
	// The short tier leaves out reset (the cheapest to pass: every
	// failed call is answered at once and retried).
	faults := pick([]string{"kill", "freeze", "partition", "latency"}, []string{"kill", "freeze", "partition", "reset", "latency"})
	for _, f := range faults {
		t.Run(f, func(t *testing.T) { runS11(t, f) })
	}
}

func runS11(t *testing.T, fault string) {
	s := seed(t)
	t.Logf("tier %s seed %d fault %s", tier(), s, fault)
	rs := startRedis(t, "always")
	px := newFaultProxy(t, rs.Addr())
	p := newRedisProc(t, px.URL(), "--default-lease", "3s", "--default-max-attempts", "1000")
	p.start()
	pid := redisPID(t, rs.Addr())
	t.Cleanup(func() { stopCont(pid, false) })

	outage := pick(6*time.Second, 10*time.Second)
	lead := 1500 * time.Millisecond
	cfg := loadConfig{
		Topic: "s11", Messages: pick(1000, 5000), Producers: 4, Consumers: 4,
		MaxDelay: 2 * time.Second, Lease: 3 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: lead + outage + 1500*time.Millisecond, LeaseMax: 16,
	}
	c := client(t, p.url(), 10*time.Second)
	l := newLoad(t, cfg, c, s)
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	goroutines := func() int {
		n, _ := scrapeGauge(p.url(), "go_goroutines")
		return n
	}
	gBefore := 0
	var mu sync.Mutex
	gPeak := gBefore
	pr := startProber(t, l.rec, []string{p.url()}, func() {
		if g := goroutines(); g > 0 {
			mu.Lock()
			gPeak = max(gPeak, g)
			mu.Unlock()
		}
	})
	settledGoroutines := func() int {
		pr.closeIdle()
		time.Sleep(200 * time.Millisecond)
		return goroutines()
	}

	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	sleepCtx(ctx, lead)
	gBefore = settledGoroutines() // under load, before the fault
	mu.Lock()
	gPeak = gBefore
	mu.Unlock()
	faultAt := l.rec.Now()
	stopResets := make(chan struct{})
	switch fault {
	case "kill":
		rs.Kill()
	case "freeze":
		stopCont(pid, true)
	case "partition":
		px.setBlackhole(true)
	case "reset":
		go func() {
			for {
				px.reset()
				select {
				case <-stopResets:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}()
	case "latency":
		lr := newRand(s + 2)
		px.setLatency(func() time.Duration { return lr.Dur(100*time.Millisecond, 300*time.Millisecond) })
	}
	sleepCtx(ctx, outage)
	clearAt := l.rec.Now()
	switch fault {
	case "kill":
		rs.Restart()
	case "freeze":
		stopCont(pid, false)
	case "partition":
		px.setBlackhole(false)
	case "reset":
		close(stopResets)
	case "latency":
		px.setLatency(nil)
	}
	outageOp := fault == "kill" || fault == "freeze" || fault == "partition"
	if outageOp {
		l.rec.Down(faultAt, clearAt)
	}
	t.Logf("fault %s from %v to %v", fault, faultAt.Round(time.Millisecond), clearAt.Round(time.Millisecond))

	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second)
	gAfter := settledGoroutines() // under load again, long after the fault
	l.stopConsumers()
	cancel()
	pr.stop()
	probes, readyz := pr.ops()
	info, rejected := l.ackUncertain()
	// DownGrace: a promotion that failed during the outage is retried
	// after 1 s (engine retryAfterErr).
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: info + rejected, Slack: 2 * time.Millisecond, DownGrace: 2500 * time.Millisecond})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(append(res.Lost, res.Early...), 3))

	// Probes invoked while the fault was on, from 100 ms in (calls already
	// past Redis do not count) to 4.5 s before it ended (so a quick answer
	// comes before Redis returns); resume is the first ok answer after
	// the fault cleared.
	during := map[string]int{}
	var answer, steady []time.Duration
	resume := time.Duration(-1)
	for _, op := range probes {
		ok := op.status == 200 || op.status == 201
		switch {
		case op.at < faultAt:
			if ok {
				steady = append(steady, op.lat)
			}
		case op.at >= faultAt+100*time.Millisecond && op.at <= clearAt-4500*time.Millisecond:
			during[strconv.Itoa(op.status)]++
			answer = append(answer, op.lat)
		}
		if end := op.at + op.lat; ok && end > clearAt && (resume < 0 || end-clearAt < resume) {
			resume = end - clearAt
		}
	}
	readyDuring := map[string]int{}
	for _, op := range readyz {
		if op.at >= faultAt+100*time.Millisecond && op.at <= clearAt-4500*time.Millisecond {
			readyDuring[strconv.Itoa(op.status)]++
		}
	}
	out := s11Results{
		Scenario: "S11 redis unreachable", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Fault: fault,
		Config: l.cfg, FaultMS: ms(clearAt - faultAt), Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected,
		ProbesDuring: len(answer), StatusDuring: during, AnswerDuring: quantiles(answer), ReadyzDuring: readyDuring,
		ProbeSteady: quantiles(steady), ResumeMS: ms(resume),
		GoroutinesBefore: gBefore, GoroutinesPeak: gPeak, GoroutinesAfter: gAfter,
		DrainMissing: missing, DurationS: time.Since(t0).Seconds(),
	}
	writeResults(t, "S11-redis-"+fault, out)

	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	// No pile-up: what the fault left behind is idle keep-alive
	// connections of clients that retried (one goroutine each), not
	// goroutines stuck on Redis.
	if gPeak > 1000 || gAfter > 500 {
		t.Errorf("goroutines: %d before, peak %d, %d after the fault", gBefore, gPeak, gAfter)
	}
	if resume < 0 {
		t.Errorf("no probe send succeeded after the fault cleared")
	}
	if outageOp {
		if len(answer) == 0 || during["503"] != len(answer) {
			t.Errorf("sends during the outage answered %v, want all 503", during)
		}
		// Each Redis call is bounded by the store's 1 s timeout (dial,
		// read, pool wait); a send makes a few in a row (≈ 3 s seen),
		// plus slack for a loaded machine.
		if out.AnswerDuring.Max > 4500 {
			t.Errorf("sends during the outage took up to %.0f ms to answer, want ≤ 4.5 s", out.AnswerDuring.Max)
		}
		if readyDuring["200"] > 0 {
			t.Errorf("/readyz answered 200 during the outage: %v", readyDuring)
		}
		if len(res.SlowAfterRestart) > 0 {
			t.Errorf("%d messages that came due during the outage were delivered later than its end + 2.5 s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
		}
		if resume > 5*time.Second {
			t.Errorf("sends resumed %v after Redis returned, want ≤ 5 s", resume)
		}
	}
}

// statusOf is an error's HTTP status: 200 for nil, 0 for a transport error.
func statusOf(err error) int {
	if err == nil {
		return 200
	}
	var ae *delayq.APIError
	if errors.As(err, &ae) {
		return ae.StatusCode
	}
	return 0
}

// scrapeGauge reads one unlabelled sample from the server's /metrics.
func scrapeGauge(base, name string) (int, error) {
	hc := &http.Client{Timeout: 2 * time.Second}
	defer hc.CloseIdleConnections()
	res, err := hc.Get(base + "/metrics")
	if err != nil {
		return 0, err
	}
	defer res.Body.Close()
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return int(f), err
		}
	}
	return 0, fmt.Errorf("%s not in /metrics", name)
}
