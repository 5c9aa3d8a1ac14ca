package reliability

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// pid is the running server's process id (0 when none).
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// procStatusKiB reads a "kB" field (VmRSS, VmHWM) of /proc/<pid>/status.
func procStatusKiB(pid int, field string) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("/proc/%d/status has no %s", pid, field)
}

// fdCount counts the entries of /proc/<pid>/fd.
func fdCount(pid int) (int, error) {
	es, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return len(es), err
}

// dirBytes sums the sizes of the files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

type s19Results struct {
	Scenario        string      `json:"scenario"`
	Engine          string      `json:"engine"` // pebble or redis
	Tier            string      `json:"tier"`
	Seed            uint64      `json:"seed"`
	Date            string      `json:"date"`
	Far             int         `json:"far_messages"`
	Near            int         `json:"near_messages"`
	NearWindowS     float64     `json:"near_window_s"`
	SendS           float64     `json:"send_s"`
	SendsPerSec     float64     `json:"sends_per_sec"`
	DataMiB         float64     `json:"data_dir_mib_at_kill"` // pebble: the server's data dir; redis: redis-server's dir (AOF)
	RSSBeforeKill   float64     `json:"rss_mib_before_kill"`
	HWMBeforeKill   float64     `json:"peak_rss_mib_before_kill"`
	ReadyMS         float64     `json:"ready_ms"`                    // exec → /healthz and /readyz 200
	FirstAnswerMS   float64     `json:"first_answer_ms"`             // exec → GET /v1/topics answered
	FirstDeliveryMS float64     `json:"first_delivery_ms"`           // ready → first near-due message received
	RSSAtReady      float64     `json:"rss_mib_at_ready"`            // VmRSS right after ready
	PeakRSS         float64     `json:"peak_rss_mib"`                // VmHWM of the restarted server at the end
	LateServer      latencyJSON `json:"lateness_after_ready"`        // updated_at − max(deliver_at, ready), server clock
	LateClient      latencyJSON `json:"lateness_after_ready_client"` // receipt − max(send invoke + delay, ready), client clock
	CameDueDown     int         `json:"near_due_before_ready"`
	Drain           s19Diag     `json:"drain"` // how late deliveries cluster, and where the time went
	Scheduled       int64       `json:"scheduled_after_drain"`
	Check           checkJSON   `json:"check"`
	Redis           *s19Redis   `json:"redis,omitempty"` // the Redis engine's own figures
	DurationS       float64     `json:"duration_s"`
}

// s19Engine is what the S19 body needs to know of an engine: the
// sizes, how to make the server, what to size as its data, and hooks
// for the engine's own figures and checks (nil for none).
type s19Engine struct {
	name     string // "pebble" or "redis"
	scenario string // results "scenario"
	results  string // results file name, without .json
	far      int
	near     int
	window   time.Duration
	newProc  func(t *testing.T) *proc // prepared, not started
	dataDir  func(p *proc) string
	down     time.Duration                                      // how long the server stays dead after the kill (0: restart at once)
	killed   func(t *testing.T)                                 // right after the server's kill -9 (the store's own kill), or nil
	restart  func(t *testing.T, p *proc) (time.Duration, error) // starts the server again and returns its time to ready; nil: p.tryStart
	sent     func(t *testing.T)                                 // after the last send is answered, before the kill
	drained  func(t *testing.T, out *s19Results)                // after the drain, before the results are written
	check    func(t *testing.T, out *s19Results)                // extra pass criteria, after the results are written
}

// TestS19BigBacklogRestart: a backlog of far-future messages (1 h – 30 d)
// plus near-due ones (due within the window), sent in batches over HTTP
// to the embedded engine; kill -9 right after the last send, restart.
// Pass: ready < 10 s, server peak RSS < 1 GiB, every near-due message
// delivered (none early, none lost, no far one delivered) with lateness
// p99 < 1 s measured from max(due, ready), and all far ones still
// scheduled.
func TestS19BigBacklogRestart(t *testing.T) {
	// Short: a 30 s window keeps the run under a minute on 2 cores.
	runS19(t, s19Engine{
		name: "pebble", scenario: "S19 big-backlog restart", results: "S19-backlog-restart",
		far: pick(50_000, 1_000_000), near: pick(5_000, 100_000), window: pick(30*time.Second, 60*time.Second),
		newProc: func(t *testing.T) *proc { return newProc(t) },
		dataDir: func(p *proc) string { return p.data },
	})
}

// runS19 is S19's body, shared by the engines (TestS19BigBacklogRestart,
// TestS19RedisBigBacklogRestart): fill, kill -9 the server right after
// the last send, restart, drain, judge.
func runS19(t *testing.T, eng s19Engine) {
	s := seed(t)
	t.Logf("engine %s tier %s seed %d", eng.name, tier(), s)
	const topic = "s19"
	far, near, window := eng.far, eng.near, eng.window
	const batch = 1000 // delayq.MaxBatch
	p := eng.newProc(t)
	p.start()
	c := client(t, p.url(), 60*time.Second)
	rng := newRand(s)
	rec := history.NewRecorder()
	t0 := time.Now()
	pad := bytes.Repeat([]byte("x"), 48) // ≈ 64-byte payloads with the id

	// Far messages first, then the near ones, so that nothing is due
	// before the kill: 4 senders of 1000-message batches.
	sendAll := func(prefix string, n int, delay func() time.Duration, record bool) {
		var next atomic.Int64
		var wg sync.WaitGroup
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					lo := int(next.Add(batch)) - batch
					if lo >= n || t.Failed() {
						return
					}
					hi := min(lo+batch, n)
					reqs := make([]delayq.SendRequest, 0, hi-lo)
					for k := lo; k < hi; k++ {
						id := prefix + strconv.Itoa(k)
						reqs = append(reqs, delayq.SendRequest{ID: id, Payload: append([]byte(id), pad...), When: delayq.When{Delay: delay()}})
					}
					var pend []*history.Pending
					if record {
						for _, r := range reqs {
							pend = append(pend, rec.Invoke(history.Send, r.ID).WithDelay(r.When.Delay))
						}
					}
					res, err := c.SendBatch(context.Background(), topic, reqs)
					if err != nil {
						t.Errorf("batch %s%d: %v", prefix, lo, err)
						return
					}
					for i, r := range res {
						if r.Err != nil {
							t.Errorf("send %s: %v", reqs[i].ID, r.Err)
							return
						}
						if record {
							pend[i].WithDue(r.Message.DeliverAt).OK()
						}
					}
				}
			}()
		}
		wg.Wait()
	}
	sendAll("f", far, func() time.Duration { return rng.Dur(time.Hour, 30*24*time.Hour) }, false)
	sendAll("n", near, func() time.Duration { return rng.Dur(0, window) }, true)
	if t.Failed() {
		t.FailNow()
	}
	sendS := time.Since(t0).Seconds()
	t.Logf("sent %d far + %d near in %.1f s", far, near, sendS)

	if eng.sent != nil {
		eng.sent(t)
	}
	pid := p.pid()
	rssBefore, _ := procStatusKiB(pid, "VmRSS")
	hwmBefore, _ := procStatusKiB(pid, "VmHWM")
	dataMiB := float64(dirBytes(eng.dataDir(p))) / (1 << 20)
	killAt := rec.Now()
	p.kill9()
	if eng.killed != nil {
		eng.killed(t)
	}
	time.Sleep(eng.down)
	startAt := time.Now()
	var readyD time.Duration
	var err error
	if eng.restart != nil {
		readyD, err = eng.restart(t, p)
	} else {
		readyD, err = p.tryStart(60 * time.Second)
	}
	if err != nil {
		t.Fatalf("restart: %v", err)
	}
	up := rec.Now()
	readyWall := rec.Wall(up)
	rec.Down(killAt, up)
	pid = p.pid()
	rssReady, _ := procStatusKiB(pid, "VmRSS")
	if _, err := c.Topics(context.Background()); err != nil {
		t.Fatalf("first request after ready: %v", err)
	}
	firstAnswer := time.Since(startAt)

	// Consumers: lease up to 500, ack each batch at once.
	var mu sync.Mutex
	seen := map[string]bool{}
	firstDelivery := time.Duration(-1)
	var ackInfo int
	var polls []span // every lease call, to see when no long-poll was waiting
	var maxLease, maxAck time.Duration
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				inv := rec.Now()
				msgs, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 500, Wait: time.Second})
				got := rec.Now()
				// The long-poll waited at the server from about inv until
				// it handed messages out (their updated_at, server clock
				// = this machine's), not until this process got the
				// answer, which a starved client reads late.
				end := got
				if len(msgs) > 0 {
					end = max(inv, min(got, msgs[0].UpdatedAt.Sub(rec.Wall(0))))
				}
				mu.Lock()
				polls = append(polls, span{inv, end})
				if len(msgs) > 0 {
					maxLease = max(maxLease, got-inv)
				}
				mu.Unlock()
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				acks := make([]delayq.AckRequest, 0, len(msgs))
				mu.Lock()
				for _, m := range msgs {
					rec.Record(history.Op{Kind: history.Lease, ID: m.ID, Outcome: history.OK, Invoke: inv, Complete: got, DueAt: m.DeliverAt, At: m.UpdatedAt})
					seen[m.ID] = true
					if firstDelivery < 0 {
						firstDelivery = got - up
					}
					acks = append(acks, delayq.AckRequest{ID: m.ID, Receipt: m.Receipt})
				}
				mu.Unlock()
				if len(acks) == 0 {
					continue
				}
				pend := make([]*history.Pending, len(acks))
				for i, a := range acks {
					pend[i] = rec.Invoke(history.Ack, a.ID)
				}
				ackInv := rec.Now()
				errs, err := c.AckBatch(context.Background(), topic, acks)
				ackD := rec.Now() - ackInv
				failed := 0
				for i := range acks {
					switch {
					case err != nil:
						finish(pend[i], outcome(err))
						failed++
					case errs[i] != nil:
						finish(pend[i], outcome(errs[i]))
						failed++
					default:
						pend[i].OK()
					}
				}
				// An ack that did not end ok may be redelivered: the dup bound.
				mu.Lock()
				ackInfo += failed
				maxAck = max(maxAck, ackD)
				mu.Unlock()
			}
		}()
	}
	smp := startDrainSampler(c, topic, pid)
	// Every near message is due by kill + window; allow 10 s more.
	deadline := rec.Wall(killAt).Add(window + 10*time.Second)
	for time.Now().Before(deadline) {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= near {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // a far message leased now would show as unexpected
	cancel()
	wg.Wait()
	diag := smp.finish()
	peak, _ := procStatusKiB(pid, "VmHWM")
	ti, err := c.Topic(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}

	res := history.Check(rec.Ops(), rec.Downtime(), history.Options{DupBound: ackInfo, Slack: 2 * time.Millisecond, DownGrace: time.Second})
	t.Logf("checker: %v", res)
	logOpsOf(t, rec, first(append(res.Early, res.Unexpected...), 3))
	// Lateness after ready, of first deliveries of near messages.
	firstOp := map[string]history.Op{}
	sendOp := map[string]history.Op{}
	for _, op := range rec.Ops() {
		switch {
		case op.Kind == history.Lease:
			if f, ok := firstOp[op.ID]; !ok || op.Invoke < f.Invoke {
				firstOp[op.ID] = op
			}
		case op.Kind == history.Send && op.Outcome == history.OK:
			sendOp[op.ID] = op
		}
	}
	var lateS, lateC []time.Duration
	var late []lateDelivery
	var lastDelivery time.Duration
	dueBeforeReady := 0
	for id, d := range firstOp {
		snd, ok := sendOp[id]
		if !ok {
			continue
		}
		from := snd.DueAt
		if from.Before(readyWall) {
			from = readyWall
			dueBeforeReady++
		}
		lateS = append(lateS, max(0, d.At.Sub(from)))
		lateC = append(lateC, max(0, d.Complete-max(snd.Invoke+snd.Delay, up)))
		if d.At.Sub(from) >= time.Second {
			late = append(late, lateDelivery{from: from, lease: d.At, fromRec: from.Sub(rec.Wall(0))})
		}
		lastDelivery = max(lastDelivery, d.Complete)
	}
	diag.MaxPollGapMS, diag.MaxLeaseMS, diag.MaxAckMS = ms(maxGap(covered(polls), up, lastDelivery)), ms(maxLease), ms(maxAck)
	clusterLate(&diag, late, polls)
	out := s19Results{
		Scenario: eng.scenario, Engine: eng.name, Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339),
		Far: far, Near: near, NearWindowS: window.Seconds(), SendS: sendS, SendsPerSec: float64(far+near) / sendS, DataMiB: dataMiB,
		RSSBeforeKill: float64(rssBefore) / 1024, HWMBeforeKill: float64(hwmBefore) / 1024,
		ReadyMS: ms(readyD), FirstAnswerMS: ms(firstAnswer), FirstDeliveryMS: ms(firstDelivery),
		RSSAtReady: float64(rssReady) / 1024, PeakRSS: float64(peak) / 1024,
		LateServer: quantiles(lateS), LateClient: quantiles(lateC), CameDueDown: dueBeforeReady, Drain: diag,
		Scheduled: ti.Counts.Scheduled, Check: toCheckJSON(res, len(firstOp)), DurationS: time.Since(t0).Seconds(),
	}
	if eng.drained != nil {
		eng.drained(t, &out)
	}
	writeResults(t, eng.results, out)
	if eng.check != nil {
		eng.check(t, &out)
	}

	if readyD >= 10*time.Second {
		t.Errorf("ready after %v, want < 10s", readyD)
	}
	if peak == 0 || peak >= 1<<20 {
		t.Errorf("server peak RSS %d KiB after the restart, want < 1 GiB", peak)
	}
	if !res.Valid() || len(res.Lost) > 0 {
		t.Errorf("guarantees violated: %v", res)
	}
	switch {
	case out.LateServer.N != near:
		t.Errorf("lateness after ready measured for %d of %d near messages", out.LateServer.N, near)
	case out.LateServer.P99 >= 1000 && raceOn:
		// Under -race (scripts/test.sh, every package at once) the machine
		// is saturated and one run saw p99 2.9 s: reported, not judged;
		// the reliability tiers run without -race and judge it
		// (docs/reliability.md, S19). The drain figures say where the
		// time went: a stalled server, a promotion or lease stall in the
		// engine, or consumers that were not polling.
		t.Logf("lateness after ready p99 %.0f ms under -race: not judged; drain: %+v", out.LateServer.P99, diag)
	case out.LateServer.P99 >= 1000:
		t.Errorf("lateness after ready: %+v, want p99 < 1000 ms; drain: %+v", out.LateServer, diag)
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages due while the server was down delivered later than ready + 1 s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
	}
	if ti.Counts.Scheduled != int64(far) {
		t.Errorf("scheduled after the drain: %d, want the %d far messages", ti.Counts.Scheduled, far)
	}
}

// runQueueWait sums, over the threads of process pid ("self" for this
// one), the time they spent runnable but waiting for a CPU (the second
// field of /proc/<pid>/task/*/schedstat, Linux). ok is false when it
// cannot be read.
func runQueueWait(pid string) (time.Duration, bool) {
	dir := "/proc/" + pid + "/task"
	es, err := os.ReadDir(dir)
	if err != nil {
		return 0, false
	}
	var sum int64
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "schedstat"))
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			if ns, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				sum += ns
			}
		}
	}
	return time.Duration(sum), true
}

// s19Diag describes the drain, so that high lateness can be told apart:
// a stall of the server's release path (due messages stay scheduled, or
// ready ones are not handed to waiting long-polls, while the server
// answers at once), a server that is stalled as a whole (its own API
// answers slowly, its threads wait for a CPU), or consumers that were not
// polling (the test client starved, or blocked in durable acks). Reported
// in the results, never judged.
type s19Diag struct {
	LateN int `json:"late_n"` // near messages ≥ 1 s late after ready (server clock)
	// How the late ones cluster: the spread of their due times (from
	// max(due, ready)) and of the server's lease times, and how many
	// lease answers (distinct server lease instants) carried them. One
	// stall that ends at once shows a wide due span, a narrow lease span
	// and few leases; starvation spreads both.
	LateDueSpanMS   float64 `json:"late_due_span_ms"`
	LateLeaseSpanMS float64 `json:"late_lease_span_ms"`
	LateLeases      int     `json:"late_leases"`
	// LateUnpolled: of the late ones, how many came due while no
	// consumer's lease call was waiting (from its invoke to the server's
	// hand-out time, or its answer if empty; this process's clock is the
	// server's: same machine).
	LateUnpolled int     `json:"late_due_while_unpolled"`
	MaxPollGapMS float64 `json:"max_poll_gap_ms"` // longest time no lease call was waiting, ready → last delivery
	MaxLeaseMS   float64 `json:"max_lease_call_ms"`
	MaxAckMS     float64 `json:"max_ack_call_ms"`
	// Sampled every 100 ms with GET /v1/topics/{topic}: how long a due
	// message stayed scheduled (sample time − next_due, a lower bound of
	// the promotion lag), the oldest ready message's age (consumer lag),
	// and the slowest answer.
	Samples         int     `json:"samples"`
	MaxPromoteLagMS float64 `json:"max_promote_lag_ms"`
	MaxReadyAgeMS   float64 `json:"max_ready_age_ms"`
	MaxTopicCallMS  float64 `json:"max_topic_call_ms"`
	// Time the server's and this process's threads spent runnable but
	// waiting for a CPU during the drain (Linux schedstat; -1 if
	// unreadable), in total and in the worst 100 ms sample interval.
	ServerRunWaitMS    float64 `json:"server_runqueue_wait_ms"`
	ServerRunWaitMaxMS float64 `json:"server_runqueue_wait_max_per_100ms"`
	ClientRunWaitMS    float64 `json:"client_runqueue_wait_ms"`
	ClientRunWaitMaxMS float64 `json:"client_runqueue_wait_max_per_100ms"`
	Verdict            string  `json:"verdict"`
}

// drainSampler samples the topic's state and both processes' run-queue
// waits until stopped.
type drainSampler struct {
	d    s19Diag
	stop func()
	done chan struct{}
}

func startDrainSampler(c *delayq.Client, topic string, pid int) *drainSampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &drainSampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		srv := strconv.Itoa(pid)
		srv0, okS := runQueueWait(srv)
		cli0, okC := runQueueWait("self")
		srvPrev, cliPrev := srv0, cli0
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				s.d.ServerRunWaitMS, s.d.ClientRunWaitMS = ms(srvPrev-srv0), ms(cliPrev-cli0)
				if !okS {
					s.d.ServerRunWaitMS, s.d.ServerRunWaitMaxMS = -1, -1
				}
				if !okC {
					s.d.ClientRunWaitMS, s.d.ClientRunWaitMaxMS = -1, -1
				}
				return
			case <-tick.C:
			}
			if w, ok := runQueueWait(srv); ok && okS {
				s.d.ServerRunWaitMaxMS = max(s.d.ServerRunWaitMaxMS, ms(w-srvPrev))
				srvPrev = w
			}
			if w, ok := runQueueWait("self"); ok && okC {
				s.d.ClientRunWaitMaxMS = max(s.d.ClientRunWaitMaxMS, ms(w-cliPrev))
				cliPrev = w
			}
			at := time.Now()
			ti, err := c.Topic(ctx, topic)
			if err != nil {
				continue
			}
			s.d.Samples++
			s.d.MaxTopicCallMS = max(s.d.MaxTopicCallMS, ms(time.Since(at)))
			if !ti.NextDue.IsZero() && ti.NextDue.Before(at) {
				s.d.MaxPromoteLagMS = max(s.d.MaxPromoteLagMS, ms(at.Sub(ti.NextDue)))
			}
			if !ti.OldestReady.IsZero() {
				s.d.MaxReadyAgeMS = max(s.d.MaxReadyAgeMS, ms(time.Since(ti.OldestReady)))
			}
		}
	}()
	return s
}

func (s *drainSampler) finish() s19Diag {
	s.stop()
	<-s.done
	return s.d
}

// span is a call's [invoke, complete] on the recorder's clock.
type span struct{ from, to time.Duration }

// covered merges spans into disjoint sorted ones.
func covered(xs []span) []span {
	s := append([]span(nil), xs...)
	slices.SortFunc(s, func(a, b span) int { return cmp.Compare(a.from, b.from) })
	var out []span
	for _, x := range s {
		if n := len(out); n > 0 && x.from <= out[n-1].to {
			out[n-1].to = max(out[n-1].to, x.to)
			continue
		}
		out = append(out, x)
	}
	return out
}

// inSpans reports whether t lies in one of the disjoint sorted spans.
func inSpans(s []span, t time.Duration) bool {
	i, _ := slices.BinarySearchFunc(s, t, func(x span, t time.Duration) int { return cmp.Compare(x.from, t) })
	// s[i-1] is the last span starting at or before t (or s[i] starts at t).
	if i < len(s) && s[i].from == t {
		return true
	}
	return i > 0 && t <= s[i-1].to
}

// maxGap is the longest time in [lo, hi] that no span covers.
func maxGap(s []span, lo, hi time.Duration) time.Duration {
	var g time.Duration
	at := lo
	for _, x := range s {
		if x.from > hi {
			break
		}
		g = max(g, x.from-at)
		at = max(at, x.to)
	}
	return max(g, hi-at)
}

// lateDelivery is a near message's first delivery ≥ 1 s after
// max(due, ready): from and lease are server wall times, fromRec the
// former on the recorder's clock.
type lateDelivery struct {
	from, lease time.Time
	fromRec     time.Duration
}

// clusterLate fills the late-delivery figures of d and its verdict.
func clusterLate(d *s19Diag, late []lateDelivery, polls []span) {
	d.LateN = len(late)
	if len(late) == 0 {
		d.Verdict = "no delivery 1 s or more late"
		return
	}
	cov := covered(polls)
	lo, hi := late[0], late[0]
	leases := map[int64]bool{}
	var firstFrom, lastFrom = late[0].from, late[0].from
	for _, l := range late {
		if l.lease.Before(lo.lease) {
			lo = l
		}
		if l.lease.After(hi.lease) {
			hi = l
		}
		if l.from.Before(firstFrom) {
			firstFrom = l.from
		}
		if l.from.After(lastFrom) {
			lastFrom = l.from
		}
		leases[l.lease.UnixMilli()] = true
		if !inSpans(cov, l.fromRec) {
			d.LateUnpolled++
		}
	}
	d.LateDueSpanMS, d.LateLeaseSpanMS, d.LateLeases = ms(lastFrom.Sub(firstFrom)), ms(hi.lease.Sub(lo.lease)), len(leases)
	switch {
	case d.MaxTopicCallMS >= 1000:
		d.Verdict = "server stalled as a whole: its own API answered ≥ 1 s late (see the run-queue waits for CPU starvation)"
	case d.MaxPromoteLagMS >= 1000:
		d.Verdict = "promotion stall: a due message stayed scheduled ≥ 1 s while the server answered promptly (engine release path)"
	case d.LateUnpolled*2 >= d.LateN:
		d.Verdict = "consumers absent: most late messages came due while no lease call was waiting (test client starved, or blocked in acks)"
	case d.MaxReadyAgeMS >= 1000:
		d.Verdict = "lease stall: ready messages waited ≥ 1 s while consumers were polling and the server answered promptly (long-poll hand-off)"
	default:
		d.Verdict = "spread lateness without a stall the samples caught (general slowness)"
	}
}

func TestS19DiagHelpers(t *testing.T) {
	s := covered([]span{{5, 7}, {0, 2}, {1, 3}, {10, 12}, {6, 8}})
	if want := []span{{0, 3}, {5, 8}, {10, 12}}; !slices.Equal(s, want) {
		t.Fatalf("covered = %v, want %v", s, want)
	}
	for at, want := range map[time.Duration]bool{0: true, 3: true, 4: false, 5: true, 9: false, 12: true, 13: false, -1: false} {
		if got := inSpans(s, at); got != want {
			t.Errorf("inSpans(%d) = %v, want %v", at, got, want)
		}
	}
	if g := maxGap(s, 0, 20); g != 8 {
		t.Errorf("maxGap to 20 = %d, want 8", g)
	}
	if g := maxGap(s, 0, 11); g != 2 {
		t.Errorf("maxGap to 11 = %d, want 2", g)
	}
}
