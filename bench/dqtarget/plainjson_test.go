package dqtarget

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/clock"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// TestPlainJSONClient: json+ targets send (single and batched), lease and
// ack through plainQueue, and the checker sees every message once, none
// early — so figures measured through it count real deliveries.
func TestPlainJSONClient(t *testing.T) {
	ctx := context.Background()
	st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: quietLog, BallastSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startHTTPServer(ctx, st, clock.Real{})
	if err != nil {
		_ = st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.close() })

	f, ok, err := Resolve(PlainPrefix + srv.URL)
	if !ok || err != nil {
		t.Fatalf("Resolve(json+%s): %v, %v", srv.URL, ok, err)
	}
	if !strings.HasPrefix(f.Name, PlainPrefix) {
		t.Errorf("target name %q does not say json+", f.Name)
	}
	drain := bench.Config{Scenario: bench.ScenarioDrain, N: 1000, Payload: 1024, Consumers: 2, Grace: 10 * time.Second, Durable: true}.Fill()
	paced := bench.Config{Scenario: bench.ScenarioPaced, N: 300, Rate: 300, Lead: 300 * time.Millisecond,
		Concurrency: 2, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 10 * time.Second, Durable: true}.Fill()
	reps := bench.Run(ctx, []bench.Config{drain, paced}, []bench.Factory{f}, 1, nil)
	if len(reps) != 2 {
		t.Fatalf("%d reports, want 2", len(reps))
	}
	for i, r := range reps {
		for _, tr := range r.Results {
			if tr.Error != "" {
				t.Fatalf("%s: %s", r.Scenario, tr.Error)
			}
			s := tr.Summary
			keys := []string{"missing", "duplicates"}
			if i == 0 {
				// A drain reports no count checked: all received, at a rate.
				if got := s["msgs_per_s"].Sum; got <= 0 {
					t.Errorf("drain: %v msgs/s, want some", got)
				}
			} else {
				keys = append(keys, "early")
				if got := s["checked"].Sum; got != float64(paced.N) {
					t.Errorf("paced: %v messages checked, want %d", got, paced.N)
				}
			}
			for _, k := range keys {
				if st, ok := s[k]; !ok || st.Sum != 0 {
					t.Errorf("%s: %s = %v (measured: %v)", r.Scenario, k, st.Sum, ok)
				}
			}
		}
	}

	if _, ok, _ := Resolve(PlainPrefix + "embedded"); !ok {
		t.Fatal("json+embedded not resolved")
	}
	fe, _, _ := Resolve(PlainPrefix + "embedded")
	if tgt, err := fe.Open(ctx, bench.OpenOptions{Durable: true, Run: 1}); err == nil {
		_ = tgt.Close()
		t.Error("json+embedded opened; want an error saying it is not an HTTP target")
	} else if !strings.Contains(err.Error(), "not an HTTP target") {
		t.Errorf("json+embedded: %v, want it to say not an HTTP target", err)
	}
}
