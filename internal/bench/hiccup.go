package bench

import (
	"sync"
	"time"
)

// hiccupSleep is what the hiccup meter asks each sleep to last.
const hiccupSleep = time.Millisecond

// hiccupMeter measures the floor under a run's lateness (after Gil Tene's
// jHiccup): one goroutine of the benchmark process sleeps hiccupSleep at
// a time and records, in µs, how much later than asked each sleep ended.
// A release is at least a timer firing and a goroutine waking, so when
// the machine (its hypervisor, kernel, or this process's own load) holds
// a sleeping goroutine back for 10 ms, a message due then is late by as
// much whatever the queue does. The meter costs about 1,000 wake-ups a
// second: 45 ms of CPU a second on the AMD VM in a process doing nothing
// else, which an in-process target's CPU per message includes.
type hiccupMeter struct {
	hist Histogram
	stop chan struct{}
	done sync.WaitGroup
}

func startHiccupMeter() *hiccupMeter {
	m := &hiccupMeter{stop: make(chan struct{})}
	m.done.Add(1)
	go m.run()
	return m
}

func (m *hiccupMeter) run() {
	defer m.done.Done()
	t := time.NewTimer(hiccupSleep)
	defer t.Stop()
	for {
		asked := time.Now()
		t.Reset(hiccupSleep)
		select {
		case <-m.stop:
			return
		case <-t.C:
			// Read after the wake-up, not the channel's time: the wait for a
			// CPU once the timer fired is part of what a release waits for.
			m.hist.Record(max(0, time.Since(asked)-hiccupSleep).Microseconds())
		}
	}
}

// Stop ends the meter and returns the overshoots it recorded (µs).
func (m *hiccupMeter) Stop() *Histogram {
	close(m.stop)
	m.done.Wait()
	return &m.hist
}

// hiccupMetrics are reported by every scenario that measures lateness.
var hiccupMetrics = []Metric{
	{Key: "hiccup_p99_ms", Label: "machine: 1 ms sleep overrun p99", Unit: "ms", Context: true},
	{Key: "hiccup_max_ms", Label: "machine: 1 ms sleep overrun max", Unit: "ms", Context: true},
}

// setHiccups reports what the meter recorded.
func (r *RunResult) setHiccups(h *Histogram) {
	if h.Count() == 0 {
		return
	}
	r.set("hiccup_p99_ms", float64(h.Quantile(0.99))/1000)
	r.set("hiccup_max_ms", float64(h.Max())/1000)
}
