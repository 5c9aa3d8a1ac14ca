package timingwheel

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// A Precise runner, in real time (its timerfd cannot run in a synctest
// bubble): 300 entries due over 300 ms in random-ish order, some added
// while the runner sleeps towards a later one (the wake-up path), each
// fired exactly once, none before its due millisecond; and Stop returns
// with an entry still pending. Never a lateness assertion: the machine
// may be loaded.
func TestPreciseRunnerFiresEachOnceNeverEarly(t *testing.T) {
	if runtime.GOOS == "linux" {
		pt := newPreciseTimer()
		if pt == nil {
			t.Fatal("no timerfd on this Linux")
		}
		pt.close()
	}
	var mu sync.Mutex
	fired := map[uint64]int{}
	var early []firing
	r := NewRunner(RunnerConfig{Precise: true}, func(id uint64, due int64) {
		now := nowMs()
		mu.Lock()
		defer mu.Unlock()
		fired[id]++
		if now < due {
			early = append(early, firing{id, due, now})
		}
	})
	r.Start()
	stopped := false
	defer func() {
		if !stopped {
			r.Stop()
		}
	}()
	const n = 300
	base := nowMs()
	r.Add(n, base+10*hourMs) // the runner sleeps towards it first
	for i := range uint64(n) {
		r.Add(i, base+50+int64(i*37%n)) // later entries keep arriving before earlier ones
		if i%50 == 0 {
			time.Sleep(time.Millisecond)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.Len() > 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(early) > 0 {
		t.Fatalf("%d fired early, e.g. %+v", len(early), early[0])
	}
	for i := range uint64(n) {
		if fired[i] != 1 {
			t.Fatalf("entry %d fired %d times; want once (%d of %d entries fired)", i, fired[i], len(fired), n)
		}
	}
	if fired[n] != 0 || r.Len() != 1 {
		t.Fatalf("the 10 h entry fired %d times, %d entries left", fired[n], r.Len())
	}
	r.Stop()
	stopped = true
	// Releases a millisecond apart: after the first few wake-ups the
	// timers are armed early and the runner spins to the due times, so
	// "none early" above covered the spin too.
	if runtime.GOOS == "linux" && r.spins == 0 {
		t.Fatal("the runner never spun to a due time: its timers were never armed early")
	}
}

// leadEstimate settles near the 80th percentile of the lateness it sees,
// stays within [0, maxLead], and one stall moves it by one step.
func TestLeadEstimate(t *testing.T) {
	var l leadEstimate
	// Lateness spread evenly over 0–100 µs, in a scrambled order.
	for i := range 5000 {
		l.observe(time.Duration(i*7919%100) * time.Microsecond)
	}
	if got := l.get(); got < 70*time.Microsecond || got > 90*time.Microsecond {
		t.Fatalf("lead %v after lateness spread over 0–100 µs; want about the 80th percentile, 80 µs", got)
	}
	before := l.get()
	l.observe(50 * time.Millisecond) // a stall
	if got := l.get(); got != before+4*leadStep {
		t.Fatalf("a 50 ms stall moved the lead from %v to %v; want one step up", before, got)
	}
	for range 1000 {
		l.observe(time.Second)
	}
	if got := l.get(); got != maxLead {
		t.Fatalf("lead %v after wake-ups a second late; want the cap %v", got, maxLead)
	}
	for range 1000 {
		l.observe(-time.Millisecond) // woken early: never a negative lead
	}
	if got := l.get(); got != 0 {
		t.Fatalf("lead %v after early wake-ups; want 0", got)
	}
}

// A spin ends at its time, at once when the runner is woken (an earlier
// entry) and, reporting it, when the runner is stopped.
func TestRunnerSpinEnds(t *testing.T) {
	r := NewRunner(RunnerConfig{}, func(uint64, int64) {})
	start := time.Now()
	if !r.spin(2 * time.Millisecond) {
		t.Fatal("a plain spin reported a stop")
	}
	if took := time.Since(start); took < 2*time.Millisecond {
		t.Fatalf("a 2 ms spin ended after %v", took)
	}
	r.wake <- struct{}{}
	start = time.Now()
	if !r.spin(time.Minute) {
		t.Fatal("a woken spin reported a stop")
	}
	r.Stop() // never started: marks it stopped without closing stop
	close(r.stop)
	if r.spin(time.Minute) {
		t.Fatal("a stopped runner's spin did not report it")
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("woken and stopped spins took %v; want them to end at once", took)
	}
}
