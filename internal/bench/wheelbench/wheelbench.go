// Package wheelbench measures internal/timingwheel side by side with
// time.AfterFunc and a container/heap timer queue, on the same random
// workload in one process, and prints a table with ratios.
package wheelbench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/delayq/delayq/internal/timingwheel"
)

// Config selects the workloads. The zero value runs the full set.
type Config struct {
	// Sizes are the pending counts for delays uniform in [0, MaxDelay].
	Sizes []int
	// MaxDelay defaults to 10s.
	MaxDelay time.Duration
	// LongSize is the pending count for delays in [0, LongDelay]
	// (insert, remove and memory only). Default 1M; negative skips it.
	LongSize int
	// LongDelay defaults to 30 days.
	LongDelay time.Duration
	// Impls is a subset of "wheel", "afterfunc", "heap" (default all) and
	// "wheel-oneshot" (the wheel with cascading ahead off).
	Impls []string
	// NoFire skips the real-time fire phase (lateness, CPU).
	NoFire bool
	// Seed for the delays; default 1.
	Seed uint64
}

const (
	implWheel = "wheel"
	// implWheelOneShot is the wheel with cascading ahead off
	// (CascadeBatch < 0): every bucket cascades in one step at its
	// start, as before cascading ahead existed. Not in the default set.
	implWheelOneShot = "wheel-oneshot"
	// implWheelPrecise is the wheel whose runner sleeps on a timerfd
	// (RunnerConfig.Precise), as the server runs it. Not in the default set.
	implWheelPrecise = "wheel-precise"
	implAfterFunc    = "afterfunc"
	implHeap         = "heap"
)

func (c *Config) defaults() {
	if len(c.Sizes) == 0 {
		c.Sizes = []int{100_000, 1_000_000, 10_000_000}
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 10 * time.Second
	}
	if c.LongSize == 0 {
		c.LongSize = 1_000_000
	}
	if c.LongDelay <= 0 {
		c.LongDelay = 30 * 24 * time.Hour
	}
	if len(c.Impls) == 0 {
		c.Impls = []string{implWheel, implAfterFunc, implHeap}
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
}

// result is one table row.
type result struct {
	workload, impl string
	insertNs       float64
	removeNs       float64
	bytesPer       float64
	allocsPer      float64
	fired          bool // real-time phase ran
	cpu            time.Duration
	p50, p99, max  time.Duration
	early          int
	missing        int // not fired before the deadline
	insertWall     time.Duration
	totalWall      time.Duration
	schedP99       time.Duration // canary oversleep: the box's noise floor
	schedMax       time.Duration
}

// Run executes the configured workloads and writes the table to w.
func Run(ctx context.Context, w io.Writer, cfg Config) error {
	cfg.defaults()
	for _, im := range cfg.Impls {
		if im != implWheel && im != implWheelOneShot && im != implWheelPrecise && im != implAfterFunc && im != implHeap {
			return fmt.Errorf("wheelbench: unknown impl %q", im)
		}
	}
	fmt.Fprintf(w, "# wheelbench: GOMAXPROCS=%d, %s, seed %d\n", runtime.GOMAXPROCS(0), runtime.Version(), cfg.Seed)
	type wl struct {
		name  string
		n     int
		max   time.Duration
		real  bool
		label string
	}
	var wls []wl
	for _, n := range cfg.Sizes {
		wls = append(wls, wl{fmt.Sprintf("%s [0,%s]", count(n), short(cfg.MaxDelay)), n, cfg.MaxDelay, !cfg.NoFire, ""})
	}
	if cfg.LongSize > 0 {
		wls = append(wls, wl{fmt.Sprintf("%s [0,%s]", count(cfg.LongSize), short(cfg.LongDelay)), cfg.LongSize, cfg.LongDelay, false, ""})
	}
	var rows []result
	for _, x := range wls {
		delays := makeDelays(x.n, x.max, cfg.Seed)
		var group []result
		for _, im := range cfg.Impls {
			if err := ctx.Err(); err != nil {
				return err
			}
			fmt.Fprintf(w, "# %s %s: structure...\n", x.name, im)
			r := result{workload: x.name, impl: im}
			structure(&r, delays, x.max)
			if x.real {
				fmt.Fprintf(w, "# %s %s: firing in real time...\n", x.name, im)
				if err := fire(ctx, &r, delays, x.max); err != nil {
					return err
				}
				fmt.Fprintf(w, "#   inserted in %v, last release after %v\n", r.insertWall.Round(time.Millisecond), r.totalWall.Round(time.Millisecond))
			}
			group = append(group, r)
		}
		rows = append(rows, group...)
	}
	printTable(w, rows)
	return nil
}

// makeDelays returns n delays in whole ms, uniform in [0, max].
func makeDelays(n int, max time.Duration, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, uint64(n))) // #nosec G404 G115 -- seeded benchmark workload, reproducible on purpose; n ≥ 0 is a count
	d := make([]int64, n)
	maxMs := max.Milliseconds()
	for i := range d {
		d[i] = rng.Int64N(maxMs + 1)
	}
	return d
}

func gcQuiet() {
	runtime.GC()
	debug.FreeOSMemory()
}

func heapAlloc() (uint64, uint64) {
	var m runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc, m.Mallocs
}

// structure measures insert, memory and remove without firing anything.
func structure(r *result, delays []int64, max time.Duration) {
	n := len(delays)
	order := rand.New(rand.NewPCG(99, uint64(n))).Perm(n) // #nosec G404 -- seeded removal order, reproducible on purpose
	gcQuiet()
	switch r.impl {
	case implWheel, implWheelOneShot, implWheelPrecise:
		base := time.Now().UnixMilli()
		hs := make([]timingwheel.Handle, n)
		m0, a0 := heapAlloc()
		t0 := time.Now()
		tw := timingwheel.New(timingwheel.Config{Start: base})
		for i, d := range delays {
			hs[i] = tw.Add(uint64(i), base+d)
		}
		r.insertNs = perOp(time.Since(t0), n)
		m1, a1 := heapAlloc()
		r.bytesPer, r.allocsPer = float64(m1-m0)/float64(n), float64(a1-a0)/float64(n)
		t0 = time.Now()
		for _, i := range order {
			tw.Remove(hs[i])
		}
		r.removeNs = perOp(time.Since(t0), n)
		runtime.KeepAlive(tw)
	case implAfterFunc:
		// Pushed an hour out so nothing fires while measuring; the
		// runtime's timer heap cost does not depend on the offset.
		off := time.Duration(0)
		if max < time.Hour {
			off = time.Hour
		}
		ts := make([]*time.Timer, n)
		f := func() {}
		m0, a0 := heapAlloc()
		t0 := time.Now()
		for i, d := range delays {
			ts[i] = time.AfterFunc(off+time.Duration(d)*time.Millisecond, f)
		}
		r.insertNs = perOp(time.Since(t0), n)
		m1, a1 := heapAlloc()
		r.bytesPer, r.allocsPer = float64(m1-m0)/float64(n), float64(a1-a0)/float64(n)
		t0 = time.Now()
		for _, i := range order {
			ts[i].Stop()
		}
		r.removeNs = perOp(time.Since(t0), n)
	case implHeap:
		base := time.Now().UnixMilli()
		its := make([]*hitem, n)
		var q heapQueue
		m0, a0 := heapAlloc()
		t0 := time.Now()
		for i, d := range delays {
			its[i] = q.add(uint64(i), base+d)
		}
		r.insertNs = perOp(time.Since(t0), n)
		m1, a1 := heapAlloc()
		r.bytesPer, r.allocsPer = float64(m1-m0)/float64(n), float64(a1-a0)/float64(n)
		t0 = time.Now()
		for _, i := range order {
			q.remove(its[i])
		}
		r.removeNs = perOp(time.Since(t0), n)
	}
}

// recorder collects lateness in microseconds from any goroutine.
type recorder struct {
	lat  []int32
	next atomic.Int64
	done chan struct{}
}

func newRecorder(n int) *recorder {
	return &recorder{lat: make([]int32, n), done: make(chan struct{})}
}

func (rc *recorder) record(due int64) {
	us := time.Since(time.UnixMilli(due)).Microseconds()
	us = min(max(us, -1<<31), 1<<31-1)
	i := rc.next.Add(1) - 1
	if int(i) < len(rc.lat) {
		rc.lat[i] = int32(us)
	}
	if int(i) == len(rc.lat)-1 {
		close(rc.done)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// fire inserts every timer with due = now + delay through the real,
// clock-driven implementation and records when each one is released.
func fire(ctx context.Context, r *result, delays []int64, max time.Duration) error {
	n := len(delays)
	rc := newRecorder(n)
	gcQuiet()
	cn := startCanary()
	defer func() { r.schedP99, r.schedMax = cn.stop() }()
	cpu0 := cpuTime()
	start := time.Now()
	defer func() { r.totalWall = time.Since(start) }()
	var stop func()
	switch r.impl {
	case implWheel, implWheelOneShot, implWheelPrecise:
		var cfg timingwheel.RunnerConfig
		if r.impl == implWheelOneShot {
			cfg.CascadeBatch = -1
		}
		cfg.Precise = r.impl == implWheelPrecise
		run := timingwheel.NewRunner(cfg, func(_ uint64, due int64) { rc.record(due) })
		run.Start()
		stop = run.Stop
		insertAll(delays, func(i int, due int64) { run.Add(uint64(i), due) }) // #nosec G115 -- i is a slice index ≥ 0
	case implAfterFunc:
		insertAll(delays, func(i int, due int64) {
			time.AfterFunc(time.Until(time.UnixMilli(due)), func() { rc.record(due) })
		})
		stop = func() {}
	case implHeap:
		hr := newHeapRunner(func(_ uint64, due int64) { rc.record(due) })
		stop = hr.close
		insertAll(delays, func(i int, due int64) { hr.add(uint64(i), due) }) // #nosec G115 -- i is a slice index ≥ 0
	}
	r.insertWall = time.Since(start)
	deadline := time.NewTimer(max + time.Minute)
	defer deadline.Stop()
	select {
	case <-rc.done:
	case <-deadline.C:
	case <-ctx.Done():
		stop()
		return ctx.Err()
	}
	r.cpu = cpuTime() - cpu0
	stop()
	got := int(min(rc.next.Load(), int64(n)))
	r.fired, r.missing = true, n-got
	lat := rc.lat[:got]
	slices.Sort(lat)
	for _, l := range lat {
		if l < 0 {
			r.early++
		}
	}
	if got > 0 {
		r.p50 = us(lat[got/2])
		r.p99 = us(lat[min(got-1, got*99/100)])
		r.max = us(lat[got-1])
	}
	return nil
}

// canary measures how late this process gets to run: a goroutine that
// sleeps 1ms in a loop and records by how much each sleep overshoots.
// Its p99 is a floor for any timer's lateness in the same minutes; when
// it is large, the machine (not the timer structure) is the bottleneck.
type canary struct {
	quit chan struct{}
	done chan []int64
}

func startCanary() *canary {
	c := &canary{quit: make(chan struct{}), done: make(chan []int64, 1)}
	go func() {
		over := make([]int64, 0, 16384)
		t := time.NewTimer(time.Millisecond)
		defer t.Stop()
		for {
			t0 := time.Now()
			t.Reset(time.Millisecond)
			select {
			case <-c.quit:
				c.done <- over
				return
			case <-t.C:
				over = append(over, int64(time.Since(t0)-time.Millisecond))
			}
		}
	}()
	return c
}

// stop ends the canary and returns the p99 and max lateness of a
// perfect timer due every millisecond: a sleep that overshoots by o
// stands for timers late by o, o-1ms, o-2ms, ... (all those due while the
// process could not run), so one long stall weighs as much as it would in
// the timers' own p99 (no coordinated omission).
func (c *canary) stop() (p99, worst time.Duration) {
	close(c.quit)
	over := <-c.done
	var lat []int64
	for _, o := range over {
		for v := o; ; v -= int64(time.Millisecond) {
			lat = append(lat, max(v, 0))
			if v < int64(time.Millisecond) {
				break
			}
		}
	}
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	return time.Duration(lat[len(lat)*99/100]), time.Duration(lat[len(lat)-1])
}

// insertAll adds every timer as fast as possible, due = now + delay, with
// the clock read once per 256 inserts (dues are whole milliseconds).
func insertAll(delays []int64, add func(i int, due int64)) {
	var now int64
	for i, d := range delays {
		if i&255 == 0 {
			now = time.Now().UnixMilli()
		}
		add(i, now+d)
	}
}

func us(v int32) time.Duration { return time.Duration(v) * time.Microsecond }

func perOp(d time.Duration, n int) float64 { return float64(d.Nanoseconds()) / float64(n) }

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func short(d time.Duration) string {
	if d >= 24*time.Hour && d%(24*time.Hour) == 0 {
		return fmt.Sprintf("%dd", d/(24*time.Hour))
	}
	return d.String()
}

// printTable writes a Markdown table; ratios are relative to the wheel row
// of the same workload (x2.0 = twice the wheel's value).
func printTable(w io.Writer, rows []result) {
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| workload | impl | insert ns/op | remove ns/op | heap B/timer | allocs/timer | CPU insert+fire | lateness p50 | p99 | max | early | sched p99 / max |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	var ref *result
	for i := range rows {
		r := &rows[i]
		if r.impl == implWheel {
			ref = r
		}
		if ref != nil && ref.workload != r.workload {
			ref = nil
		}
		ratio := func(v, base float64, f string) string {
			s := fmt.Sprintf(f, v)
			if ref != nil && r != ref && base > 0 {
				s += fmt.Sprintf(" (x%.1f)", v/base)
			}
			return s
		}
		cols := []string{r.workload, r.impl,
			ratio(r.insertNs, refv(ref, func(x *result) float64 { return x.insertNs }), "%.1f"),
			ratio(r.removeNs, refv(ref, func(x *result) float64 { return x.removeNs }), "%.1f"),
			ratio(r.bytesPer, refv(ref, func(x *result) float64 { return x.bytesPer }), "%.1f"),
			fmt.Sprintf("%.4f", r.allocsPer),
		}
		if r.fired {
			lat := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
			cols = append(cols,
				ratio(r.cpu.Seconds(), refv(ref, func(x *result) float64 { return x.cpu.Seconds() }), "%.2fs"),
				lat(r.p50), ratio(float64(r.p99.Microseconds())/1000, refv(ref, func(x *result) float64 { return float64(x.p99.Microseconds()) / 1000 }), "%.3fms"),
				lat(r.max), fmt.Sprint(r.early))
			if r.missing > 0 {
				cols[len(cols)-1] += fmt.Sprintf(" (%d not fired)", r.missing)
			}
			cols = append(cols, lat(r.schedP99)+" / "+lat(r.schedMax))
		} else {
			cols = append(cols, "n/a", "n/a", "n/a", "n/a", "n/a", "n/a")
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cols, " | "))
	}
}

func refv(ref *result, f func(*result) float64) float64 {
	if ref == nil {
		return 0
	}
	return f(ref)
}
