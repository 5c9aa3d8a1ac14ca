package dqtarget

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// TestLoadShapesNeverEarlyNorMissing is the CI-sized guard of the paced,
// burst and mixed scenarios (sends, releases, leases and acks at once) on the
// embedded engine, in-process and over HTTP: every message sent must be
// received, none before it was due, none twice. Timings are printed, never
// asserted: they depend on the machine.
func TestLoadShapesNeverEarlyNorMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("a few seconds of load per shape and target")
	}
	paced := bench.Config{Scenario: bench.ScenarioPaced, N: 1500, Rate: 500, Lead: 500 * time.Millisecond,
		Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill()
	burst := bench.Config{Scenario: bench.ScenarioBurst, N: 2000, Concurrency: 16, MaxDelay: 2 * time.Second,
		Consumers: 4, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill()
	// Mixed: batches of sends at a rate with delays from 0, so messages
	// come due while others are being sent; it checks those due before
	// sending stopped (how many depends on the sends the machine managed).
	mixed := bench.Config{Scenario: bench.ScenarioMixed, Rate: 500, Duration: 3 * time.Second, MaxDelay: time.Second,
		Batch: 10, Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 10 * time.Second, Durable: true}.Fill()
	embedded, _, _ := Resolve("embedded")
	facs := []bench.Factory{embedded, {Name: "http-embedded", Open: openHTTPEmbedded(t)}}
	reps := bench.Run(context.Background(), []bench.Config{paced, burst, mixed}, facs, 1, nil)
	if len(reps) != 3 {
		t.Fatalf("%d scenario reports, want 3", len(reps))
	}
	for i, r := range reps {
		want := float64([]int{paced.N, burst.N, 0}[i])
		for _, tr := range r.Results {
			if tr.Error != "" {
				t.Errorf("%s on %s: %s", r.Scenario, tr.Target, tr.Error)
				continue
			}
			s := tr.Summary
			if r.Scenario == bench.ScenarioMixed {
				// At least a second's worth of sends must have come due
				// and been checked: zero checked would prove nothing.
				if got := s["checked"].Sum; got < mixed.Rate {
					t.Errorf("%s on %s: %v messages checked, want ≥ %v", r.Scenario, tr.Target, got, mixed.Rate)
				}
			} else if got := s["checked"].Sum; got != want {
				t.Errorf("%s on %s: %v messages checked, want %v", r.Scenario, tr.Target, got, want)
			}
			if got := tr.Lateness.Count(); want > 0 && float64(got) != want {
				t.Errorf("%s on %s: %d messages received, want %v", r.Scenario, tr.Target, got, want)
			}
			for _, k := range []string{"early", "missing", "duplicates"} {
				st, ok := s[k]
				if !ok || st.Sum != 0 {
					t.Errorf("%s on %s: %s = %v (measured: %v); notes %q", r.Scenario, tr.Target, k, st.Sum, ok, tr.Notes)
				}
			}
			t.Logf("%s on %s: lateness p50 %.2f ms, p99 %.2f ms, max %.2f ms (load %s)", r.Scenario, tr.Target,
				s["p50_ms"].Median, s["p99_ms"].Median, s["max_ms"].Median, bench.LoadAvg())
		}
	}
}

// openHTTPEmbedded opens, per run, the embedded engine behind the HTTP
// server in-process and a benchmark client to it: what `delayq serve`
// runs, without building the binary.
func openHTTPEmbedded(t *testing.T) func(context.Context, bench.OpenOptions) (bench.Target, error) {
	return func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
		quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
		st, err := pebblestore.Open(t.TempDir(), pebblestore.Options{Logger: quiet, BallastSize: -1})
		if err != nil {
			return nil, err
		}
		eng, err := engine.Open(ctx, engine.Config{Store: st, Logger: quiet})
		if err != nil {
			_ = st.Close()
			return nil, err
		}
		srv, err := httpapi.New(httpapi.Config{Queue: eng, Ready: eng.Ready, Logger: quiet})
		if err != nil {
			_ = eng.Close(ctx)
			_ = st.Close()
			return nil, err
		}
		ts := httptest.NewServer(srv.Handler())
		c, err := httpClient(ts.URL)
		if err != nil {
			ts.Close()
			return nil, err
		}
		ht := &httpEmbedded{closeFn: func() error {
			ts.Close()
			err := eng.Close(context.Background())
			if cerr := st.Close(); err == nil {
				err = cerr
			}
			return err
		}}
		ht.Topic = topicName(o)
		ht.setQueue(c)
		return ht, nil
	}
}

type httpEmbedded struct {
	QueueTarget
	closeFn func() error
}

func (h *httpEmbedded) Close() error { return h.closeFn() }
