package reliability

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// s2Failpoints are the `// gofail:` points in internal/store/pebblestore,
// mapped to scenario S2's list in docs/reliability.md. Each one's body kills the process
// at that point: it panics in a new goroutine (unrecoverable) and blocks
// the current one, so no reply is sent and no deferred code runs. (A
// bare `panic` term would be recovered by the server's handler middleware
// and answered 500: a test of panic recovery, not of a crash.)
var s2Failpoints = []struct{ name, where string }{
	{"pebbleInsertBeforeBatch", "send: after decode, before the batch is built"},
	{"pebbleInsertBeforeSync", "send: batch written (applied to the WAL), before its fsync"},
	{"pebbleInsertAfterSync", "send: after the fsync, before the reply"},
	{"pebblePromoteMid", "promotion: batch applied (not synced), before marks and wake-ups"},
	{"pebbleLeaseBeforeReply", "lease: lease batch applied, before the response"},
	{"pebbleUpdateAfterSync", "ack/nack/cancel: after the fsync (ack's delete of the lease), before the reply"},
	{"pebbleDeadMove", "nack or expiry at max attempts: during the move to the dead letters"},
	{"pebbleDedupRecord", "ack: while building the acked (dedup) record, before its batch"},
}

type s2Cycle struct {
	Failpoint     string  `json:"failpoint"`
	Fired         bool    `json:"fired"`
	FireAfterMS   float64 `json:"fire_after_ms"`
	Outstanding   int     `json:"leases_outstanding_at_crash"`
	InfoSends     int     `json:"sends_in_flight_at_crash"` // ended info in this cycle
	RecoveryMS    float64 `json:"recovery_ms"`
	ExitStatus    string  `json:"exit_status"`
	armedAt, upAt time.Duration
}

type s2Failpoint struct {
	Name        string      `json:"name"`
	Where       string      `json:"where"`
	Fired       int         `json:"fired"`
	Armed       int         `json:"armed"`
	FireAfter   latencyJSON `json:"fire_after"`
	InfoSends   int         `json:"sends_in_flight_at_crash"` // attempts that never got an answer
	Outstanding int         `json:"leases_outstanding_at_crash"`
}

type s2Results struct {
	Scenario     string        `json:"scenario"`
	Tier         string        `json:"tier"`
	Seed         uint64        `json:"seed"`
	Date         string        `json:"date"`
	Config       loadConfig    `json:"config"`
	Reps         int           `json:"reps_per_failpoint"`
	BuildS       float64       `json:"gofail_build_s"`
	Failpoints   []s2Failpoint `json:"failpoints"`
	Cycles       []s2Cycle     `json:"cycles"`
	Check        checkJSON     `json:"check"`
	AckInfo      int           `json:"acks_info"`
	AckRejected  int           `json:"acks_rejected_409"`
	DeadLetters  int           `json:"dead_letters"`
	PoisonDead   int           `json:"poison_dead"`
	HealthyDead  int           `json:"healthy_dead"`
	DrainMissing int           `json:"drain_missing"`
	DurationS    float64       `json:"duration_s"`
}

// TestS2CrashAtFailpoints: a delayq binary built with gofail failpoints in
// the store's write paths is crashed at each point in turn (arm, wait
// until the load hits it and the process dies, restart unarmed), reps
// times per point (short 2, full 10), under a load of sends, long-poll
// leases, acks, and poison messages that nack into the dead letters. Pass:
// the S1 checker (lost 0, unexpected 0, early 0, resurrected 0, duplicates
// within the bound); sends that died before their reply are info, so their
// message may or may not exist.
func TestS2CrashAtFailpoints(t *testing.T) {
	s := seed(t)
	reps := pick(2, 10)
	t.Logf("tier %s seed %d, %d crashes per failpoint", tier(), s, reps)
	t0 := time.Now()
	fpBin := buildGofailBinary(t)
	buildS := time.Since(t0).Seconds()
	// The harness starts `bin`; S2 swaps in its own build for its duration
	// (the scenarios do not run in parallel).
	saved := bin
	bin = fpBin
	t.Cleanup(func() { bin = saved })
	fpAddr := freeAddr(t)
	t.Setenv("GOFAIL_HTTP", fpAddr)

	const maxAttempts = 3
	cfg := loadConfig{
		Topic: "s2", Messages: 1_000_000, Producers: 4, Consumers: 4,
		MaxDelay: 2 * time.Second, Lease: 3 * time.Second, MaxWork: 20 * time.Millisecond,
		SendSpan: 1_000_000 * time.Second / 400, LeaseMax: 16, // ≈ 400 sends/s until the cycles end
	}
	p := newProc(t, "--default-lease", "3s")
	p.start()
	fpc := &http.Client{Timeout: 2 * time.Second}
	defer fpc.CloseIdleConnections()
	listed := gofailGet(t, fpc, fpAddr)
	for _, fp := range s2Failpoints {
		if !strings.Contains(listed, fp.name+"=") {
			t.Fatalf("failpoint %s is not in the binary (a rewrite dropped its `// gofail:` comment?); listed:\n%s", fp.name, listed)
		}
	}
	c := client(t, p.url(), 5*time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.SetTopicSettings(ctx, cfg.Topic, delayq.TopicSettings{MaxAttempts: maxAttempts,
		Backoff: delayq.Backoff{Initial: 100 * time.Millisecond, Max: time.Second, Multiplier: 2}, Lease: cfg.Lease}); err != nil {
		t.Fatal(err)
	}
	l := newLoad(t, cfg, c, s)
	isPoison := func(id string) bool { _, k, ok := parseMsgID(id); return ok && k%25 == 0 }
	l.handle = func(m *delayq.Message) bool { return !isPoison(m.ID) }
	l.consume()
	pctx, pcancel := context.WithCancel(ctx)
	prodDone := make(chan struct{})
	go func() { l.produce(pctx); close(prodDone) }()
	sleepCtx(ctx, 3*time.Second) // let poison messages reach their last attempt

	var cycles []s2Cycle
	dupBound := 0
	for _, fp := range s2Failpoints {
		for r := 0; r < reps; r++ {
			cy := s2Cycle{Failpoint: fp.name, armedAt: l.rec.Now()}
			p.mu.Lock()
			exited := p.exited
			p.mu.Unlock()
			if err := gofailPut(fpc, fpAddr, fp.name, "return(true)"); err != nil {
				// Under load the armed point can fire, and the process
				// die, before the arming request's answer is written:
				// a lost answer is armed if the process exits at once.
				select {
				case <-exited:
					t.Logf("%s: the arming answer was lost to the crash it caused (%v)", fp.name, err)
				case <-time.After(5 * time.Second):
					t.Fatalf("arm %s: %v (and the process is still running)", fp.name, err)
				}
			}
			select {
			case <-exited:
				cy.Fired = true
			case <-time.After(20 * time.Second):
				t.Errorf("%s: not hit within 20s", fp.name)
				p.kill9()
			}
			crashAt := l.rec.Now()
			cy.FireAfterMS = ms(crashAt - cy.armedAt)
			p.mu.Lock()
			if p.exitErr != nil {
				cy.ExitStatus = p.exitErr.Error()
			} else {
				cy.ExitStatus = "exit 0"
			}
			p.mu.Unlock()
			cy.Outstanding = l.outstandingAt(crashAt)
			dupBound += cy.Outstanding
			rec, err := p.tryStart(30 * time.Second)
			if err != nil {
				t.Fatalf("restart after %s: %v", fp.name, err)
			}
			cy.upAt = l.rec.Now()
			cy.RecoveryMS = ms(rec)
			l.rec.Down(crashAt, cy.upAt)
			cycles = append(cycles, cy)
			t.Logf("%s #%d: crashed %v after arming (%s); %d leases out; ready again after %v",
				fp.name, r+1, time.Duration(cy.FireAfterMS*1e6).Round(time.Millisecond), cy.ExitStatus, cy.Outstanding, rec.Round(time.Millisecond))
		}
	}
	pcancel()
	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + 2*time.Second) // redeliveries of the last crash's leases; poison nacks end
	l.stopConsumers()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	dead := deadIDs(dctx, t, c, cfg.Topic)
	deadSet := map[string]bool{}
	poisonDead, healthyDead := 0, 0
	for id := range dead {
		deadSet[id] = true
		if isPoison(id) {
			poisonDead++
		} else {
			healthyDead++ // lost leases count as failures: possible, not a defect
		}
	}
	info, rejected := l.ackUncertain()
	dupBound += info + rejected
	ops := l.rec.Ops()
	res := history.Check(ops, l.rec.Downtime(), history.Options{Dead: deadSet, DupBound: dupBound, Slack: 2 * time.Millisecond, DownGrace: time.Second})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, append(first(res.Lost, 3), first(res.Early, 3)...))

	// Per failpoint: send attempts that died with the process (info,
	// invoked between arming and the restart). Whether the dead attempt
	// stored its message is not observable (the retry answers either
	// way); the checker's recovered count is over the whole run.
	byName := map[string]*s2Failpoint{}
	var fps []s2Failpoint
	for _, fp := range s2Failpoints {
		fps = append(fps, s2Failpoint{Name: fp.name, Where: fp.where})
	}
	for i := range fps {
		byName[fps[i].Name] = &fps[i]
	}
	fires := map[string][]time.Duration{}
	for i := range cycles {
		cy := &cycles[i]
		for _, op := range ops {
			if op.Kind == history.Send && op.Outcome == history.Info && op.Invoke >= cy.armedAt && op.Invoke < cy.upAt {
				cy.InfoSends++
			}
		}
		f := byName[cy.Failpoint]
		f.Armed++
		if cy.Fired {
			f.Fired++
			fires[cy.Failpoint] = append(fires[cy.Failpoint], time.Duration(cy.FireAfterMS*1e6))
		}
		f.InfoSends += cy.InfoSends
		f.Outstanding += cy.Outstanding
	}
	for i := range fps {
		fps[i].FireAfter = quantiles(fires[fps[i].Name])
	}
	out := s2Results{
		Scenario: "S2 crash at failpoints", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Config: l.cfg,
		Reps: reps, BuildS: buildS, Failpoints: fps, Cycles: cycles, Check: toCheckJSON(res, len(l.deliveries)),
		AckInfo: info, AckRejected: rejected, DeadLetters: len(dead), PoisonDead: poisonDead, HealthyDead: healthyDead,
		DrainMissing: missing, DurationS: time.Since(t0).Seconds(),
	}
	writeResults(t, "S2-failpoints", out)
	for _, f := range fps {
		if f.Fired != f.Armed {
			t.Errorf("%s fired %d of %d times", f.Name, f.Fired, f.Armed)
		}
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
}

func gofailGet(t *testing.T, hc *http.Client, addr string) string {
	t.Helper()
	res, err := hc.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("gofail endpoint: %v", err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return string(b)
}

// gofailPut arms failpoint name with term (gofail's HTTP endpoint).
func gofailPut(hc *http.Client, addr, name, term string) error {
	req, err := http.NewRequest(http.MethodPut, "http://"+addr+"/"+name, strings.NewReader(term))
	if err != nil {
		return err
	}
	res, err := hc.Do(req)
	if err != nil {
		return err
	}
	res.Body.Close()
	if res.StatusCode/100 != 2 {
		return fmt.Errorf("%s", res.Status)
	}
	return nil
}
