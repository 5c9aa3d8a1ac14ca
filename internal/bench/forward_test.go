package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

func tinyForward() Config {
	c := Config{Scenario: ScenarioForward, N: 200, Batch: 50, Concurrency: 2, Rate: 500, Duration: 400 * time.Millisecond,
		Lead: time.Second, Grace: 300 * time.Millisecond, Wait: 50 * time.Millisecond, Durable: true}
	return c.Fill()
}

// TestForwardCountsMisbehaviour: the forward scenario finds nothing wrong
// with a correct target, counts dropped, duplicated and early
// confirmations of a bad one, and fails a target that confirms nothing.
func TestForwardCountsMisbehaviour(t *testing.T) {
	good := fakeFactory("good", func() *fakeTarget { return &fakeTarget{} })
	bad := fakeFactory("bad", func() *fakeTarget {
		return &fakeTarget{
			drop:    func(s uint64) bool { return s%50 == 0 },
			dup:     func(s uint64) bool { return s%40 == 0 },
			early:   func(s uint64) bool { return s%30 == 0 },
			earlyBy: 800 * time.Millisecond, // backlog due ≥ 2 s after its fill, paced 1 s after each send
		}
	})
	silent := fakeFactory("silent", func() *fakeTarget { return &fakeTarget{drop: func(uint64) bool { return true }} })
	var holder *holdingFake
	holding := Factory{Name: "holding", Open: func(context.Context, OpenOptions) (Target, error) {
		holder = &holdingFake{fakeTarget: &fakeTarget{}}
		return holder, nil
	}}
	reps := Run(context.Background(), []Config{tinyForward()}, []Factory{good, bad, silent, holding}, 1, nil)
	g, b, s, h := reps[0].Results[0], reps[0].Results[1], reps[0].Results[2], reps[0].Results[3]
	if g.Error != "" || b.Error != "" || h.Error != "" {
		t.Fatalf("errors: %q %q %q", g.Error, b.Error, h.Error)
	}
	if holder.holds != 1 || h.Summary["backlog_missing"].Sum != 0 || h.Summary["fwd_msgs_per_s"].Median <= 0 {
		t.Errorf("a Holder target: held %d times, %+v", holder.holds, h.Summary)
	}
	for _, k := range []string{"backlog_missing", "backlog_early", "backlog_duplicates", "early", "duplicates", "missing"} {
		if v := g.Summary[k].Sum; v != 0 {
			t.Errorf("good target: %s = %v", k, v)
		}
	}
	if v := g.Summary["fwd_msgs_per_s"].Median; v <= 0 {
		t.Errorf("good target: forwarding rate %v", v)
	}
	if v := g.Summary["checked"].Sum; v != 200 { // 500/s × 0.4 s
		t.Errorf("good target: paced checked %v, want 200", v)
	}
	// Of 0..199: dropped 0, 50, 100, 150; duplicated 40, 80, 120, 160;
	// early 30, 60, 90, 120, 180 (not 0 or 150: dropped).
	want := map[string]float64{"backlog_missing": 4, "backlog_duplicates": 4, "backlog_early": 5, "missing": 4, "duplicates": 4, "early": 5}
	for k, v := range want {
		if got := b.Summary[k].Sum; got != v {
			t.Errorf("bad target: %s = %v, want %v", k, got, v)
		}
	}
	if !strings.Contains(s.Error, "no message was confirmed") {
		t.Errorf("a target that confirms nothing: error %q", s.Error)
	}
}

func TestForwardCLI(t *testing.T) {
	var gotBrokers Brokers
	var gotMax int
	cli := CLI{Name: "bench-test", Resolve: func(string) (Factory, bool, error) { return Factory{}, false, nil }, DefaultTarget: "nosuch",
		Forward: func(b Brokers, maxInFlight int) ([]Factory, []string, error) {
			gotBrokers, gotMax = b, maxInFlight
			var facs []Factory
			var skipped []string
			if b.Redis != "" {
				facs = append(facs, fakeFactory("redis", func() *fakeTarget { return &fakeTarget{} }))
			}
			if b.NATS == "" {
				skipped = append(skipped, "NATS JetStream (no --nats)")
			}
			return facs, skipped, nil
		}}
	var out, errb bytes.Buffer
	args := []string{"forward", "--redis-target", "redis://127.0.0.1:1", "--max-in-flight", "7", "--n", "100", "--rate", "500", "--duration", "200ms",
		"--lead", "500ms", "--grace", "300ms", "--wait", "50ms", "--progress", "off"}
	if code := cli.Main(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if gotBrokers.Redis != "redis://127.0.0.1:1" || gotMax != 7 {
		t.Fatalf("resolver got %+v, max in flight %d", gotBrokers, gotMax)
	}
	if !strings.Contains(out.String(), "### forward") || !strings.Contains(errb.String(), "skipped NATS JetStream (no --nats)") {
		t.Fatalf("out:\n%s\nstderr:\n%s", out.String(), errb.String())
	}
	for _, args := range [][]string{
		{"forward", "--progress", "off"},                              // no broker
		{"forward", "--redis-target", "x", "--max-in-flight", "5000"}, // out of range
	} {
		out.Reset()
		errb.Reset()
		if code := cli.Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	noFwd := CLI{Name: "peer-test", Resolve: cli.Resolve, DefaultTarget: "x"}
	if code := noFwd.Main(context.Background(), []string{"forward", "--redis-target", "x"}, &out, &errb); code != 2 {
		t.Errorf("forward on a command without it: exit %d, want 2", code)
	}
}
