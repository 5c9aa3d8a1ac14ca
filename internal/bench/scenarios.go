package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Metric describes one figure a scenario reports.
type Metric struct {
	Key   string `json:"key"`
	Label string `json:"label"`
	Unit  string `json:"unit,omitempty"`
	// Higher is true when a higher value is better (throughput).
	Higher bool `json:"higher_is_better"`
	// Count metrics (early, duplicates, missing) are summed over runs and
	// get no ratio: any non-zero value is a finding by itself.
	Count bool `json:"count,omitempty"`
	// Optional metrics are measured only on some targets (server CPU needs
	// a server process the benchmark started).
	Optional bool `json:"optional,omitempty"`
	// Context metrics describe the machine during the run, not the
	// target (the hiccup meter): no ratio between targets.
	Context bool `json:"context,omitempty"`
}

// cpuMetric is the CPU time the server processes spent per message of the
// run (everything the scenario made them do: send, release, lease, ack),
// for targets that implement CPUReporter.
var cpuMetric = Metric{Key: "cpu_us_per_msg", Label: "server CPU per message", Unit: "µs", Optional: true}

var latenessMetrics = []Metric{
	{Key: "p50_ms", Label: "lateness p50", Unit: "ms"},
	{Key: "p90_ms", Label: "lateness p90", Unit: "ms"},
	{Key: "p99_ms", Label: "lateness p99", Unit: "ms"},
	{Key: "p999_ms", Label: "lateness p99.9", Unit: "ms"},
	{Key: "max_ms", Label: "lateness max", Unit: "ms"},
	{Key: "early", Label: "early", Count: true},
	{Key: "duplicates", Label: "duplicates", Count: true},
	{Key: "missing", Label: "missing", Count: true},
}

// MetricsOf lists the metrics of a scenario, in table order.
func MetricsOf(scenario string) []Metric {
	switch scenario {
	case ScenarioSend:
		return []Metric{
			{Key: "msgs_per_s", Label: "send throughput", Unit: "msgs/s", Higher: true},
			{Key: "call_p50_ms", Label: "send call p50", Unit: "ms"},
			{Key: "call_p99_ms", Label: "send call p99", Unit: "ms"},
		}
	case ScenarioDrain:
		return []Metric{
			{Key: "msgs_per_s", Label: "drain throughput", Unit: "msgs/s", Higher: true},
			{Key: "fill_msgs_per_s", Label: "fill throughput (untimed phase)", Unit: "msgs/s", Higher: true},
			{Key: "duplicates", Label: "duplicates", Count: true},
			{Key: "missing", Label: "missing", Count: true},
			cpuMetric,
		}
	case ScenarioLateness:
		return slices.Concat(latenessMetrics,
			[]Metric{{Key: "sent_late", Label: "accepted after due (fill too slow)", Count: true}}, hiccupMetrics, []Metric{cpuMetric})
	case ScenarioMixed:
		return slices.Concat([]Metric{
			{Key: "send_msgs_per_s", Label: "send throughput achieved", Unit: "msgs/s", Higher: true},
			{Key: "checked", Label: "messages due in window", Count: true},
		}, latenessMetrics, hiccupMetrics, []Metric{cpuMetric})
	case ScenarioPaced, ScenarioBurst:
		return slices.Concat([]Metric{
			{Key: "send_msgs_per_s", Label: "send throughput achieved", Unit: "msgs/s", Higher: true},
			{Key: "send_call_p99_ms", Label: "send call p99", Unit: "ms"},
			{Key: "checked", Label: "messages checked", Count: true},
		}, latenessMetrics, hiccupMetrics, []Metric{cpuMetric})
	case ScenarioForward:
		return forwardMetrics
	case ScenarioPending:
		return []Metric{
			{Key: "fill_msgs_per_s", Label: "fill throughput", Unit: "msgs/s", Higher: true},
			{Key: "rss_mb", Label: "RSS after fill", Unit: "MiB"},
			{Key: "restart_ms", Label: "restart → first due message", Unit: "ms"},
			{Key: "early", Label: "early", Count: true},
		}
	}
	return nil
}

// RunResult is what one run of a scenario measured.
type RunResult struct {
	Values   map[string]float64
	Lateness *Histogram // lateness in µs, for scenarios that measure it
	Notes    []string
	// Msgs is how many messages the run sent and consumed, the divisor of
	// the server CPU per message (0: not measured).
	Msgs int64
}

func (r *RunResult) set(k string, v float64) {
	if r.Values == nil {
		r.Values = map[string]float64{}
	}
	r.Values[k] = v
}

func (r *RunResult) setLateness(l LatenessResult) {
	h := l.Lateness
	ms := func(us int64) float64 { return float64(us) / 1000 }
	r.set("p50_ms", ms(h.Quantile(0.50)))
	r.set("p90_ms", ms(h.Quantile(0.90)))
	r.set("p99_ms", ms(h.Quantile(0.99)))
	r.set("p999_ms", ms(h.Quantile(0.999)))
	r.set("max_ms", ms(h.Max()))
	r.set("early", float64(l.Early))
	r.set("duplicates", float64(l.Duplicates+l.Unexpected))
	r.set("missing", float64(l.Missing))
	r.Lateness = h
	if l.Early > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d delivered early, by up to %s", l.Early, l.MostEarly))
	}
	if l.Unexpected > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d deliveries of messages never sent", l.Unexpected))
	}
}

// runScenario runs one scenario once on an open target.
func runScenario(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	switch c.Scenario {
	case ScenarioSend:
		return runSend(ctx, c, t, p)
	case ScenarioDrain:
		return runDrain(ctx, c, t, p)
	case ScenarioLateness:
		return withHiccups(ctx, c, t, p, runLateness)
	case ScenarioMixed:
		return withHiccups(ctx, c, t, p, runMixed)
	case ScenarioPaced:
		return withHiccups(ctx, c, t, p, runPaced)
	case ScenarioBurst:
		return withHiccups(ctx, c, t, p, runBurst)
	case ScenarioPending:
		return runPending(ctx, c, t, p)
	case ScenarioForward:
		return runForward(ctx, c, t, p)
	}
	return RunResult{}, fmt.Errorf("unknown scenario %q", c.Scenario)
}

// withHiccups runs a lateness scenario with the hiccup meter running
// beside it.
func withHiccups(ctx context.Context, c Config, t Target, p *Progress,
	run func(context.Context, Config, Target, *Progress) (RunResult, error)) (RunResult, error) {
	m := startHiccupMeter()
	r, err := run(ctx, c, t, p)
	h := m.Stop()
	if err == nil {
		r.setHiccups(h)
	}
	return r, err
}

// sendPlan sends seqs [0, n) in batches with conc workers. at(i) gives
// the earliest time batch i may start (nil: at once); due(seq, now) the
// requested due time. After each send, onSent sees the messages with
// their effective due times and the time the send returned. It records
// every call's latency (µs) in the returned histogram.
type sendPlan struct {
	n, batch, conc int
	payload        *payloadMaker
	at             func(batch int) time.Time
	until          time.Time // non-zero: batches due to start after it are not sent
	due            func(seq uint64, now time.Time) time.Time
	onSent         func(msgs []Msg, done time.Time)
	progress       *Progress
}

func (sp sendPlan) run(ctx context.Context, t Target) (*Histogram, error) {
	nb := (sp.n + sp.batch - 1) / sp.batch
	var next atomic.Int64
	var wg sync.WaitGroup
	hists := make([]Histogram, sp.conc)
	errs := make([]error, sp.conc)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for w := range sp.conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(next.Add(1) - 1)
				if b >= nb || ctx.Err() != nil {
					return
				}
				if sp.at != nil {
					at := sp.at(b)
					if !sp.until.IsZero() && at.After(sp.until) {
						return
					}
					if d := time.Until(at); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							return
						}
					}
				}
				lo, hi := b*sp.batch, min((b+1)*sp.batch, sp.n)
				msgs := make([]Msg, 0, hi-lo)
				now := time.Now()
				for s := lo; s < hi; s++ {
					seq := uint64(s) // #nosec G115 -- benchmark sequence number: a loop index ≥ 0
					m := Msg{Seq: seq, Payload: sp.payload.make(seq)}
					if sp.due != nil {
						m.DeliverAt = sp.due(seq, now)
					}
					msgs = append(msgs, m)
				}
				t0 := time.Now()
				if err := t.Send(ctx, msgs); err != nil {
					if ctx.Err() == nil {
						errs[w] = fmt.Errorf("send batch %d: %w", b, err)
						cancel()
					}
					return
				}
				done := time.Now()
				hists[w].Record(done.Sub(t0).Microseconds())
				if sp.onSent != nil {
					sp.onSent(msgs, done)
				}
				sp.progress.Add(int64(len(msgs)))
			}
		}()
	}
	wg.Wait()
	all := &Histogram{}
	for i := range hists {
		all.Merge(&hists[i])
	}
	if err := errors.Join(errs...); err != nil {
		return all, err
	}
	return all, ctx.Err()
}

func msTrunc(t time.Time) time.Time { return t.Truncate(time.Millisecond) }

func runSend(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	p.Phase("send", int64(c.N))
	start := time.Now()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed), progress: p,
		due: func(_ uint64, now time.Time) time.Time { return msTrunc(now.Add(c.Delay)) }}
	if c.Rate > 0 {
		per := float64(c.Batch) / c.Rate
		sp.at = func(b int) time.Time { return start.Add(time.Duration(float64(b) * per * float64(time.Second))) }
	}
	h, err := sp.run(ctx, t)
	if err != nil {
		return r, err
	}
	el := time.Since(start)
	r.set("msgs_per_s", float64(c.N)/el.Seconds())
	r.set("call_p50_ms", float64(h.Quantile(0.5))/1000)
	r.set("call_p99_ms", float64(h.Quantile(0.99))/1000)
	return r, nil
}

// consumeUntil runs t.Consume feeding ck until done() is true (checked
// every 5 ms) or nothing new arrives for stall after stallFrom; it
// returns when the consumers have stopped.
func consumeUntil(ctx context.Context, t Target, opts ConsumeOptions, ck *Checker, p *Progress, done func() bool, stallFrom time.Time, stall time.Duration) error {
	return consumeUntilFn(ctx, t, opts, ck, p, done, func() time.Time { return stallFrom }, stall)
}

// consumeUntilFn is consumeUntil with a stall start that may move while
// the consumers run (the last due time of what was sent so far).
func consumeUntilFn(ctx context.Context, t Target, opts ConsumeOptions, ck *Checker, p *Progress, done func() bool, stallFromFn func() time.Time, stall time.Duration) error {
	cctx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go func() {
		errc <- t.Consume(cctx, opts, func(ds []Delivery) {
			ck.Observe(ds)
			p.Add(int64(len(ds)))
		})
	}()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	last, lastChange := ck.Unique(), time.Now()
	var err error
loop:
	for {
		select {
		case <-ctx.Done():
			err = ctx.Err()
			break loop
		case err = <-errc:
			cancel()
			if err == nil {
				err = errors.New("consumers stopped early")
			}
			return err
		case now := <-tick.C:
			if done() {
				break loop
			}
			if u := ck.Unique(); u != last {
				last, lastChange = u, now
			}
			if stallFrom := stallFromFn(); now.After(stallFrom) && now.Sub(max64t(lastChange, stallFrom)) > stall {
				break loop // the rest counts as missing
			}
		}
	}
	cancel()
	if cerr := <-errc; err == nil && cerr != nil && !errors.Is(cerr, context.Canceled) {
		err = cerr
	}
	return err
}

func max64t(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func runDrain(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	ck := NewChecker(c.N)
	p.Phase("fill (untimed)", int64(c.N))
	fillStart := time.Now()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed), progress: p,
		onSent: func(msgs []Msg, done time.Time) {
			for _, m := range msgs {
				ck.SetDue(m.Seq, m.DeliverAt)
			}
		}}
	if _, err := sp.run(ctx, t); err != nil {
		return r, err
	}
	r.set("fill_msgs_per_s", float64(c.N)/time.Since(fillStart).Seconds())
	p.Phase("drain", int64(c.N))
	start := time.Now()
	err := consumeUntil(ctx, t, c.consumeOptions(), ck, p,
		func() bool { return ck.Unique() >= int64(c.N) }, start, c.Grace)
	if err != nil {
		return r, err
	}
	var last time.Time
	n := uint64(c.N) // #nosec G115 -- benchmark message count, ≥ 1
	for s := range n {
		if at, ok := ck.Received(s); ok {
			last = max64t(last, at)
		}
	}
	res := ck.Result(nil)
	if res.Received > 0 {
		r.set("msgs_per_s", float64(res.Received)/last.Sub(start).Seconds())
	}
	r.set("duplicates", float64(res.Duplicates+res.Unexpected))
	r.set("missing", float64(res.Missing))
	r.Msgs = int64(c.N)
	return r, nil
}

func runLateness(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	ck := NewChecker(c.N)
	ck.TraceLate(c.LateTrace)
	start := time.Now()
	t0 := msTrunc(start.Add(c.Lead))
	step := float64(c.Window) / float64(c.N)
	dueOf := func(seq uint64) time.Time { return msTrunc(t0.Add(time.Duration(float64(seq) * step))) }
	n := uint64(c.N) // #nosec G115 -- benchmark message count, ≥ 1
	for s := range n {
		ck.SetDue(s, dueOf(s))
	}
	last := dueOf(n - 1)

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumed := make(chan error, 1)
	go func() {
		consumed <- consumeUntil(cctx, t, c.consumeOptions(), ck, p,
			func() bool { return ck.Unique() >= int64(c.N) }, last, c.Grace)
	}()

	p.Phase("schedule + release", int64(c.N))
	var sentLate atomic.Int64
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed),
		due: func(seq uint64, _ time.Time) time.Time { return dueOf(seq) },
		onSent: func(msgs []Msg, done time.Time) {
			for _, m := range msgs {
				ck.SetDue(m.Seq, m.DeliverAt)
				if ck.Accepted(m.Seq, done) {
					sentLate.Add(1)
				}
			}
		}}
	if _, err := sp.run(cctx, t); err != nil {
		cancel()
		<-consumed
		return r, err
	}
	if err := <-consumed; err != nil {
		return r, err
	}
	r.setLateness(ck.Result(nil))
	r.set("sent_late", float64(sentLate.Load()))
	r.Msgs = int64(c.N)
	if n := sentLate.Load(); n > 0 {
		r.Notes = append(r.Notes, fmt.Sprintf("%d messages were accepted only after they were due (fill slower than the due rate; raise --lead): their lateness is measured from acceptance", n))
	}
	return r, nil
}

func runMixed(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	n := int(c.Rate*c.Duration.Seconds()) + c.Batch
	n = (n + c.Batch - 1) / c.Batch * c.Batch
	ck := NewChecker(n)
	ck.TraceLate(c.LateTrace)
	var sent atomic.Int64
	sentFlag := make([]atomic.Bool, n)
	start := time.Now()
	endSend := start.Add(c.Duration)
	rng := rand.New(rand.NewPCG(c.Seed, 0x6d69786564)) // #nosec G404 -- seeded benchmark workload, reproducible on purpose
	delays := make([]time.Duration, n)
	for i := range delays {
		delays[i] = time.Duration(rng.Int64N(int64(c.MaxDelay) + 1))
	}

	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consumed := make(chan error, 1)
	p.Phase("send + consume", int64(c.Duration/time.Millisecond))
	go func() {
		// Run for the whole duration plus grace, whatever arrives.
		consumed <- consumeUntil(cctx, t, c.consumeOptions(), ck, nil,
			func() bool { return time.Now().After(endSend.Add(c.Grace)) }, endSend.Add(c.Grace), time.Hour)
	}()
	per := float64(c.Batch) / c.Rate
	stopTick := make(chan struct{})
	go func() { // progress by elapsed time
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		var shown int64
		for {
			select {
			case <-stopTick:
				return
			case <-tk.C:
				frac := min(time.Since(start).Seconds()/(c.Duration+c.Grace).Seconds(), 1)
				v := int64(frac * float64(c.Duration/time.Millisecond))
				p.Add(v - shown)
				shown = v
			}
		}
	}()
	defer close(stopTick)
	sp := sendPlan{n: n, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed),
		at:    func(b int) time.Time { return start.Add(time.Duration(float64(b) * per * float64(time.Second))) },
		until: endSend,
		due:   func(seq uint64, now time.Time) time.Time { return msTrunc(now.Add(delays[seq])) },
		onSent: func(msgs []Msg, done time.Time) {
			for _, m := range msgs {
				ck.SetDue(m.Seq, m.DeliverAt)
				ck.Accepted(m.Seq, done)
				sentFlag[m.Seq].Store(true)
			}
			sent.Add(int64(len(msgs)))
		}}
	// Sends still in progress 5 s after the window are abandoned (a target
	// that cannot keep up; the note below says so).
	sendCtx, stopSend := context.WithDeadline(cctx, endSend.Add(5*time.Second))
	_, err := sp.run(sendCtx, t)
	stopSend()
	sendEl := min(time.Since(start), c.Duration)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		cancel()
		<-consumed
		return r, err
	}
	if err := <-consumed; err != nil {
		return r, err
	}
	cut := endSend.UnixNano()
	res := ck.Result(func(seq uint64) bool {
		return sentFlag[seq].Load() && ck.due[seq].Load() <= cut
	})
	r.set("send_msgs_per_s", float64(sent.Load())/sendEl.Seconds())
	r.set("checked", float64(res.Expected))
	r.setLateness(res)
	r.Msgs = sent.Load()
	if got, want := float64(sent.Load()), c.Rate*c.Duration.Seconds(); got < 0.95*want {
		r.Notes = append(r.Notes, fmt.Sprintf("sent %.0f of the %.0f messages the rate asked for: the target could not keep up", got, want))
	}
	return r, nil
}

func runPending(ctx context.Context, c Config, t Target, p *Progress) (RunResult, error) {
	var r RunResult
	ck := NewChecker(c.N + 1)
	p.Phase("fill far-future", int64(c.N))
	fillStart := time.Now()
	sp := sendPlan{n: c.N, batch: c.Batch, conc: c.Concurrency, payload: newPayloadMaker(c.Payload, c.Seed), progress: p,
		due: func(seq uint64, now time.Time) time.Time { return msTrunc(now.Add(pendingDelay(c, seq))) },
		onSent: func(msgs []Msg, _ time.Time) {
			for _, m := range msgs {
				ck.SetDue(m.Seq, m.DeliverAt)
			}
		}}
	if _, err := sp.run(ctx, t); err != nil {
		return r, err
	}
	r.set("fill_msgs_per_s", float64(c.N)/time.Since(fillStart).Seconds())
	// One message due now: the first one a restarted system must release.
	probe := uint64(c.N) // #nosec G115 -- benchmark message count, ≥ 1
	pm := []Msg{{Seq: probe, Payload: newPayloadMaker(c.Payload, c.Seed).make(probe)}}
	if err := t.Send(ctx, pm); err != nil {
		return r, fmt.Errorf("send the probe: %w", err)
	}
	ck.SetDue(probe, pm[0].DeliverAt)
	if mr, ok := t.(MemReporter); ok {
		rss, what, err := mr.RSS()
		if err != nil {
			return r, fmt.Errorf("read RSS: %w", err)
		}
		r.set("rss_mb", float64(rss)/(1<<20))
		r.Notes = append(r.Notes, "RSS: "+what)
	}
	rs, ok := t.(Restarter)
	if !ok {
		r.Notes = append(r.Notes, "target cannot restart: no restart time")
		return r, nil
	}
	p.Phase("restart", 1)
	began, err := rs.Restart(ctx)
	if err != nil {
		return r, fmt.Errorf("restart: %w", err)
	}
	err = consumeUntil(ctx, t, ConsumeOptions{Consumers: 1, Max: 1, Wait: c.Wait}, ck, p,
		func() bool { return ck.Unique() >= 1 }, began, c.Grace)
	if err != nil {
		return r, err
	}
	at, got := ck.Received(probe)
	if !got {
		return r, fmt.Errorf("the due message was not released within %s of the restart", c.Grace)
	}
	r.set("restart_ms", float64(at.Sub(began).Microseconds())/1000)
	res := ck.Result(func(seq uint64) bool { _, ok := ck.Received(seq); return ok })
	r.set("early", float64(res.Early))
	return r, nil
}

// pendingDelay is the delay of far-future message seq: c.Delay, or with
// c.MaxDelay set, uniform in [c.Delay, c.MaxDelay] — spread like real
// timers (30-day reminders beside 1-hour timeouts), which inserts all over
// the store's time-ordered index rather than at its end. Deterministic in
// (seed, seq).
func pendingDelay(c Config, seq uint64) time.Duration {
	if c.MaxDelay <= c.Delay {
		return c.Delay
	}
	z := seq*0x9e3779b97f4a7c15 + c.Seed // splitmix64
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	span := uint64(c.MaxDelay - c.Delay)       // #nosec G115 -- MaxDelay > Delay ≥ 0 here
	return c.Delay + time.Duration(z%(span+1)) // #nosec G115 -- z%(span+1) ≤ span, which came from a Duration
}
