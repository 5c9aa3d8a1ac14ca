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
	defer r.Stop()
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
}
