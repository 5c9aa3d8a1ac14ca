package bench

import (
	"strings"
	"testing"
	"time"
)

func TestPendingDelaysSpreadOverTheRange(t *testing.T) {
	c := Config{Scenario: ScenarioPending, Delay: time.Hour, MaxDelay: 30 * 24 * time.Hour, Seed: 1}
	const n = 10_000
	var buckets [30]int
	for seq := uint64(0); seq < n; seq++ {
		d := pendingDelay(c, seq)
		if d < c.Delay || d > c.MaxDelay {
			t.Fatalf("seq %d: delay %v outside [%v, %v]", seq, d, c.Delay, c.MaxDelay)
		}
		if d != pendingDelay(c, seq) {
			t.Fatalf("seq %d: not deterministic", seq)
		}
		buckets[int((d-c.Delay)*30/(c.MaxDelay-c.Delay+1))]++
	}
	for i, b := range buckets { // uniform: n/30 ≈ 333 each
		if b < 200 || b > 470 {
			t.Errorf("day bucket %d holds %d of %d delays: not spread evenly", i, b, n)
		}
	}
	c.MaxDelay = 0
	if d := pendingDelay(c, 5); d != time.Hour {
		t.Errorf("without max-delay: %v, want the fixed delay", d)
	}
}

func TestPendingMaxDelayBelowDelayRefused(t *testing.T) {
	c := Config{Scenario: ScenarioPending, Delay: 2 * time.Hour, MaxDelay: time.Hour}.Fill()
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "--max-delay") {
		t.Errorf("Validate() = %v, want an error naming --max-delay", err)
	}
}
