package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/test/internal/history"
)

type restartJSON struct {
	KillAtMS      float64 `json:"kill_at_ms"`
	Outstanding   int     `json:"leases_outstanding_at_kill"`
	RecoveryMS    float64 `json:"recovery_ms"`
	DowntimeMS    float64 `json:"downtime_ms"`
	ReadyWithin5s bool    `json:"ready_within_5s"`
}

type s1Results struct {
	Scenario       string        `json:"scenario"`
	Tier           string        `json:"tier"`
	Seed           uint64        `json:"seed"`
	Date           string        `json:"date"`
	Config         loadConfig    `json:"config"`
	Cycles         int           `json:"kill_cycles"`
	Check          checkJSON     `json:"check"`
	AckInfo        int           `json:"acks_info"`
	AckRejected    int           `json:"acks_rejected_409"`
	Restarts       []restartJSON `json:"restarts"`
	SendsPerSec    float64       `json:"sends_per_sec"`
	DurationS      float64       `json:"duration_s"`
	DeadLetters    int           `json:"dead_letters"`
	DrainMissing   int           `json:"drain_missing"`
	SendErrors     []string      `json:"send_errors,omitempty"`
	FirstStartupMS float64       `json:"first_startup_ms"`
}

// TestS1Kill9Loop: kill -9 the server at random times under load, restart
// at once; nothing acked may be lost, nothing delivered early or after its
// ack, duplicates only as the faults allow.
func TestS1Kill9Loop(t *testing.T) {
	s := seed(t)
	t.Logf("tier %s seed %d", tier(), s)
	cycles := pick(3, 20)
	cfg := loadConfig{
		Topic: "s1", Messages: pick(10_000, 100_000), Producers: 8, Consumers: 8,
		MaxDelay: 10 * time.Second, Lease: 5 * time.Second, MaxWork: 50 * time.Millisecond,
		SendSpan: time.Duration(cycles) * 7750 * time.Millisecond, LeaseMax: 16,
	}
	p := newProc(t, "--default-lease", "5s", "--default-max-attempts", "1000")
	startup := p.start()
	c := client(t, p.url(), 10*time.Second)
	l := newLoad(t, cfg, c, s)
	krng := newRand(s + 1)
	t0 := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	var restarts []restartJSON
	dupBound := 0
	for i := 0; i < cycles; i++ {
		sleepCtx(ctx, krng.Dur(500*time.Millisecond, 15*time.Second))
		killAt := l.rec.Now()
		p.kill9()
		out := l.outstandingAt(killAt)
		dupBound += out
		rec, err := p.tryStart(30 * time.Second)
		if err != nil {
			t.Fatalf("restart %d: %v", i+1, err)
		}
		up := l.rec.Now()
		l.rec.Down(killAt, up)
		restarts = append(restarts, restartJSON{KillAtMS: ms(killAt), Outstanding: out, RecoveryMS: ms(rec), DowntimeMS: ms(up - killAt), ReadyWithin5s: rec <= 5*time.Second})
		if rec > 5*time.Second {
			t.Errorf("restart %d: ready after %v, want ≤ 5s", i+1, rec)
		}
		t.Logf("kill %d at %v: %d leases out; ready again after %v", i+1, killAt.Round(time.Millisecond), out, rec.Round(time.Millisecond))
	}
	<-prodDone
	// Final drain, no faults: every acked send must come out (longest
	// delay + one lease for leases lost to the last kill + margin).
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second) // let redeliveries of the last kill's leases show
	l.stopConsumers()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	dead := deadIDs(dctx, t, c, cfg.Topic)
	deadSet := map[string]bool{}
	for id := range dead {
		deadSet[id] = true
	}
	info, rejected := l.ackUncertain()
	dupBound += info + rejected
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{Dead: deadSet, DupBound: dupBound, Slack: 2 * time.Millisecond, DownGrace: time.Second})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(res.Early, 3))

	out := s1Results{
		Scenario: "S1 kill -9 loop", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Config: l.cfg, Cycles: cycles,
		Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected, Restarts: restarts,
		SendsPerSec: float64(res.Acked) / l.sendEnd.Sub(l.sendStart).Seconds(), DurationS: time.Since(t0).Seconds(),
		DeadLetters: len(dead), DrainMissing: missing, SendErrors: first(l.sendErrs, 20), FirstStartupMS: ms(startup),
	}
	writeResults(t, "S1-kill9-loop", out)
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages that came due while the server was down were delivered later than restart + 1s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
	}
}
