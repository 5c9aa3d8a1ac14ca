package timingwheel

import (
	"fmt"
	"math/rand/v2"
	"testing"
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
// clock) and steps it 1ms at a time until empty. ns/fired is the figure.
func BenchmarkAdvance(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("pending=%d", n), func(b *testing.B) {
			dues := randDues(n, 10_000, 8)
			fired := 0
			count := func(uint64, int64) { fired++ }
			b.ReportAllocs()
			for b.Loop() {
				b.StopTimer()
				w := New(Config{Start: t0})
				for i, d := range dues {
					w.Add(uint64(i), d)
				}
				b.StartTimer()
				for now := t0; w.Len() > 0; now++ {
					w.Advance(now, count)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(fired), "ns/fired")
		})
	}
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
