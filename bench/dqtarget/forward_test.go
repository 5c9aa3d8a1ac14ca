package dqtarget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestForwardToRedisStream runs the forward scenario, tiny, against a
// redis-server the test starts: every message confirmed once, none
// early, and the stream the run created is gone afterwards. A broker
// that is unreachable fails the run (nothing confirmed is never a pass).
func TestForwardToRedisStream(t *testing.T) {
	srv := redistest.Start(t)
	facs, skipped, err := ForwardFactories(bench.Brokers{Redis: srv.URL()}, 40)
	if err != nil || len(facs) != 1 || len(skipped) != 3 {
		t.Fatalf("factories %d, skipped %q, err %v", len(facs), skipped, err)
	}
	c := bench.Config{Scenario: bench.ScenarioForward, N: 300, Batch: 100, Concurrency: 2, Rate: 300, Duration: time.Second,
		Lead: 500 * time.Millisecond, Grace: 10 * time.Second, Durable: true}.Fill()
	reps := bench.Run(context.Background(), []bench.Config{c}, facs, 1, nil)
	tr := reps[0].Results[0]
	if tr.Error != "" {
		t.Fatal(tr.Error)
	}
	for _, k := range []string{"backlog_missing", "backlog_early", "backlog_duplicates", "early", "duplicates", "missing"} {
		if v := tr.Summary[k].Sum; v != 0 {
			t.Errorf("%s = %v", k, v)
		}
	}
	if got := tr.Summary["checked"].Sum; got != 300 {
		t.Errorf("paced: %v checked, want 300", got)
	}
	if v := tr.Summary["fwd_msgs_per_s"].Median; v <= 0 {
		t.Errorf("forwarding rate %v", v)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "delayq-bench-*").Result()
	if err != nil || len(keys) != 0 {
		t.Errorf("streams left behind: %q %v", keys, err)
	}

	srv.Kill()
	reps = bench.Run(context.Background(), []bench.Config{c}, facs, 1, nil)
	if e := reps[0].Results[0].Error; !strings.Contains(e, "redis") {
		t.Errorf("broker down: error %q", e)
	}
}
