package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Stat is min / median / max of a metric over runs (or the sum, for counts).
type Stat struct {
	Min    float64 `json:"min"`
	Median float64 `json:"median"`
	Max    float64 `json:"max"`
	Sum    float64 `json:"sum"`
	Runs   int     `json:"runs"`
}

// Summarise computes a Stat of values.
func Summarise(vs []float64) Stat {
	if len(vs) == 0 {
		return Stat{}
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	st := Stat{Min: s[0], Max: s[len(s)-1], Runs: len(s)}
	if n := len(s); n%2 == 1 {
		st.Median = s[n/2]
	} else {
		st.Median = (s[n/2-1] + s[n/2]) / 2
	}
	for _, v := range s {
		st.Sum += v
	}
	return st
}

// TargetResult is every run of one scenario on one target.
type TargetResult struct {
	Target  string               `json:"target"`
	Runs    []map[string]float64 `json:"runs"`
	Summary map[string]Stat      `json:"summary"`
	Notes   []string             `json:"notes,omitempty"`
	Error   string               `json:"error,omitempty"`
	// Lateness merges the lateness histograms (µs) of every run.
	Lateness *Histogram `json:"-"`
	// LatenessBuckets is Lateness for JSON.
	LatenessBuckets []Bucket `json:"lateness_us_buckets,omitempty"`
}

// ScenarioReport is one scenario over all targets.
type ScenarioReport struct {
	Scenario string         `json:"scenario"`
	Params   []Param        `json:"params"`
	Metrics  []Metric       `json:"metrics"`
	Results  []TargetResult `json:"results"`
}

// Report is a whole `bench` invocation.
type Report struct {
	Machine   Machine          `json:"machine"`
	Command   string           `json:"command"`
	Started   time.Time        `json:"started"`
	Runs      int              `json:"runs"`
	Scenarios []ScenarioReport `json:"scenarios"`
}

// Machine describes where the benchmark ran.
type Machine struct {
	CPUs       int    `json:"cpus"`
	CPUModel   string `json:"cpu_model"`
	GoVersion  string `json:"go_version"`
	GOMAXPROCS int    `json:"gomaxprocs"`
	Kernel     string `json:"kernel,omitempty"`
	MemTotal   string `json:"mem_total,omitempty"`
	// LoadStart and LoadEnd are /proc/loadavg's 1, 5 and 15 minute load
	// averages before and after the benchmark: other work on the machine
	// skews every figure, so the report says how busy it was.
	LoadStart string `json:"load_start,omitempty"`
	LoadEnd   string `json:"load_end,omitempty"`
}

// LoadAvg returns the 1, 5 and 15 minute load averages ("" if unknown).
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

// ThisMachine reads nproc, the CPU model and the kernel from /proc.
func ThisMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), GOMAXPROCS: runtime.GOMAXPROCS(0), LoadStart: LoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "MemTotal" {
				m.MemTotal = strings.TrimSpace(v)
				break
			}
		}
	}
	return m
}

// Run runs each scenario (cfgs) on each target, runs times, interleaving
// targets within a round so slow drift of the machine hits all alike.
// A target that fails a run keeps its error in its result and the others
// go on.
func Run(ctx context.Context, cfgs []Config, targets []Factory, runs int, p *Progress) []ScenarioReport {
	var out []ScenarioReport
	for _, c := range cfgs {
		sr := ScenarioReport{Scenario: c.Scenario, Params: c.Params(), Metrics: MetricsOf(c.Scenario)}
		sr.Results = make([]TargetResult, len(targets))
		for i, f := range targets {
			sr.Results[i] = TargetResult{Target: f.Name, Lateness: &Histogram{}}
		}
		for run := 1; run <= runs && ctx.Err() == nil; run++ {
			for i, f := range targets {
				tr := &sr.Results[i]
				if tr.Error != "" || ctx.Err() != nil {
					continue
				}
				p.Start(fmt.Sprintf("%s · %s · run %d/%d", c.Scenario, f.Name, run, runs))
				res, err := runOnce(ctx, c, f, run, p)
				if err != nil {
					tr.Error = fmt.Sprintf("run %d: %v", run, err)
					p.Logf("%s on %s: %s", c.Scenario, f.Name, tr.Error)
					continue
				}
				tr.Runs = append(tr.Runs, res.Values)
				tr.Lateness.Merge(res.Lateness)
				for _, n := range res.Notes {
					tr.Notes = append(tr.Notes, fmt.Sprintf("run %d: %s", run, n))
				}
			}
		}
		for i := range sr.Results {
			tr := &sr.Results[i]
			tr.Summary = map[string]Stat{}
			for _, m := range sr.Metrics {
				var vs []float64
				for _, r := range tr.Runs {
					if v, ok := r[m.Key]; ok {
						vs = append(vs, v)
					}
				}
				if len(vs) > 0 {
					tr.Summary[m.Key] = Summarise(vs)
				}
			}
			if tr.Lateness.Count() > 0 {
				tr.LatenessBuckets = tr.Lateness.Buckets()
			}
		}
		out = append(out, sr)
	}
	return out
}

func runOnce(ctx context.Context, c Config, f Factory, run int, p *Progress) (res RunResult, err error) {
	p.Phase("open", 0)
	t, err := f.Open(ctx, OpenOptions{Durable: c.Durable, Run: run})
	if err != nil {
		return res, fmt.Errorf("open: %w", err)
	}
	defer func() {
		if cerr := t.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close: %w", cerr)
		}
	}()
	cr, _ := t.(CPUReporter)
	var cpu0 time.Duration
	if cr != nil {
		if cpu0, _, err = cr.ServerCPU(); err != nil {
			return res, fmt.Errorf("server CPU: %w", err)
		}
	}
	res, err = runScenario(ctx, c, t, p)
	if err != nil || cr == nil || res.Msgs <= 0 {
		return res, err
	}
	cpu1, what, err := cr.ServerCPU()
	if err != nil {
		return res, fmt.Errorf("server CPU: %w", err)
	}
	res.set(cpuMetric.Key, float64((cpu1-cpu0).Microseconds())/float64(res.Msgs))
	if run == 1 {
		res.Notes = append(res.Notes, fmt.Sprintf("server CPU: %s (utime+stime from /proc around the run, divided by the %d messages sent and consumed)", what, res.Msgs))
	}
	return res, nil
}

// WriteJSON writes the report as indented JSON.
func (r *Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

// WriteTable writes the report as Markdown tables: per scenario, one row
// per metric, one column per target with "median (min – max)" over the
// runs (counts: the total over runs), and for every target after the
// first a column with how many times better the first one is.
func (r *Report) WriteTable(w io.Writer) {
	m := r.Machine
	fmt.Fprintf(w, "machine: %d CPUs (%s), %s, GOMAXPROCS=%d, kernel %s, memory %s\n", m.CPUs, m.CPUModel, m.GoVersion, m.GOMAXPROCS, m.Kernel, m.MemTotal)
	if m.LoadStart != "" || m.LoadEnd != "" {
		fmt.Fprintf(w, "load average (1/5/15 min): %s at start, %s at end\n", m.LoadStart, m.LoadEnd)
	}
	fmt.Fprintf(w, "runs: %d per target; cells: median (min – max) over the runs; counts: total over the runs\n", r.Runs)
	for _, s := range r.Scenarios {
		writeScenarioTable(w, s)
	}
}

func writeScenarioTable(w io.Writer, s ScenarioReport) {
	var ps []string
	for _, p := range s.Params {
		ps = append(ps, p.Name+"="+p.Value)
	}
	fmt.Fprintf(w, "\n### %s (%s)\n\n", s.Scenario, strings.Join(ps, " "))
	if len(s.Results) == 0 {
		return
	}
	first := s.Results[0]
	head := []string{"metric"}
	for _, tr := range s.Results {
		head = append(head, tr.Target)
	}
	for _, tr := range s.Results[1:] {
		head = append(head, first.Target+" vs "+tr.Target)
	}
	rows := [][]string{head}
	for _, m := range s.Metrics {
		row := []string{m.Label + unitSuffix(m.Unit)}
		any := false
		for _, tr := range s.Results {
			st, ok := tr.Summary[m.Key]
			any = any || ok
			row = append(row, cell(m, st, ok))
		}
		if !any {
			continue
		}
		for _, tr := range s.Results[1:] {
			row = append(row, ratio(m, first.Summary[m.Key], tr.Summary[m.Key]))
		}
		rows = append(rows, row)
	}
	writeMarkdown(w, rows)
	for _, tr := range s.Results {
		if tr.Error != "" {
			fmt.Fprintf(w, "\n- %s: FAILED: %s", tr.Target, tr.Error)
		}
		for _, n := range tr.Notes {
			fmt.Fprintf(w, "\n- %s: %s", tr.Target, n)
		}
	}
	fmt.Fprintln(w)
}

func unitSuffix(u string) string {
	if u == "" {
		return ""
	}
	return " (" + u + ")"
}

func cell(m Metric, st Stat, ok bool) string {
	switch {
	case !ok:
		return "n/a"
	case m.Count:
		return FormatValue(st.Sum, m.Unit)
	case st.Runs == 1 || st.Min == st.Max:
		return FormatValue(st.Median, m.Unit)
	}
	return fmt.Sprintf("%s (%s – %s)", FormatValue(st.Median, m.Unit), FormatValue(st.Min, m.Unit), FormatValue(st.Max, m.Unit))
}

// ratio says how many times better a (the first target) is than b, on
// medians: throughput a/b, latencies and memory b/a. "—" for counts,
// for context metrics, or when either is missing or zero.
func ratio(m Metric, a, b Stat) string {
	if m.Count || m.Context || a.Runs == 0 || b.Runs == 0 || a.Median <= 0 || b.Median <= 0 {
		return "—"
	}
	x := b.Median / a.Median
	if m.Higher {
		x = a.Median / b.Median
	}
	return FormatRatio(x)
}

// FormatRatio renders a ratio: "12.3× better", "1.00× (same)", "2.5× worse".
func FormatRatio(x float64) string {
	switch {
	case math.IsInf(x, 0) || math.IsNaN(x):
		return "—"
	case x >= 0.995 && x < 1.005:
		return "1.00× (same)"
	case x >= 1:
		return sig(x) + "× better"
	}
	return sig(1/x) + "× worse"
}

func sig(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	}
	return strconv.FormatFloat(x, 'f', 2, 64)
}

// FormatValue renders a metric value for a table: throughputs and counts
// as integers with thousands separators, milliseconds with µs resolution.
func FormatValue(v float64, unit string) string {
	switch unit {
	case "ms":
		switch {
		case v >= 1000:
			return groupDigits(int64(math.Round(v)))
		case v >= 100:
			return strconv.FormatFloat(v, 'f', 1, 64)
		}
		return strconv.FormatFloat(v, 'f', 3, 64)
	case "MiB", "µs":
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return groupDigits(int64(math.Round(v)))
}

func groupDigits(n int64) string {
	neg := n < 0
	if neg {
		n = -n
	}
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// writeMarkdown writes rows as a Markdown table with padded columns; the
// first row is the header; numeric-looking columns stay left-aligned for
// simplicity of diffing.
func writeMarkdown(w io.Writer, rows [][]string) {
	width := make([]int, len(rows[0]))
	for _, r := range rows {
		for i, c := range r {
			width[i] = max(width[i], len([]rune(c)))
		}
	}
	line := func(r []string) {
		var b strings.Builder
		b.WriteString("|")
		for i, c := range r {
			b.WriteString(" " + c + strings.Repeat(" ", width[i]-len([]rune(c))) + " |")
		}
		fmt.Fprintln(w, b.String())
	}
	line(rows[0])
	sep := make([]string, len(width))
	for i := range sep {
		sep[i] = strings.Repeat("-", width[i])
	}
	line(sep)
	for _, r := range rows[1:] {
		line(r)
	}
}
