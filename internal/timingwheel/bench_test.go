package timingwheel

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"
)

var benchSizes = []int{1_000, 100_000, 1_000_000}

func randDues(n int, span int64, seed uint64) []int64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	d := make([]int64, n)
	for i := range d {
		d[i] = t0 + rng.Int64N(span)
	}
	return d
}

// BenchmarkAdd: one Add into a wheel holding ~pending entries with
// random delays in [0,10s). The batch added is removed off the clock.
func BenchmarkAdd(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			w, _ := filled(n, 1)
			dues := randDues(1<<16, 10_000, 2)
			hs := make([]Handle, 0, 1<<12)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				hs = append(hs, w.Add(uint64(i), dues[i&(1<<16-1)]))
				i++
				if len(hs) == cap(hs) {
					b.StopTimer()
					for _, h := range hs {
						w.Remove(h)
					}
					hs = hs[:0]
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkRemove: one Remove of a random pending entry; the removed
// batch is re-added off the clock.
func BenchmarkRemove(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			w, hs := filled(n, 3)
			rng := rand.New(rand.NewPCG(4, 4))
			rng.Shuffle(len(hs), func(i, j int) { hs[i], hs[j] = hs[j], hs[i] })
			dues := randDues(len(hs), 10_000, 5)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				w.Remove(hs[i])
				i++
				if i == len(hs) || i%(1<<12) == 0 {
					b.StopTimer()
					for j := i - 1; j >= 0 && j >= i-(1<<12); j-- {
						hs[j] = w.Add(uint64(j), dues[j])
					}
					if i == len(hs) {
						i = 0
					}
					b.StartTimer()
				}
			}
		})
	}
}

// BenchmarkAddRemove: the steady-state pair, constant population.
func BenchmarkAddRemove(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			w, hs := filled(n, 6)
			dues := randDues(1<<16, 10_000, 7)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				j := i % len(hs)
				w.Remove(hs[j])
				hs[j] = w.Add(uint64(j), dues[i&(1<<16-1)])
				i++
			}
		})
	}
}

// BenchmarkAdvance: firing cost per entry (cascades included): each
// iteration fills a wheel with pending entries spread over 10s (off the
// clock) and steps it 1ms at a time until empty, calling Advance again at
// the same time while CascadePending, as the Runner does. ns/fired is the
// cost; max-ms/advance is the longest single Advance call (what the
// Runner holds its lock for) in thread CPU time on Linux, so that the OS
// running other work in the middle of a call does not count.
// cascade=oneshot turns cascading ahead off (CascadeBatch < 0).
// window=cross65s starts 5s before a level-2 (65.5s) boundary, so half
// the entries sit in one level-2 bucket.
func BenchmarkAdvance(b *testing.B) {
	const toLevel2 = 1<<16 - t0%(1<<16) // from t0 to the next 65.5s boundary
	for _, mode := range []struct {
		name  string
		batch int
	}{{"ahead", 0}, {"oneshot", -1}} {
		for _, win := range []struct {
			name string
			off  int64
		}{{"10s", 0}, {"cross65s", toLevel2 - 5000}} {
			for _, n := range benchSizes {
				b.Run(fmt.Sprintf("cascade=%s/window=%s/pending=%d", mode.name, win.name, n), func(b *testing.B) {
					benchAdvance(b, n, win.off, mode.batch)
				})
			}
		}
	}
}

func benchAdvance(b *testing.B, n int, off int64, batch int) {
	dues := randDues(n, 10_000, 8)
	start := t0 + off
	for i := range dues {
		dues[i] += off
	}
	fired := 0
	count := func(uint64, int64) { fired++ }
	var worst time.Duration
	defer lockThread()()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		w := New(Config{Start: start, CascadeBatch: batch})
		for i, d := range dues {
			w.Add(uint64(i), d)
		}
		b.StartTimer()
		for now := start; w.Len() > 0; {
			s := threadCPU()
			w.Advance(now, count)
			worst = max(worst, threadCPU()-s)
			if !w.CascadePending() {
				now++
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/fired")
	b.ReportMetric(float64(worst.Microseconds())/1000, "max-ms/advance")
}

// BenchmarkRunnerAdd: Add+Remove through the runner's mutex.
func BenchmarkRunnerAddRemove(b *testing.B) {
	r := NewRunner(RunnerConfig{}, noop)
	base := r.clock.Now().UnixMilli()
	hs := make([]Handle, 100_000)
	for i := range hs {
		hs[i] = r.Add(uint64(i), base+hourMs+int64(i))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		j := i % len(hs)
		r.Remove(hs[j])
		hs[j] = r.Add(uint64(j), base+hourMs+int64(i&0xffff))
		i++
	}
}
