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
func TestS19RedisBigBacklogRestart(t *testing.T) {
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
	runS19(t, s19Engine{
		name: "redis", scenario: "S19 big-backlog restart (redis)", results: "S19-backlog-restart-redis",
		far: pick(50_000, 1_000_000), near: pick(5_000, 100_000), window: pick(30*time.Second, 60*time.Second),
		newProc: func(t *testing.T) *proc {
			p := newRedisProc(t, rs.URL())
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
		},
	})
}
