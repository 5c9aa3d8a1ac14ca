package reliability

import (
	"context"
	"fmt"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestS13ConsumerCrash kills a real consumer process (delayq consume
// --exec, whose handler sleeps) with SIGKILL while it holds leases. Every
// leased message must be redelivered once its lease runs out (plus at most
// the expiry sweep's grain), with deliveries and failures each up by one
// (docs/state-machine.md, "Counters"), and none archived while it has
// retries left (asynq #1015).
func TestS13ConsumerCrash(t *testing.T) {
	const n, lease = 20, 2 * time.Second
	p := newProc(t)
	p.start()
	c := client(t, p.url(), 10*time.Second)
	ctx := context.Background()
	if _, err := c.SetTopicSettings(ctx, "s13", delayq.TopicSettings{MaxAttempts: 2, Lease: lease}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i++ {
		if _, err := c.Send(ctx, "s13", delayq.SendRequest{ID: fmt.Sprint("c", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	consumer := exec.Command(bin, "consume", "s13", "--server", p.url(), "--max", fmt.Sprint(n), "--lease", lease.String(), "--exec", "sleep 60")
	consumer.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // so the kill takes its handler too
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	waited := make(chan struct{})
	go func() { _ = consumer.Wait(); close(waited) }()
	defer func() { _ = syscall.Kill(-consumer.Process.Pid, syscall.SIGKILL); <-waited }()

	// Wait until the consumer holds all n leases, then kill it mid-handler.
	deadline := time.Now().Add(10 * time.Second)
	for {
		ti, err := c.Topic(ctx, "s13")
		if err == nil && ti.Counts.Inflight == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the consumer never leased all %d messages: %+v, %v", n, ti, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := syscall.Kill(-consumer.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	<-waited

	var delays []time.Duration
	got := map[string]*delayq.Message{}
	for len(got) < n && time.Since(killed) < lease+10*time.Second {
		ms, err := c.Lease(ctx, "s13", delayq.LeaseRequest{Max: n, Wait: 5 * time.Second, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range ms {
			if got[m.ID] != nil {
				t.Fatalf("%s redelivered twice", m.ID)
			}
			got[m.ID] = m
			delays = append(delays, time.Since(killed))
		}
	}
	if len(got) != n {
		t.Fatalf("redelivered %d of %d messages after the consumer was killed", len(got), n)
	}
	for id, m := range got {
		if m.Attempt != 2 || m.Failures != 1 || m.State != delayq.StateInflight {
			t.Errorf("%s: attempt %d failures %d state %s; want the second delivery after one failure", id, m.Attempt, m.Failures, m.State)
		}
	}
	if ti, _ := c.Topic(ctx, "s13"); ti == nil || ti.Counts.Dead != 0 {
		t.Errorf("messages with a retry left went dead: %+v", ti)
	}
	sort.Slice(delays, func(i, j int) bool { return delays[i] < delays[j] })
	res := map[string]any{"messages": n, "lease_ms": ms(lease), "redelivery_after_kill": quantiles(delays)}
	writeResults(t, "s13_consumer_crash", res)
	t.Logf("redelivered %d/%d: after the kill p50 %v, max %v (lease %v)", len(got), n, delays[len(delays)/2], delays[len(delays)-1], lease)
}
