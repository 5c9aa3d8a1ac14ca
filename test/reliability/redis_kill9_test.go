package reliability

import (
	"testing"
	"time"

	"github.com/delayq/delayq/test/internal/history"
)

type s7Results struct {
	killLoopResults
	AppendFsync string `json:"appendfsync"`
	FsyncWarned bool   `json:"startup_warned_appendfsync"`
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
	t.Logf("appendfsync %s", fsync)
	// Kills land 0.5–5 s apart (short) or 0.5–8 s (full); sends are paced
	// over the whole run so every kill hits live load.
	run := runStoreKillLoop(t, "S7 redis kill -9 loop", storeKillLoop{
		topic: "s7", kills: kills, messages: messages, gap: pick(5*time.Second, 8*time.Second),
		serveArgs: []string{"--redis", url}, leasesLost: true,
		strike: func(_ int, krng *lockedRand, rec *history.Recorder, _ []*proc) time.Duration {
			killRestart(krng)
			return rec.Now()
		},
		// A promotion that failed while Redis was down is retried after
		// 1 s (engine retryAfterErr): messages due meanwhile come out by
		// Redis back + that second + slack.
		downGrace: 2500 * time.Millisecond,
	})
	window, perKill := lossWindow(run.l.rec, run.res.Lost, run.out.Restarts)
	out := s7Results{
		killLoopResults: run.out, AppendFsync: fsync,
		FsyncWarned: logHas(t, run.procs[0], "appendfsync is not always"), LossWindowMS: ms(window), LostPerKill: perKill,
	}
	writeResults(t, name, out)
	return out
}

// lossWindow finds, for each lost id, the first kill after its ok send
// was invoked (the answer may come after the kill: Redis replied just
// before it died); it returns the longest such gap and the lost count
// per kill.
func lossWindow(rec *history.Recorder, lost []string, kills []killJSON) (time.Duration, []int) {
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
