package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/test/internal/history"
)

// storeKillLoop is a kill loop against delayq servers on a shared store
// (Redis, PostgreSQL, MariaDB): S1's load (lease 3 s, delays 0–5 s),
// spread round robin over the servers when there are several, while
// strike kills something — the store or one server — and brings it
// back, kills times, 0.5 s to gap apart.
type storeKillLoop struct {
	topic     string
	kills     int
	messages  int
	gap       time.Duration
	sendSpan  time.Duration // sends are paced over it; default kills × (gap + 1 s) / 2
	serveArgs []string      // how `delayq serve` reaches the store
	servers   int           // default 1
	// strike runs kill i and returns once the service is back. It returns
	// the end of the window to count as downtime on rec's clock (from
	// the moment strike was called), or 0 when the service stayed up.
	strike func(i int, krng *lockedRand, rec *history.Recorder, procs []*proc) (backAt time.Duration)
	// started, when set, runs once the servers are up and the load runs.
	started func(procs []*proc, rec *history.Recorder)
	// leasesLost: a kill may lose the leases that are out at that moment
	// (their acks then answer 409), so they count into the duplicate
	// bound. Where leases are committed before they are answered, only
	// acks that ended info or 409 do.
	leasesLost bool
	// downGrace bounds how late what came due during a downtime window
	// may be delivered after it (Options.DownGrace).
	downGrace time.Duration
}

type killJSON struct {
	KillAtMS    float64 `json:"kill_at_ms"`
	Outstanding int     `json:"leases_outstanding_at_kill"`
	DownMS      float64 `json:"down_ms,omitempty"` // kill until the store answers again
}

// killLoopResults is what every store kill loop records.
type killLoopResults struct {
	Scenario     string     `json:"scenario"`
	Tier         string     `json:"tier"`
	Seed         uint64     `json:"seed"`
	Date         string     `json:"date"`
	Servers      int        `json:"servers"`
	Config       loadConfig `json:"config"`
	Kills        int        `json:"kills"`
	Check        checkJSON  `json:"check"`
	AckInfo      int        `json:"acks_info"`
	AckRejected  int        `json:"acks_rejected_409"`
	Restarts     []killJSON `json:"restarts"`
	SendsPerSec  float64    `json:"sends_per_sec"`
	DurationS    float64    `json:"duration_s"`
	DrainMissing int        `json:"drain_missing"`
	SendErrors   []string   `json:"send_errors,omitempty"`
}

// killLoopRun is a finished kill loop: its record, for scenarios that
// judge or report more.
type killLoopRun struct {
	out   killLoopResults
	res   *history.Result
	l     *load
	procs []*proc
}

// runStoreKillLoop runs k and fails the test when a send was refused
// with 4xx or what came due while the store was down was delivered later
// than its return + downGrace. The caller judges the checker's verdict
// (not every store promises lost 0) and writes the results.
func runStoreKillLoop(t *testing.T, scenario string, k storeKillLoop) *killLoopRun {
	s := seed(t)
	t.Logf("tier %s seed %d: %s", tier(), s, scenario)
	const lease = 3 * time.Second
	span := k.sendSpan
	if span == 0 {
		span = time.Duration(k.kills) * (k.gap + time.Second) / 2
	}
	cfg := loadConfig{
		Topic: k.topic, Messages: k.messages, Producers: 8, Consumers: 8,
		MaxDelay: 5 * time.Second, Lease: lease, MaxWork: 50 * time.Millisecond,
		SendSpan: span, LeaseMax: 16,
	}
	procs := make([]*proc, max(k.servers, 1))
	for i := range procs {
		procs[i] = newProc(t, append(append([]string(nil), k.serveArgs...), "--default-lease", lease.String(), "--default-max-attempts", "1000")...)
		procs[i].start()
	}
	c := client(t, procs[0].url(), 10*time.Second)
	if len(procs) > 1 {
		c = spreadClient(t, procs, 10*time.Second)
	}
	l := newLoad(t, cfg, c, s)
	krng := newRand(s + 1)
	t0 := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()
	if k.started != nil {
		k.started(procs, l.rec)
	}

	var restarts []killJSON
	dupBound := 0
	for i := 0; i < k.kills; i++ {
		sleepCtx(ctx, krng.Dur(500*time.Millisecond, k.gap))
		killAt := l.rec.Now()
		backAt := k.strike(i, krng, l.rec, procs)
		out := l.outstandingAt(killAt)
		if k.leasesLost {
			dupBound += out
		}
		kj := killJSON{KillAtMS: ms(killAt), Outstanding: out}
		if backAt > 0 {
			l.rec.Down(killAt, backAt)
			kj.DownMS = ms(backAt - killAt)
		}
		restarts = append(restarts, kj)
		t.Logf("kill %d at %v: %d leases out; back after %v", i+1, killAt.Round(time.Millisecond), out, time.Duration(kj.DownMS*float64(time.Millisecond)).Round(time.Millisecond))
	}
	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second) // let redeliveries of leases whose acks failed show
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	dupBound += info + rejected
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: dupBound, Slack: 2 * time.Millisecond, DownGrace: k.downGrace})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(append(append(append(res.Early, res.Lost...), res.Resurrected...), res.SlowAfterRestart...), 3))

	out := killLoopResults{
		Scenario: scenario, Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), Servers: len(procs),
		Config: l.cfg, Kills: k.kills, Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected, Restarts: restarts,
		SendsPerSec: float64(res.Acked) / l.sendEnd.Sub(l.sendStart).Seconds(), DurationS: time.Since(t0).Seconds(),
		DrainMissing: missing, SendErrors: first(l.sendErrs, 20),
	}
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages that came due while the store was down were delivered later than its return + %v: %v", len(res.SlowAfterRestart), k.downGrace, first(res.SlowAfterRestart, 10))
	}
	return &killLoopRun{out: out, res: res, l: l, procs: procs}
}
