package bench

import (
	"testing"
	"time"
)

// TestHiccupMeter: the meter records one overrun per sleep while it runs
// (about one a millisecond), none negative, and nothing after Stop; its
// metrics get no ratio between targets.
func TestHiccupMeter(t *testing.T) {
	m := startHiccupMeter()
	time.Sleep(100 * time.Millisecond)
	h := m.Stop()
	n := h.Count()
	if n < 10 || n > 110 {
		t.Fatalf("%d sleeps recorded in 100 ms of 1 ms sleeps", n)
	}
	if h.Min() < 0 {
		t.Fatalf("negative overrun %d µs", h.Min())
	}
	time.Sleep(5 * time.Millisecond)
	if h.Count() != n {
		t.Fatalf("recorded after Stop: %d → %d", n, h.Count())
	}
	var r RunResult
	r.setHiccups(h)
	if r.Values["hiccup_max_ms"] != float64(h.Max())/1000 || r.Values["hiccup_p99_ms"] > r.Values["hiccup_max_ms"] {
		t.Fatalf("reported %v from max %d µs", r.Values, h.Max())
	}
	a, b := Stat{Runs: 1, Median: 1}, Stat{Runs: 1, Median: 2}
	for _, sc := range []string{ScenarioLateness, ScenarioMixed, ScenarioPaced, ScenarioBurst} {
		found := 0
		for _, m := range MetricsOf(sc) {
			if m.Key == "hiccup_p99_ms" || m.Key == "hiccup_max_ms" {
				found++
				if got := ratio(m, a, b); got != "—" {
					t.Errorf("%s %s: ratio %q, want none", sc, m.Key, got)
				}
			}
		}
		if found != 2 {
			t.Errorf("%s lists %d hiccup metrics, want 2", sc, found)
		}
	}
}
