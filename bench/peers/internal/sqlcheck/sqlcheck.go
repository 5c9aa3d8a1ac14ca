// Package sqlcheck runs the small end-to-end checks of the SQL peer
// targets (River, delaytable): a paced run of single sends and a burst of
// batches, each of which must deliver every message once and none early.
package sqlcheck

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/bench"
)

// N is how many messages each scenario sends.
const N = 200

// Shapes are the scenarios run: paced single sends (one transaction
// each with :tx) and a burst of batches of 10.
func Shapes() []bench.Config {
	return []bench.Config{
		bench.Config{Scenario: bench.ScenarioPaced, N: N, Rate: 200, Lead: 500 * time.Millisecond, Batch: 1,
			Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill(),
		bench.Config{Scenario: bench.ScenarioBurst, N: N, Batch: 10, MaxDelay: time.Second,
			Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill(),
	}
}

// Run resolves specs, runs Shapes on each and fails t unless every
// target received every message exactly once and none early.
func Run(t *testing.T, resolve bench.Resolver, specs ...string) {
	t.Helper()
	var facs []bench.Factory
	for _, s := range specs {
		f, ok, err := resolve(s)
		if !ok || err != nil {
			t.Fatalf("resolve(%q): %v %v", s, ok, err)
		}
		facs = append(facs, f)
	}
	reps := bench.Run(context.Background(), Shapes(), facs, 1, nil)
	if len(reps) != len(Shapes()) {
		t.Fatalf("%d scenario reports, want %d", len(reps), len(Shapes()))
	}
	for _, r := range reps {
		for _, tr := range r.Results {
			if tr.Error != "" {
				t.Errorf("%s on %s: %s", r.Scenario, tr.Target, tr.Error)
				continue
			}
			if got := tr.Summary["checked"].Sum; got < N {
				t.Errorf("%s on %s: %v messages checked, want %d", r.Scenario, tr.Target, got, N)
			}
			for _, k := range []string{"early", "missing", "duplicates"} {
				if st, ok := tr.Summary[k]; !ok || st.Sum != 0 {
					t.Errorf("%s on %s: %s = %v (present %v)", r.Scenario, tr.Target, k, st.Sum, ok)
				}
			}
			t.Logf("%s on %s: lateness p99 %.1f ms", r.Scenario, tr.Target, tr.Summary["p99_ms"].Median)
		}
	}
}
