package reliability

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/test/internal/history"
)

// soakConns caps the soak clients' connections to the server.
const soakConns = 24

// soakSample is one row of the S27 CSV.
type soakSample struct {
	at         time.Duration // since the start of the run
	pid, life  int           // life: server start number
	rssKiB     int64
	fds        int
	goroutines int
}

// trendJSON is the growth of one metric over the evaluated window.
type trendJSON struct {
	Metric string  `json:"metric"`
	Mean   float64 `json:"mean"`
	// Growth is the least-squares slope over the second half times its
	// length: what the metric gained over that window.
	Growth float64 `json:"growth_over_window"`
	// LifeGrowth is the pooled slope within each server life (per-life
	// intercepts) times the kill interval: what one life gains.
	LifeGrowth float64 `json:"growth_per_life"`
	Limit      float64 `json:"limit"`
	OK         bool    `json:"ok"`
}

type s27Results struct {
	Scenario    string      `json:"scenario"`
	Engine      string      `json:"engine"`
	Seed        uint64      `json:"seed"`
	Date        string      `json:"date"`
	DurationS   float64     `json:"duration_s"`
	KillEveryS  float64     `json:"kill_every_s"`
	RedisEveryS float64     `json:"redis_restart_every_s,omitempty"`
	Config      loadConfig  `json:"config"`
	Kills       int         `json:"server_kills"`
	RedisKills  int         `json:"redis_restarts"`
	MaxReadyMS  float64     `json:"max_restart_ready_ms"`
	Samples     int         `json:"samples"`
	CSV         string      `json:"csv"`
	Trends      []trendJSON `json:"trends"`
	Check       checkJSON   `json:"check"`
	AckInfo     int         `json:"acks_info"`
	AckRejected int         `json:"acks_rejected_409"`
	Nacks       int         `json:"nacks"`
	SendErrors  []string    `json:"send_errors,omitempty"`
}

// soakDur reads a duration knob, else def.
func soakDur(t *testing.T, name string, def time.Duration) time.Duration {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a positive duration", name, v)
	}
	return d
}

// TestS27Soak: a long mixed workload (sends with delays, acks, some
// nacks) with the server killed -9 every 5 min and, with
// DELAYQ_SOAK_ENGINE=redis, Redis killed and restarted every 15 min.
// Goroutines, fds and RSS are sampled every 30 s into
// $DELAYQ_RESULTS_DIR/S27-soak-<engine>.csv. Pass: the S1 checker, and no
// upward trend of the three over the second half (see soakTrend).
// Runs only with DELAYQ_RELIABILITY=soak; DELAYQ_SOAK is its length
// (default 2h).
func TestS27Soak(t *testing.T) {
	if os.Getenv("DELAYQ_RELIABILITY") != "soak" {
		t.Skip("soak only: DELAYQ_RELIABILITY=soak (DELAYQ_SOAK=2h, DELAYQ_SOAK_ENGINE=pebble|redis)")
	}
	s := seed(t)
	dur := soakDur(t, "DELAYQ_SOAK", 2*time.Hour)
	engine := os.Getenv("DELAYQ_SOAK_ENGINE")
	if engine == "" {
		engine = "pebble"
	}
	// A short proof run (under an hour) scales the fault intervals down so
	// that it still sees several kills, restarts and samples.
	killDef, redisDef, sampleDef := 5*time.Minute, 15*time.Minute, 30*time.Second
	if dur < time.Hour {
		killDef, redisDef, sampleDef = dur/6, dur/3, dur/36
	}
	killEvery := soakDur(t, "DELAYQ_SOAK_KILL_EVERY", killDef)
	redisEvery := soakDur(t, "DELAYQ_SOAK_REDIS_EVERY", redisDef)
	sampleEvery := soakDur(t, "DELAYQ_SOAK_SAMPLE", sampleDef)
	t.Logf("seed %d engine %s duration %v kill every %v redis every %v sample every %v", s, engine, dur, killEvery, redisEvery, sampleEvery)

	const rate = 50 // sends/s: ≈ 360k messages in 2 h keeps the history in memory
	cfg := loadConfig{
		Topic: "s27", Messages: int(dur.Seconds() * rate), Producers: 4, Consumers: 4,
		MaxDelay: 30 * time.Second, Lease: 5 * time.Second, MaxWork: 50 * time.Millisecond,
		SendSpan: dur, LeaseMax: 16,
	}
	var rs *redistest.Server
	var p *proc
	downGrace := time.Second
	switch engine {
	case "pebble":
		p = newProc(t, "--default-lease", "5s")
	case "redis":
		rs = startRedis(t, "always")
		p = newRedisProc(t, rs.URL(), "--default-lease", "5s")
		downGrace = 2500 * time.Millisecond // a failed promotion is retried after 1 s (S7)
	default:
		t.Fatalf("DELAYQ_SOAK_ENGINE=%q: want pebble or redis", engine)
	}
	p.start()
	// Connections are capped so that the server's fds and goroutines do
	// not follow the clients' bursts (one ack goroutine per message could
	// otherwise open up to consumers × lease_max connections): any growth
	// beyond the cap is the server's own.
	tr := &http.Transport{MaxConnsPerHost: soakConns, MaxIdleConnsPerHost: soakConns, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := delayq.NewClient(p.url(), delayq.WithRetry(0, 0), delayq.WithTimeout(10*time.Second), delayq.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.SetTopicSettings(ctx, cfg.Topic, delayq.TopicSettings{MaxAttempts: 1000, Lease: cfg.Lease,
		Backoff: delayq.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second, Multiplier: 2}}); err != nil {
		t.Fatal(err)
	}
	l := newLoad(t, cfg, c, s)
	// One id in ten is nacked on its first delivery, then acked.
	l.handle = func(m *delayq.Message) bool {
		_, k, _ := parseMsgID(m.ID)
		return !(k%10 == 3 && m.Attempt == 1)
	}
	krng := newRand(s + 1)
	t0 := time.Now()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	// Sampler.
	var smu sync.Mutex
	var samples []soakSample
	sampDone := make(chan struct{})
	sctx, scancel := context.WithCancel(ctx)
	go func() {
		defer close(sampDone)
		for sleepCtx(sctx, sampleEvery) {
			p.mu.Lock()
			life := p.starts
			p.mu.Unlock()
			pid := p.pid()
			rss, err1 := procStatusKiB(pid, "VmRSS")
			fds, err2 := fdCount(pid)
			g, err3 := scrapeGauge(p.url(), "go_goroutines")
			if err1 != nil || err2 != nil || err3 != nil || pid != p.pid() {
				continue // killed meanwhile
			}
			smu.Lock()
			samples = append(samples, soakSample{at: time.Since(t0), pid: pid, life: life, rssKiB: rss, fds: fds, goroutines: g})
			smu.Unlock()
		}
	}()

	// Faults on a fixed timeline.
	dupBound, kills, redisKills := 0, 0, 0
	var maxReady time.Duration
	nextKill, nextRedis := killEvery, redisEvery
	for {
		next := nextKill
		isRedis := rs != nil && nextRedis < nextKill
		if isRedis {
			next = nextRedis
		}
		if next >= dur {
			break
		}
		// ±5% of the interval, so faults do not line up with the sampler.
		at := next + krng.Dur(0, killEvery/10) - killEvery/20
		sleepCtx(ctx, time.Until(t0.Add(at)))
		killAt := l.rec.Now()
		if isRedis {
			rs.Restart() // SIGKILL, then start on the same AOF; returns once it answers PING
			redisKills++
			nextRedis += redisEvery
		} else {
			p.kill9()
			rd, err := p.tryStart(30 * time.Second)
			if err != nil {
				t.Fatalf("restart after kill %d: %v", kills+1, err)
			}
			maxReady = max(maxReady, rd)
			if rd > 5*time.Second {
				t.Errorf("kill %d: ready after %v, want ≤ 5s", kills+1, rd)
			}
			kills++
			nextKill += killEvery
		}
		up := l.rec.Now()
		out := l.outstandingAt(killAt)
		dupBound += out
		l.rec.Down(killAt, up)
		t.Logf("%v: %s; %d leases out; answering again after %v", time.Since(t0).Round(time.Second),
			map[bool]string{true: "redis kill -9 + restart", false: "server kill -9 + restart"}[isRedis], out, (up - killAt).Round(time.Millisecond))
	}
	<-prodDone
	scancel()
	<-sampDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second) // redeliveries of the last kill's leases
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	dupBound += info + rejected
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: dupBound, Slack: 2 * time.Millisecond, DownGrace: downGrace})
	t.Logf("checker: %v (drain missing %d)", res, missing)
	logOpsOf(t, l.rec, first(append(res.Early, res.Lost...), 3))

	csv := filepath.Join(resultsDir(t), "S27-soak-"+engine+".csv")
	var b strings.Builder
	b.WriteString("elapsed_s,life,pid,rss_kib,fds,goroutines\n")
	for _, x := range samples {
		fmt.Fprintf(&b, "%.1f,%d,%d,%d,%d,%d\n", x.at.Seconds(), x.life, x.pid, x.rssKiB, x.fds, x.goroutines)
	}
	if err := os.WriteFile(csv, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	trends := soakTrends(samples, dur, killEvery)
	out := s27Results{
		Scenario: "S27 soak", Engine: engine, Seed: s, Date: time.Now().UTC().Format(time.RFC3339), DurationS: time.Since(t0).Seconds(),
		KillEveryS: killEvery.Seconds(), Config: l.cfg, Kills: kills, RedisKills: redisKills, MaxReadyMS: ms(maxReady),
		Samples: len(samples), CSV: csv, Trends: trends, Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected,
		Nacks: len(l.nackResp), SendErrors: first(l.sendErrs, 20),
	}
	if rs != nil {
		out.RedisEveryS = redisEvery.Seconds()
	}
	writeResults(t, "S27-soak-"+engine, out)
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if !res.Valid() {
		t.Errorf("guarantees violated: %v", res)
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages due while down delivered later than restart + %v: %v", len(res.SlowAfterRestart), downGrace, first(res.SlowAfterRestart, 10))
	}
	if len(samples) < 8 {
		t.Errorf("only %d samples: too few to judge a trend", len(samples))
	}
	for _, tr := range trends {
		if !tr.OK {
			t.Errorf("%s trends upward: %+v", tr.Metric, tr)
		}
	}
}

// soakTrends judges RSS, fds and goroutines over the second half of the
// run (the last hour of the 2 h soak). Two least-squares slopes, each
// turned into a growth by multiplying with the span it applies to:
//
//   - over the window, across restarts: growth of what outlives a
//     process (data dir, Redis state, tombstones read at start-up). The
//     kills make a saw-tooth; over n whole lives OLS turns a saw-tooth of
//     amplitude A into a growth of about A/n, well under the limits.
//   - within lives (per-life intercepts, so restarts do not count): what
//     one process gains in one kill interval, for fds and goroutines
//     only — RSS grows within a life by design (Go heap to its GC target,
//     the 64 MiB memtable filling, the block cache warming).
//
// Limit: max(floor, 20% of the window's mean). Floors are the largest
// legitimate swing: RSS 64 MiB (one memtable); fds 48 (the clients'
// soakConns connections, one fd each, plus the go-redis pool — 10 per CPU,
// 20 here — re-dialled after a Redis restart); goroutines 64 (about two
// per connection, plus the idle pool's). A leak that stays under
// 20% of the mean per hour needs over 5 h to double: beyond what a 2 h
// soak can tell from noise.
func soakTrends(samples []soakSample, dur, killEvery time.Duration) []trendJSON {
	var win []soakSample
	for _, x := range samples {
		if x.at >= dur/2 {
			win = append(win, x)
		}
	}
	metrics := []struct {
		name   string
		floor  float64
		inLife bool
		get    func(soakSample) float64
	}{
		{"rss_kib", 64 << 10, false, func(x soakSample) float64 { return float64(x.rssKiB) }},
		{"fds", 48, true, func(x soakSample) float64 { return float64(x.fds) }},
		{"goroutines", 64, true, func(x soakSample) float64 { return float64(x.goroutines) }},
	}
	var out []trendJSON
	for _, m := range metrics {
		tr := trendJSON{Metric: m.name}
		if len(win) < 3 {
			out = append(out, tr)
			continue
		}
		var xs, ys []float64
		for _, x := range win {
			xs, ys = append(xs, x.at.Seconds()), append(ys, m.get(x))
		}
		tr.Mean = mean(ys)
		tr.Growth = olsSlope(xs, ys, nil) * (xs[len(xs)-1] - xs[0])
		tr.Limit = math.Max(m.floor, 0.2*tr.Mean)
		tr.OK = tr.Growth < tr.Limit
		groups := make([]int, len(win))
		for i, x := range win {
			groups[i] = x.life
		}
		tr.LifeGrowth = olsSlope(xs, ys, groups) * killEvery.Seconds() // reported for RSS, judged for the others
		if m.inLife {
			tr.OK = tr.OK && tr.LifeGrowth < tr.Limit
		}
		out = append(out, tr)
	}
	return out
}

func mean(xs []float64) float64 {
	s := 0.0
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// olsSlope is the least-squares slope of ys over xs; with groups, each
// group is centred on its own means first (a fixed-effects fit: the
// slope within groups).
func olsSlope(xs, ys []float64, groups []int) float64 {
	cx, cy := append([]float64(nil), xs...), append([]float64(nil), ys...)
	if groups == nil {
		groups = make([]int, len(xs))
	}
	type acc struct {
		sx, sy float64
		n      int
	}
	g := map[int]*acc{}
	for i, k := range groups {
		a := g[k]
		if a == nil {
			a = &acc{}
			g[k] = a
		}
		a.sx, a.sy, a.n = a.sx+xs[i], a.sy+ys[i], a.n+1
	}
	var sxy, sxx float64
	for i, k := range groups {
		a := g[k]
		cx[i] -= a.sx / float64(a.n)
		cy[i] -= a.sy / float64(a.n)
		sxy += cx[i] * cy[i]
		sxx += cx[i] * cx[i]
	}
	if sxx == 0 {
		return 0
	}
	return sxy / sxx
}
