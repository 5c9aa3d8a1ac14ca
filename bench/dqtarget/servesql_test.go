package dqtarget

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// buildDelayq builds the delayq binary for the serve targets and points
// DELAYQ_BIN at it.
func buildDelayq(t *testing.T) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "delayq")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/delayq/delayq/cmd/delayq")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build delayq: %v\n%s", err, out)
	}
	t.Setenv("DELAYQ_BIN", bin)
}

// sqlShapes are small paced (single sends, one transaction each with :tx)
// and burst (batches of 10) runs: every message must arrive once, none early.
func sqlShapes() []bench.Config {
	return []bench.Config{
		bench.Config{Scenario: bench.ScenarioPaced, N: 200, Rate: 200, Lead: 500 * time.Millisecond, Batch: 1,
			Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill(),
		bench.Config{Scenario: bench.ScenarioBurst, N: 200, Batch: 10, MaxDelay: time.Second,
			Concurrency: 4, Consumers: 2, Wait: 500 * time.Millisecond, Grace: 15 * time.Second, Durable: true}.Fill(),
	}
}

// checkAllDelivered fails unless every target received every message of
// every scenario exactly once and none early.
func checkAllDelivered(t *testing.T, reps []bench.ScenarioReport, wantTargets int) {
	t.Helper()
	if len(reps) == 0 {
		t.Fatal("no scenario ran")
	}
	for _, r := range reps {
		if len(r.Results) != wantTargets {
			t.Fatalf("%s: %d targets, want %d", r.Scenario, len(r.Results), wantTargets)
		}
		for _, tr := range r.Results {
			if tr.Error != "" {
				t.Errorf("%s on %s: %s", r.Scenario, tr.Target, tr.Error)
				continue
			}
			if got := tr.Summary["checked"].Sum; got < 200 {
				t.Errorf("%s on %s: %v messages checked, want 200", r.Scenario, tr.Target, got)
			}
			for _, k := range []string{"early", "missing", "duplicates"} {
				st, ok := tr.Summary[k]
				if !ok || st.Sum != 0 {
					t.Errorf("%s on %s: %s = %v (present %v)", r.Scenario, tr.Target, k, st.Sum, ok)
				}
			}
			t.Logf("%s on %s: p99 %.1f ms", r.Scenario, tr.Target, tr.Summary["p99_ms"].Median)
		}
	}
}

func resolveAll(t *testing.T, specs ...string) []bench.Factory {
	t.Helper()
	var fs []bench.Factory
	for _, s := range specs {
		f, ok, err := Resolve(s)
		if !ok || err != nil {
			t.Fatalf("Resolve(%q): %v %v", s, ok, err)
		}
		fs = append(fs, f)
	}
	return fs
}

func TestServePostgresTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts PostgreSQL and delayq serve")
	}
	srv := pgtest.Start(t)
	buildDelayq(t)
	facs := resolveAll(t, "serve-postgres:"+srv.URL(), "serve-postgres:"+srv.URL()+":tx")
	checkAllDelivered(t, bench.Run(context.Background(), sqlShapes(), facs, 1, nil), 2)
}

func TestServeMySQLTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("starts MariaDB and delayq serve")
	}
	srv := mysqltest.Start(t)
	buildDelayq(t)
	facs := resolveAll(t, "serve-mysql:"+srv.URL(), "serve-mysql:"+srv.URL()+":tx")
	checkAllDelivered(t, bench.Run(context.Background(), sqlShapes(), facs, 1, nil), 2)
}

func TestResolveSQLServe(t *testing.T) {
	for spec, wantName := range map[string]string{
		"serve-postgres:postgres://u@127.0.0.1:5432/db":    "serve-postgres",
		"serve-postgres:postgres://u@127.0.0.1:5432/db:tx": "serve-postgres:tx",
		"serve-mysql:mysql://u@127.0.0.1:3306/db:tx":       "serve-mysql:tx",
	} {
		f, ok, err := Resolve(spec)
		if !ok || err != nil || f.Name != wantName {
			t.Errorf("Resolve(%q) = %q, %v, %v; want %q", spec, f.Name, ok, err, wantName)
		}
	}
	for _, bad := range []string{"serve-postgres", "serve-mysql:mysql://host-only", "serve-postgres:nonsense"} {
		if _, ok, err := Resolve(bad); !ok || err == nil {
			t.Errorf("Resolve(%q) = %v, %v; want a clear error", bad, ok, err)
		}
	}
}
