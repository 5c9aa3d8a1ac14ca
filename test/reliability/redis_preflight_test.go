package reliability

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

type s10Results struct {
	Scenario      string          `json:"scenario"`
	Date          string          `json:"date"`
	Refused       map[string]bool `json:"refused_to_start"`
	Warned        map[string]bool `json:"warned"`
	Stored        int             `json:"stored_before_full"`
	FullStatus    map[string]int  `json:"send_status_when_full"`
	FullAnswer    latencyJSON     `json:"send_answer_time_when_full"`
	LeasedAcked   int             `json:"leased_and_acked_when_full"`
	ResumedSendMS float64         `json:"send_ok_after_maxmemory_raised_ms"`
}

// TestS10RedisPreflight: `delayq serve --redis` refuses to start on a
// Redis that may evict (allkeys-lru, volatile-lru), starts with a
// warning when AOF is off or appendfsync is everysec; with noeviction at
// maxmemory, sends answer 503 while everything stored stays there and
// can still be leased and acked, and sends succeed again as soon as
// memory is available.
func TestS10RedisPreflight(t *testing.T) {
	out := s10Results{Scenario: "S10 redis preflight", Date: time.Now().UTC().Format(time.RFC3339),
		Refused: map[string]bool{}, Warned: map[string]bool{}, FullStatus: map[string]int{}}
	for _, policy := range []string{"allkeys-lru", "volatile-lru"} {
		rs := startRedis(t, "always", "--maxmemory-policy", policy)
		p := newRedisProc(t, rs.URL())
		_, err := p.tryStart(15 * time.Second)
		refused := err != nil && strings.Contains(err.Error(), "exited") && logHas(t, p, "maxmemory-policy")
		out.Refused[policy] = refused
		if !refused {
			t.Errorf("maxmemory-policy %s: want a refusal naming maxmemory-policy, got start error %v", policy, err)
		}
	}
	for name, args := range map[string][]string{"appendonly-no": {"--appendonly", "no"}, "appendfsync-everysec": nil} {
		fsync := "always"
		if name == "appendfsync-everysec" {
			fsync = "everysec"
		}
		rs := startRedis(t, fsync, args...)
		p := newRedisProc(t, rs.URL())
		p.start()
		want := map[string]string{"appendonly-no": "AOF is off", "appendfsync-everysec": "appendfsync is not always"}[name]
		out.Warned[name] = logHas(t, p, want)
		if !out.Warned[name] {
			t.Errorf("%s: no start-up warning %q", name, want)
		}
		p.kill9()
	}

	// noeviction at maxmemory.
	ctx := context.Background()
	rs := startRedis(t, "always")
	p := newRedisProc(t, rs.URL())
	p.start()
	c := client(t, p.url(), 10*time.Second)
	const topic, n = "s10", 200
	for i := 0; i < n; i++ {
		if _, err := c.Send(ctx, topic, delayq.SendRequest{ID: "m" + strconv.Itoa(i), Payload: []byte(strings.Repeat("x", 512))}); err != nil {
			t.Fatalf("send before full: %v", err)
		}
	}
	out.Stored = n
	ac := rdb(t, rs.Addr())
	used, err := infoField(ctx, ac, "memory", "used_memory")
	if err != nil {
		t.Fatal(err)
	}
	if err := ac.ConfigSet(ctx, "maxmemory", used).Err(); err != nil {
		t.Fatal(err)
	}
	var answers []time.Duration
	for i := 0; i < 20; i++ {
		t0 := time.Now()
		_, err := c.Send(ctx, topic, delayq.SendRequest{ID: "full" + strconv.Itoa(i), Payload: []byte(strings.Repeat("x", 4096))})
		answers = append(answers, time.Since(t0))
		out.FullStatus[strconv.Itoa(statusOf(err))]++
	}
	out.FullAnswer = quantiles(answers)
	if out.FullStatus["503"] != 20 {
		t.Errorf("sends at maxmemory answered %v, want 503 each", out.FullStatus)
	}
	// Everything stored before is still there, and consumers drain it.
	got := map[string]bool{}
	for deadline := time.Now().Add(20 * time.Second); len(got) < n && time.Now().Before(deadline); {
		msgs, err := c.Lease(ctx, topic, delayq.LeaseRequest{Max: 50, Wait: 500 * time.Millisecond})
		if err != nil {
			t.Fatalf("lease at maxmemory: %v", err)
		}
		for _, m := range msgs {
			if !strings.HasPrefix(m.ID, "m") {
				t.Errorf("leased %s, which was refused", m.ID)
			}
			if err := c.Ack(ctx, topic, m.ID, m.Receipt); err != nil {
				t.Errorf("ack %s at maxmemory: %v", m.ID, err)
				continue
			}
			got[m.ID] = true
		}
	}
	out.LeasedAcked = len(got)
	if len(got) != n {
		t.Errorf("at maxmemory: leased and acked %d of %d stored messages", len(got), n)
	}
	if err := ac.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	d, ok := waitUntil(10*time.Second, func() bool {
		_, err := c.Send(ctx, topic, delayq.SendRequest{ID: "after", Payload: []byte("x")})
		return err == nil
	})
	out.ResumedSendMS = ms(d)
	if !ok {
		t.Errorf("sends did not resume within 10 s of raising maxmemory")
	}
	writeResults(t, "S10-redis-preflight", out)
}
