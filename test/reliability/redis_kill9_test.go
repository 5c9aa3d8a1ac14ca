package reliability

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/test/internal/history"
)

type redisRestartJSON struct {
	KillAtMS    float64 `json:"kill_at_ms"`
	Outstanding int     `json:"leases_outstanding_at_kill"`
	RedisDownMS float64 `json:"redis_down_ms"` // kill until PING answers again (AOF reloaded)
}

type s7Results struct {
	Scenario     string             `json:"scenario"`
	Tier         string             `json:"tier"`
	Seed         uint64             `json:"seed"`
	Date         string             `json:"date"`
	AppendFsync  string             `json:"appendfsync"`
	Config       loadConfig         `json:"config"`
	Kills        int                `json:"redis_kills"`
	Check        checkJSON          `json:"check"`
	AckInfo      int                `json:"acks_info"`
	AckRejected  int                `json:"acks_rejected_409"`
	Restarts     []redisRestartJSON `json:"restarts"`
	SendsPerSec  float64            `json:"sends_per_sec"`
	DurationS    float64            `json:"duration_s"`
	DrainMissing int                `json:"drain_missing"`
	SendErrors   []string           `json:"send_errors,omitempty"`
	FsyncWarned  bool               `json:"startup_warned_appendfsync"`
	// LossWindowMS bounds how far before a Redis kill an acknowledged
	// write was lost: over lost messages, the longest time from the
	// invoke of their ok send (Redis acked it after that) to the next kill.
	LossWindowMS float64 `json:"loss_window_ms"`
	LostPerKill  []int   `json:"lost_per_kill,omitempty"`
}

// TestS7RedisKill9Always: kill -9 Redis (AOF, appendfsync always) at
// random times under S1-style load through `delayq serve --redis`; the
// delayq server keeps running. Nothing acked may be lost, nothing
// delivered early or unexpected, duplicates within the bound.
func TestS7RedisKill9Always(t *testing.T) {
	rs := startRedis(t, "always")
	r := runRedisKillLoop(t, "S7-redis-kill9-always", "always", pick(3, 10), pick(3000, 50_000), rs.URL(), func(*lockedRand) { rs.Restart() })
	if r.Check.Lost != 0 || r.Check.Unexpected != 0 || r.Check.Early != 0 || r.Check.Resurrected != 0 || r.Check.Duplicated > r.Check.DupBound {
		t.Errorf("appendfsync always: guarantees violated: %+v", r.Check)
	}
	if r.FsyncWarned {
		t.Errorf("the server warned about appendfsync although it is always")
	}
}

// TestS7RedisKill9Everysec: the same with appendfsync everysec. Even a
// kill -9 of the Redis process (not of the machine) can lose acked
// writes: while a background fsync is slow Redis postpones the AOF
// write(2) by up to 2 s but still replies. The loss (and its window
// before the kill) is measured and reported, not asserted. Nothing may
// be unexpected or early, and the server must have warned at start-up.
func TestS7RedisKill9Everysec(t *testing.T) {
	rs := startRedis(t, "everysec")
	r := runRedisKillLoop(t, "S7-redis-kill9-everysec", "everysec", pick(2, 10), pick(2000, 50_000), rs.URL(), func(*lockedRand) { rs.Restart() })
	t.Logf("appendfsync everysec: lost %d (resurrected %d) over %d acked sends and %d Redis kills", r.Check.Lost, r.Check.Resurrected, r.Check.AckedSends, r.Kills)
	if r.Check.Unexpected != 0 || r.Check.Early != 0 {
		t.Errorf("appendfsync everysec: unexpected %d, early %d", r.Check.Unexpected, r.Check.Early)
	}
	if !r.FsyncWarned {
		t.Errorf("the server did not warn at start-up that appendfsync is not always")
	}
}

// runRedisKillLoop runs the S1 load against `delayq serve --redis url`
// and calls killRestart (kill -9 a Redis process, restart it, return once
// it answers) kills times.
func runRedisKillLoop(t *testing.T, name, fsync string, kills, messages int, url string, killRestart func(*lockedRand)) s7Results {
	s := seed(t)
	t.Logf("tier %s seed %d appendfsync %s", tier(), s, fsync)
	// Kills land 0.5–5 s apart (short) or 0.5–8 s (full); sends are paced
	// over the whole run so every kill hits live load.
	gap := pick(5*time.Second, 8*time.Second)
	cfg := loadConfig{
		Topic: "s7", Messages: messages, Producers: 8, Consumers: 8,
		MaxDelay: 5 * time.Second, Lease: 3 * time.Second, MaxWork: 50 * time.Millisecond,
		SendSpan: time.Duration(kills) * (gap + time.Second) / 2, LeaseMax: 16,
	}
	p := newRedisProc(t, url, "--default-lease", "3s", "--default-max-attempts", "1000")
	p.start()
	c := client(t, p.url(), 10*time.Second)
	l := newLoad(t, cfg, c, s)
	krng := newRand(s + 1)
	t0 := time.Now()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.consume()
	prodDone := make(chan struct{})
	go func() { l.produce(ctx); close(prodDone) }()

	var restarts []redisRestartJSON
	dupBound := 0
	for i := 0; i < kills; i++ {
		sleepCtx(ctx, krng.Dur(500*time.Millisecond, gap))
		killAt := l.rec.Now()
		killRestart(krng)
		out := l.outstandingAt(killAt)
		dupBound += out
		up := l.rec.Now()
		l.rec.Down(killAt, up)
		restarts = append(restarts, redisRestartJSON{KillAtMS: ms(killAt), Outstanding: out, RedisDownMS: ms(up - killAt)})
		t.Logf("redis kill %d at %v: %d leases out; answering again after %v", i+1, killAt.Round(time.Millisecond), out, (up - killAt).Round(time.Millisecond))
	}
	<-prodDone
	missing := l.drain(cfg.MaxDelay+cfg.Lease+30*time.Second, nil)
	time.Sleep(cfg.Lease + time.Second) // let redeliveries of leases whose acks failed show
	l.stopConsumers()
	info, rejected := l.ackUncertain()
	dupBound += info + rejected
	// A promotion that failed while Redis was down is retried after 1 s
	// (engine retryAfterErr): messages due meanwhile come out by Redis
	// back + that second + slack.
	res := history.Check(l.rec.Ops(), l.rec.Downtime(), history.Options{DupBound: dupBound, Slack: 2 * time.Millisecond, DownGrace: 2500 * time.Millisecond})
	t.Logf("checker: %v", res)
	logOpsOf(t, l.rec, first(append(res.Early, res.Lost...), 3))

	window, perKill := lossWindow(l.rec, res.Lost, restarts)
	out := s7Results{
		Scenario: "S7 redis kill -9 loop", Tier: tier(), Seed: s, Date: time.Now().UTC().Format(time.RFC3339), AppendFsync: fsync,
		Config: l.cfg, Kills: kills, Check: toCheckJSON(res, len(l.deliveries)), AckInfo: info, AckRejected: rejected, Restarts: restarts,
		SendsPerSec: float64(res.Acked) / l.sendEnd.Sub(l.sendStart).Seconds(), DurationS: time.Since(t0).Seconds(),
		DrainMissing: missing, SendErrors: first(l.sendErrs, 20),
		FsyncWarned: logHas(t, p, "appendfsync is not always"), LossWindowMS: ms(window), LostPerKill: perKill,
	}
	writeResults(t, name, out)
	if len(l.sendErrs) > 0 {
		t.Errorf("%d sends were rejected with 4xx: %v", len(l.sendErrs), first(l.sendErrs, 5))
	}
	if len(res.SlowAfterRestart) > 0 {
		t.Errorf("%d messages that came due while Redis was down were delivered later than Redis back + 2.5 s: %v", len(res.SlowAfterRestart), first(res.SlowAfterRestart, 10))
	}
	return out
}

// lossWindow finds, for each lost id, the first kill after its ok send
// was invoked (the answer may come after the kill: Redis replied just
// before it died); it returns the longest such gap and the lost count
// per kill.
func lossWindow(rec *history.Recorder, lost []string, kills []redisRestartJSON) (time.Duration, []int) {
	if len(lost) == 0 {
		return 0, nil
	}
	want := map[string]bool{}
	for _, id := range lost {
		want[id] = true
	}
	okAt := map[string]time.Duration{}
	for _, op := range rec.Ops() {
		if op.Kind == history.Send && op.Outcome == history.OK && want[op.ID] {
			okAt[op.ID] = op.Invoke
		}
	}
	per := make([]int, len(kills))
	var longest time.Duration
	for _, at := range okAt {
		for i, k := range kills {
			kill := time.Duration(k.KillAtMS * float64(time.Millisecond))
			if kill >= at {
				per[i]++
				longest = max(longest, kill-at)
				break
			}
		}
	}
	return longest, per
}
