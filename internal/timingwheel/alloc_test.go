package timingwheel

import (
	"math/rand/v2"
	"runtime"
	"testing"
)

func noop(uint64, int64) {}

// filled returns a wheel with n entries due in [t0, t0+10s).
func filled(n int, seed uint64) (*Wheel, []Handle) {
	rng := rand.New(rand.NewPCG(seed, 1))
	w := New(Config{Start: t0})
	hs := make([]Handle, n)
	for i := range hs {
		hs[i] = w.Add(uint64(i), t0+rng.Int64N(10_000))
	}
	return w, hs
}

func TestAllocsAddRemove(t *testing.T) {
	w, hs := filled(100_000, 1)
	rng := rand.New(rand.NewPCG(2, 2))
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		j := i % len(hs)
		w.Remove(hs[j])
		hs[j] = w.Add(uint64(j), t0+rng.Int64N(10*dayMs))
		i++
	})
	if allocs != 0 {
		t.Fatalf("Add+Remove: %v allocs/op", allocs)
	}
	allocs = testing.AllocsPerRun(10_000, func() {
		j := i % len(hs)
		w.Reschedule(hs[j], t0+rng.Int64N(10_000))
		i++
	})
	if allocs != 0 {
		t.Fatalf("Reschedule: %v allocs/op", allocs)
	}
}

func TestAllocsAdvance(t *testing.T) {
	w, _ := filled(100_000, 3)
	rng := rand.New(rand.NewPCG(4, 4))
	now := t0
	step := func() {
		// Keep the population steady: add as many as fire, some in the
		// past so the sorting path runs too.
		for range 10 {
			w.Add(1, now+rng.Int64N(10_000))
		}
		w.Add(2, now-rng.Int64N(50))
		now++
		w.Advance(now, noop)
	}
	for range 20_000 { // warm up: slab, heap and scratch reach their size
		step()
	}
	if allocs := testing.AllocsPerRun(5_000, step); allocs != 0 {
		t.Fatalf("Advance: %v allocs/op", allocs)
	}
}

func TestAllocsRunner(t *testing.T) {
	r := NewRunner(RunnerConfig{}, noop)
	base := r.clock.Now().UnixMilli()
	hs := make([]Handle, 1000)
	for i := range hs {
		hs[i] = r.Add(uint64(i), base+hourMs+int64(i))
	}
	i := 0
	allocs := testing.AllocsPerRun(10_000, func() {
		j := i % len(hs)
		r.Remove(hs[j])
		hs[j] = r.Add(uint64(j), base+hourMs+int64(i))
		i++
	})
	if allocs != 0 {
		t.Fatalf("Runner Add+Remove: %v allocs/op", allocs)
	}
}

// TestMemoryPerTimer checks the 32-bytes-per-pending-timer budget.
func TestMemoryPerTimer(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~30 MB")
	}
	const n = 1_000_000
	dues := make([]int64, n)
	rng := rand.New(rand.NewPCG(5, 5))
	for i := range dues {
		dues[i] = t0 + rng.Int64N(10_000)
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	w := New(Config{Start: t0})
	for i, d := range dues {
		w.Add(uint64(i), d)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	per := float64(after.HeapAlloc-before.HeapAlloc) / n
	runtime.KeepAlive(w)
	runtime.KeepAlive(dues) // else freed by the second GC and subtracted
	t.Logf("%.2f bytes per pending timer", per)
	if per > 32 {
		t.Fatalf("%.2f bytes per pending timer, budget 32", per)
	}
}
