package reliability

import (
	"context"
	"strconv"
	"testing"
	"time"
)

// s19Redis are the Redis engine's own S19 figures: Redis's used_memory
// (INFO memory) before the fill, after it (sampled right after the last
// send was answered, before the kill) and after the drain, and what the
// backlog cost per pending message.
type s19Redis struct {
	AppendFsync         string  `json:"appendfsync"`
	UsedMemoryStartMiB  float64 `json:"used_memory_mib_start"` // redis-server up, nothing sent
	UsedMemoryFilledMiB float64 `json:"used_memory_mib_filled"`
	UsedMemoryRSSMiB    float64 `json:"used_memory_rss_mib_filled"`
	BytesPerPending     float64 `json:"used_memory_bytes_per_pending_message"` // (filled − start) / (far + near)
	UsedMemoryDrainMiB  float64 `json:"used_memory_mib_after_drain"`           // far pending, near acked (dedup tombstones)
	AOFMiB              float64 `json:"aof_mib_at_kill"`
	// With Redis killed too: from redis-server's start to its first PONG
	// (its AOF loaded), and the attempts the waiting server made.
	RedisLoadMs   float64 `json:"redis_restart_to_pong_ms,omitempty"`
	ServerWaitLog bool    `json:"server_logged_store_unavailable,omitempty"`
}

// s19RedisMaxBytesPerMessage bounds Redis memory per pending message of
// S19 (≈ 64-byte payloads, short ids). The layout measured ≈ 600 B per
// message with 256-byte payloads (redisstore TestMemoryPerPendingMessage);
// 1 KiB is generous, so that only a regression of the layout trips it.
const s19RedisMaxBytesPerMessage = 1024

// TestS19RedisBigBacklogRestart: S19 on the Redis engine — the same
// backlog (far 1 h – 30 d, near within the window) sent through
// `delayq serve --redis` to its own redis-server (AOF, appendfsync
// always; never the shared 6379), then kill -9 of the delayq server
// right after the last send and a restart on the same Redis, which stays
// up (Redis restarts are S7's), 2 s later. The server is stateless: this proves that
// it is ready fast on a Redis holding a big backlog, releases on time
// what came due while it was down, delivers no far message, and that
// Redis memory per pending message stays bounded. Pass: those of
// TestS19BigBacklogRestart, plus used_memory per pending message
// < 1 KiB.
func TestS19RedisBigBacklogRestart(t *testing.T) { runS19Redis(t, false) }

// TestS19RedisKilledWithBigBacklog: S19 with redis-server killed (kill -9)
// as well, as a host crash would: right after the last send both die;
// the delayq server is started first and finds Redis down (--store-wait
// keeps it trying), then redis-server starts and reloads its AOF holding
// the backlog. Pass: those of TestS19RedisBigBacklogRestart — nothing
// lost, nothing early, what came due while down released within 1 s of
// ready — and the server waited for Redis instead of exiting.
func TestS19RedisKilledWithBigBacklog(t *testing.T) { runS19Redis(t, true) }

func runS19Redis(t *testing.T, killRedis bool) {
	rs := startRedis(t, "always")
	rc := rdb(t, rs.Addr())
	usedMemory := func(field string) float64 {
		v, err := infoField(context.Background(), rc, "memory", field)
		if err != nil {
			t.Fatalf("INFO memory %s: %v", field, err)
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			t.Fatalf("INFO memory %s=%q: %v", field, v, err)
		}
		return float64(n)
	}
	rj := &s19Redis{AppendFsync: "always"}
	var start, filled float64
	var pending int
	eng := s19Engine{
		name: "redis", scenario: "S19 big-backlog restart (redis)", results: "S19-backlog-restart-redis",
		far: pick(50_000, 1_000_000), near: pick(5_000, 100_000), window: pick(30*time.Second, 60*time.Second),
		newProc: func(t *testing.T) *proc {
			p := newRedisProc(t, rs.URL(), "--store-wait", "3m")
			start = usedMemory("used_memory")
			return p
		},
		dataDir: func(*proc) string { return rs.Dir() },
		// Down 2 s rather than restarted at once: ≈ 1/15 of the near
		// messages (≈ 330 short, 3 300 full) come due while no server
		// runs, and the restarted one must find them in Redis and release
		// them by ready + 1 s (the checker's slow-after-restart).
		down: 2 * time.Second,
		sent: func(t *testing.T) {
			filled = usedMemory("used_memory")
			rj.UsedMemoryRSSMiB = usedMemory("used_memory_rss") / (1 << 20)
		},
		drained: func(t *testing.T, out *s19Results) {
			pending = out.Far + out.Near
			rj.UsedMemoryStartMiB, rj.UsedMemoryFilledMiB = start/(1<<20), filled/(1<<20)
			rj.BytesPerPending = (filled - start) / float64(pending)
			rj.UsedMemoryDrainMiB = usedMemory("used_memory") / (1 << 20)
			rj.AOFMiB = out.DataMiB
			out.Redis = rj
		},
		check: func(t *testing.T, out *s19Results) {
			if rj.BytesPerPending <= 0 || rj.BytesPerPending >= s19RedisMaxBytesPerMessage {
				t.Errorf("Redis used_memory per pending message %.0f B (%.1f MiB for %d), want < %d B",
					rj.BytesPerPending, (filled-start)/(1<<20), pending, s19RedisMaxBytesPerMessage)
			}
			if killRedis && !rj.ServerWaitLog {
				t.Errorf("the server never logged waiting for Redis: it was not started while Redis was down")
			}
		},
	}
	if killRedis {
		eng.scenario, eng.results = "S19 big-backlog restart (redis, redis-server killed too)", "S19-backlog-restart-redis-killed"
		eng.down = 0
		eng.killed = func(*testing.T) { rs.Kill() }
		eng.restart = func(t *testing.T, p *proc) (time.Duration, error) {
			type started struct {
				d   time.Duration
				err error
			}
			done := make(chan started, 1)
			go func() {
				d, err := p.tryStart(4 * time.Minute)
				done <- started{d, err}
			}()
			// The server first, finding Redis down; then Redis.
			if _, ok := waitUntil(30*time.Second, func() bool { return logHas(t, p, "store unavailable; retrying") }); ok {
				rj.ServerWaitLog = true
			}
			t0 := time.Now()
			rs.Restart() // returns at its first PONG: the AOF is loaded
			rj.RedisLoadMs = ms(time.Since(t0))
			r := <-done
			return r.d, r.err
		}
	}
	runS19(t, eng)
}
