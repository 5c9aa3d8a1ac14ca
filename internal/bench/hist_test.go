package bench

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestBucketsAreContiguous(t *testing.T) {
	prevHi := int64(-1)
	for i := 0; i < 64*40; i++ {
		lo, hi := bucketBounds(i)
		if lo != prevHi+1 {
			t.Fatalf("bucket %d starts at %d, previous ended at %d", i, lo, prevHi)
		}
		if hi < lo {
			t.Fatalf("bucket %d: hi %d < lo %d", i, hi, lo)
		}
		if bucketOf(lo) != i || bucketOf(hi) != i {
			t.Fatalf("bucket %d [%d,%d] maps back to %d/%d", i, lo, hi, bucketOf(lo), bucketOf(hi))
		}
		if lo >= subCount && float64(hi-lo+1)/float64(lo) > 1.0/subHalf+1e-12 {
			t.Fatalf("bucket %d [%d,%d] wider than 1/%d of its values", i, lo, hi, subHalf)
		}
		prevHi = hi
	}
	if got := bucketOf(math.MaxInt64); got <= 0 {
		t.Fatalf("bucketOf(MaxInt64) = %d", got)
	}
}

func TestQuantileExactForSmallValues(t *testing.T) {
	var h Histogram
	for v := int64(1); v <= 100; v++ {
		h.Record(v)
	}
	for _, c := range []struct {
		q    float64
		want int64
	}{{0, 1}, {0.01, 1}, {0.5, 50}, {0.9, 90}, {0.99, 99}, {0.999, 100}, {1, 100}} {
		if got := h.Quantile(c.q); got != c.want {
			t.Errorf("Quantile(%v) = %d, want %d", c.q, got, c.want)
		}
	}
	if h.Count() != 100 || h.Min() != 1 || h.Max() != 100 || h.Mean() != 50.5 {
		t.Errorf("count/min/max/mean = %d/%d/%d/%v", h.Count(), h.Min(), h.Max(), h.Mean())
	}
}

func TestQuantileWithinRelativeError(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var h Histogram
	vals := make([]int64, 100_000)
	for i := range vals {
		vals[i] = int64(math.Exp(rng.Float64() * 20)) // 1 µs .. ~8 min, log-uniform
		h.Record(vals[i])
	}
	slices.Sort(vals)
	for _, q := range []float64{0.5, 0.9, 0.99, 0.999, 0.9999} {
		exact := vals[int(math.Ceil(q*float64(len(vals))))-1]
		got := h.Quantile(q)
		if got < exact || float64(got-exact) > float64(exact)/subHalf+1 {
			t.Errorf("Quantile(%v) = %d, exact %d: outside [exact, exact·(1+1/%d)]", q, got, exact, subHalf)
		}
	}
	if h.Quantile(1) != vals[len(vals)-1] || h.Min() != vals[0] {
		t.Errorf("max/min not exact: %d/%d vs %d/%d", h.Quantile(1), h.Min(), vals[len(vals)-1], vals[0])
	}
}

func TestHistogramEmptyNegativeAndMerge(t *testing.T) {
	var h Histogram
	if h.Quantile(0.99) != 0 || h.Max() != 0 || h.Mean() != 0 || len(h.Buckets()) != 0 {
		t.Fatal("empty histogram should answer zeros")
	}
	h.Record(-5)
	if h.Min() != 0 || h.Count() != 1 {
		t.Fatalf("negative value: min %d count %d, want 0 and 1", h.Min(), h.Count())
	}
	var a, b Histogram
	for v := int64(0); v < 1000; v++ {
		a.Record(v)
		b.Record(v + 1_000_000)
	}
	a.Merge(&b)
	a.Merge(nil)
	a.Merge(&Histogram{})
	if a.Count() != 2000 || a.Min() != 0 || a.Max() != 1_000_999 {
		t.Fatalf("merged count/min/max = %d/%d/%d", a.Count(), a.Min(), a.Max())
	}
	if q := a.Quantile(0.5); q != 999 {
		t.Fatalf("merged median = %d, want 999", q)
	}
	if q := a.Quantile(0.75); q < 1_000_000 {
		t.Fatalf("merged p75 = %d, want ≥ 1e6", q)
	}
	back := HistogramFromBuckets(a.Buckets())
	// Max comes back as the top of its bucket, so compare unclamped quantiles.
	if back.Count() != a.Count() || back.Quantile(0.5) != a.Quantile(0.5) || back.Quantile(0.75) < a.Quantile(0.75) || back.Quantile(0.75) > a.Quantile(0.75)*65/64 || back.Max() < a.Max() {
		t.Fatalf("round trip through buckets changed the distribution")
	}
}
