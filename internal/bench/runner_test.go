package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func tiny(scenario string) Config {
	c := Config{Scenario: scenario, N: 200, Batch: 10, Concurrency: 2, Consumers: 2, LeaseMax: 10,
		Window: 200 * time.Millisecond, Lead: 100 * time.Millisecond, Grace: 300 * time.Millisecond,
		Wait: 50 * time.Millisecond, Duration: 300 * time.Millisecond, MaxDelay: 100 * time.Millisecond, Rate: 500, Durable: true}
	return c.Fill()
}

func TestLatenessScenarioDetectsMisbehaviour(t *testing.T) {
	bad := fakeFactory("bad", func() *fakeTarget {
		return &fakeTarget{
			drop:    func(s uint64) bool { return s%50 == 0 },
			dup:     func(s uint64) bool { return s%40 == 0 },
			early:   func(s uint64) bool { return s%30 == 0 },
			earlyBy: 40 * time.Millisecond, // the fill is done 100 ms before the first due time
		}
	})
	good := fakeFactory("good", func() *fakeTarget { return &fakeTarget{} })
	reps := Run(context.Background(), []Config{tiny(ScenarioLateness)}, []Factory{good, bad}, 1, nil)
	g, b := reps[0].Results[0], reps[0].Results[1]
	if g.Error != "" || b.Error != "" {
		t.Fatalf("errors: %q %q", g.Error, b.Error)
	}
	for _, k := range []string{"early", "duplicates", "missing"} {
		if v := g.Summary[k].Sum; v != 0 {
			t.Errorf("good target: %s = %v", k, v)
		}
	}
	// dropped: 0, 50, 100, 150. duplicated (if delivered): 40, 80, 120, 160.
	// early (if delivered): 30, 60, 90, 120, 180.
	want := map[string]float64{"missing": 4, "duplicates": 4, "early": 5}
	for k, v := range want {
		if got := b.Summary[k].Sum; got != v {
			t.Errorf("bad target: %s = %v, want %v", k, got, v)
		}
	}
	if b.Lateness.Count() != 196 || g.Lateness.Count() != 200 {
		t.Errorf("lateness counts %d/%d, want 200/196", g.Lateness.Count(), b.Lateness.Count())
	}
	if len(b.Notes) == 0 || !strings.Contains(strings.Join(b.Notes, " "), "early") {
		t.Errorf("no note about early deliveries: %q", b.Notes)
	}
}

func TestEveryScenarioRunsOnFake(t *testing.T) {
	var cfgs []Config
	for _, s := range Scenarios {
		cfgs = append(cfgs, tiny(s))
	}
	reps := Run(context.Background(), cfgs, []Factory{fakeFactory("fake", func() *fakeTarget { return &fakeTarget{} })}, 2, nil)
	for _, r := range reps {
		tr := r.Results[0]
		if tr.Error != "" {
			t.Errorf("%s: %s", r.Scenario, tr.Error)
			continue
		}
		if len(tr.Runs) != 2 {
			t.Errorf("%s: %d runs, want 2", r.Scenario, len(tr.Runs))
		}
		for _, m := range r.Metrics {
			st, ok := tr.Summary[m.Key]
			if !ok {
				t.Errorf("%s: metric %s missing", r.Scenario, m.Key)
				continue
			}
			if m.Higher && st.Median <= 0 {
				t.Errorf("%s: %s = %v", r.Scenario, m.Key, st.Median)
			}
			if m.Count && m.Key != "checked" && st.Sum != 0 {
				t.Errorf("%s: %s = %v on a correct target", r.Scenario, m.Key, st.Sum)
			}
		}
	}
	for _, r := range reps {
		st := r.Results[0].Summary
		if r.Scenario == ScenarioPending {
			if got := st["rss_mb"].Median; got != 42 {
				t.Errorf("pending rss = %v, want 42", got)
			}
		}
		if cpu, ok := st[cpuMetric.Key]; ok && cpu.Median != 2*float64(fakeCPUPerMsg.Microseconds()) {
			t.Errorf("%s: server CPU per message %v µs, want %v (one send + one receive)", r.Scenario, cpu.Median, 2*fakeCPUPerMsg.Microseconds())
		}
	}
}

// TestLoadScenariosDetectMisbehaviour: paced and burst count every drop,
// duplicate and early delivery of a misbehaving target, and find none on
// a correct one.
func TestLoadScenariosDetectMisbehaviour(t *testing.T) {
	bad := fakeFactory("bad", func() *fakeTarget {
		return &fakeTarget{
			drop:    func(s uint64) bool { return s%50 == 0 },
			dup:     func(s uint64) bool { return s%40 == 0 },
			early:   func(s uint64) bool { return s%30 == 0 },
			earlyBy: 500 * time.Millisecond, // a release this early stays early on a busy machine
		}
	})
	good := fakeFactory("good", func() *fakeTarget { return &fakeTarget{} })
	paced := tiny(ScenarioPaced)
	paced.Lead = time.Second // every message due well after the fake's early release
	burst := tiny(ScenarioBurst)
	burst.MaxDelay = 2 * time.Second
	reps := Run(context.Background(), []Config{paced, burst}, []Factory{good, bad}, 1, nil)
	for _, r := range reps {
		g, b := r.Results[0], r.Results[1]
		if g.Error != "" || b.Error != "" {
			t.Fatalf("%s errors: %q %q", r.Scenario, g.Error, b.Error)
		}
		if got := g.Summary["checked"].Sum; got != 200 {
			t.Errorf("%s: good target checked %v, want 200", r.Scenario, got)
		}
		for _, k := range []string{"early", "duplicates", "missing"} {
			if v := g.Summary[k].Sum; v != 0 {
				t.Errorf("%s: good target: %s = %v", r.Scenario, k, v)
			}
		}
		// dropped: 0, 50, 100, 150; duplicated: 40, 80, 120, 160.
		for k, v := range map[string]float64{"missing": 4, "duplicates": 4} {
			if got := b.Summary[k].Sum; got != v {
				t.Errorf("%s: bad target: %s = %v, want %v", r.Scenario, k, got, v)
			}
		}
		// Early candidates: 30, 60, 90, 120, 180 (burst: those whose
		// delay exceeds the fake's head start).
		if got := b.Summary["early"].Sum; got < 1 || got > 5 {
			t.Errorf("%s: bad target: early = %v", r.Scenario, got)
		}
	}
}

func TestSummariseAndFormat(t *testing.T) {
	s := Summarise([]float64{3, 1, 2})
	if s.Min != 1 || s.Median != 2 || s.Max != 3 || s.Sum != 6 || s.Runs != 3 {
		t.Fatalf("odd: %+v", s)
	}
	if s := Summarise([]float64{4, 1, 2, 3}); s.Median != 2.5 {
		t.Fatalf("even median %v", s.Median)
	}
	cases := []struct {
		v    float64
		unit string
		want string
	}{
		{105230.4, "msgs/s", "105,230"}, {0, "", "0"}, {1234567, "", "1,234,567"},
		{1.2345, "ms", "1.234"}, {250.55, "ms", "250.6"}, {4812.3, "ms", "4,812"}, {31.25, "MiB", "31.2"},
	}
	for _, c := range cases {
		if got := FormatValue(c.v, c.unit); got != c.want {
			t.Errorf("FormatValue(%v, %q) = %q, want %q", c.v, c.unit, got, c.want)
		}
	}
	if got := FormatRatio(12.34); got != "12.3× better" {
		t.Errorf("FormatRatio(12.34) = %q", got)
	}
	if got := FormatRatio(0.25); got != "4.00× worse" {
		t.Errorf("FormatRatio(0.25) = %q", got)
	}
	if got := FormatRatio(1.001); got != "1.00× (same)" {
		t.Errorf("FormatRatio(1.001) = %q", got)
	}
	thr := Metric{Key: "x", Higher: true}
	lat := Metric{Key: "y"}
	a, b := Stat{Median: 100, Runs: 1}, Stat{Median: 25, Runs: 1}
	if got := ratio(thr, a, b); got != "4.00× better" {
		t.Errorf("throughput ratio %q", got)
	}
	if got := ratio(lat, b, a); got != "4.00× better" {
		t.Errorf("latency ratio %q", got)
	}
	if got := ratio(Metric{Count: true}, a, b); got != "—" {
		t.Errorf("count ratio %q", got)
	}
}

func TestWriteTable(t *testing.T) {
	rep := &Report{Machine: Machine{CPUs: 2, CPUModel: "Test CPU", GoVersion: "go1.x"}, Runs: 3, Scenarios: []ScenarioReport{{
		Scenario: ScenarioSend,
		Params:   []Param{{"n", "10"}, {"batch", "100"}},
		Metrics:  MetricsOf(ScenarioSend),
		Results: []TargetResult{
			{Target: "embedded", Summary: map[string]Stat{"msgs_per_s": {Min: 90000, Median: 100000, Max: 110000, Runs: 3}}},
			{Target: "peer", Summary: map[string]Stat{"msgs_per_s": {Min: 10000, Median: 10000, Max: 10000, Runs: 3}}, Error: "run 2: boom"},
		},
	}}}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	out := buf.String()
	for _, want := range []string{
		"machine: 2 CPUs (Test CPU), go1.x",
		"### send (n=10 batch=100)",
		"| metric                   | embedded                   | peer   | embedded vs peer |",
		"| ------------------------ | -------------------------- | ------ | ---------------- |",
		"| send throughput (msgs/s) | 100,000 (90,000 – 110,000) | 10,000 | 10.0× better     |",
		"- peer: FAILED: run 2: boom",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestCLIRunsTablesJSONAndPlot(t *testing.T) {
	resolve := func(spec string) (Factory, bool, error) {
		if spec == "fake" || spec == "fake2" {
			return fakeFactory(spec, func() *fakeTarget { return &fakeTarget{} }), true, nil
		}
		return Factory{}, false, nil
	}
	cli := CLI{Name: "bench-test", Resolve: resolve, DefaultTarget: "fake"}
	dir := t.TempDir()
	plot := filepath.Join(dir, "p.svg")
	args := []string{"lateness,drain", "--target", "fake,fake2", "--n", "100", "--window", "100ms", "--lead", "50ms", "--grace", "300ms", "--wait", "50ms", "--progress", "plain", "--plot", plot}
	var out, errb bytes.Buffer
	if code := cli.Main(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	if !strings.Contains(out.String(), "### lateness") || !strings.Contains(out.String(), "### drain") || !strings.Contains(out.String(), "fake vs fake2") {
		t.Fatalf("tables:\n%s", out.String())
	}
	b, err := os.ReadFile(plot)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := dec.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("plot is not well-formed XML: %v", err)
			}
			break
		}
	}
	if n := strings.Count(string(b), "<polyline"); n != 2 {
		t.Fatalf("plot has %d curves, want 2", n)
	}

	out.Reset()
	args = []string{"send", "--target", "fake", "--n", "50", "--json", "--progress", "off", "--runs", "2"}
	if code := cli.Main(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("json exit %d: %s", code, errb.String())
	}
	var rep Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("JSON: %v\n%s", err, out.String())
	}
	if len(rep.Scenarios) != 1 || rep.Runs != 2 || len(rep.Scenarios[0].Results[0].Runs) != 2 || rep.Scenarios[0].Results[0].Summary["msgs_per_s"].Median <= 0 {
		t.Fatalf("JSON report: %+v", rep)
	}
	if !strings.HasPrefix(rep.Command, "bench-test send") {
		t.Fatalf("command %q", rep.Command)
	}
}

func TestCLIUsageErrors(t *testing.T) {
	cli := CLI{Name: "bench-test", Resolve: func(string) (Factory, bool, error) { return Factory{}, false, nil }, DefaultTarget: "x"}
	for _, args := range [][]string{
		{},
		{"nosuch"},
		{"send", "--batch", "0"},
		{"send", "--batch", "5000"},
		{"send"}, // unknown target x
		{"send", "--runs", "0"},
		{"send", "extra", "--n", "1"},
	} {
		var out, errb bytes.Buffer
		if code := cli.Main(context.Background(), args, &out, &errb); code != 2 {
			t.Errorf("%q: exit %d, want 2 (%s)", args, code, errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := cli.Main(context.Background(), []string{"-h"}, &out, &errb); code != 0 || !strings.Contains(errb.String(), "lateness") {
		t.Errorf("-h: exit %d, %s", code, errb.String())
	}
}

func TestProgressPlainAndNil(t *testing.T) {
	var nilP *Progress
	nilP.Start("x")
	nilP.Phase("y", 1)
	nilP.Add(1)
	nilP.Logf("z")
	nilP.Close()

	var buf syncBuf
	NewProgress(&buf, ProgressPlain).Close()
	p := &Progress{w: &buf, every: 5 * time.Millisecond, stop: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	p.Start("send · fake · run 1/1")
	p.Phase("send", 100)
	p.Add(50)
	time.Sleep(30 * time.Millisecond)
	p.Close()
	if s := buf.String(); !strings.Contains(s, " 50% send · fake · run 1/1 · send 50/100") || strings.Contains(s, "\r") {
		t.Fatalf("plain progress: %q", s)
	}
}

func TestWriteTableSkipsMetricsNoTargetHas(t *testing.T) {
	rep := &Report{Scenarios: []ScenarioReport{{Scenario: ScenarioSend, Metrics: MetricsOf(ScenarioSend), Results: []TargetResult{
		{Target: "a", Summary: map[string]Stat{"msgs_per_s": {Median: 1, Runs: 1}}},
		{Target: "b", Summary: map[string]Stat{"msgs_per_s": {Median: 1, Runs: 1}, "call_p50_ms": {Median: 2, Runs: 1}}},
	}}}}
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !strings.Contains(buf.String(), "| send call p50 (ms)       | n/a | 2.000 | —") || strings.Contains(buf.String(), "send call p99") {
		t.Fatalf("table:\n%s", buf.String())
	}
}
