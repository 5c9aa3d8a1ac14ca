package dashboard

import (
	"sort"
	"time"
)

// latenessBounds are the upper bounds of the release-lateness buckets,
// the same as internal/metrics.LatenessBuckets (0.1 ms to 60 s) so the
// dashboard and Prometheus agree; the last bucket is everything above.
var latenessBounds = []time.Duration{
	100 * time.Microsecond, 250 * time.Microsecond, 500 * time.Microsecond,
	time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond,
	10 * time.Millisecond, 25 * time.Millisecond, 50 * time.Millisecond,
	100 * time.Millisecond, 250 * time.Millisecond, 500 * time.Millisecond,
	time.Second, 2500 * time.Millisecond, 5 * time.Second,
	10 * time.Second, 30 * time.Second, time.Minute,
}

// numLatBuckets counts the bounded buckets plus the overflow one.
var numLatBuckets = len(latenessBounds) + 1

// latHist is a fixed-bucket lateness histogram: constant size whatever
// the number of observations. Not safe for concurrent use (its owner locks).
type latHist struct {
	counts []int64 // len numLatBuckets, allocated on first use
	n      int64
	sum    time.Duration
	max    time.Duration
}

func (h *latHist) observe(d time.Duration) {
	if h.counts == nil {
		h.counts = make([]int64, numLatBuckets)
	}
	i := sort.Search(len(latenessBounds), func(i int) bool { return d <= latenessBounds[i] })
	h.counts[i]++
	h.n++
	h.sum += d
	h.max = max(h.max, d)
}

func (h *latHist) merge(o *latHist) {
	if o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]int64, numLatBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile estimates the q-quantile (0 < q ≤ 1) by linear interpolation
// inside the bucket that holds it, capped by the exact maximum. The error
// is at most the bucket's width.
func (h *latHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := q * float64(h.n)
	var cum float64
	for i, c := range h.counts {
		if c == 0 {
			continue
		}
		if cum+float64(c) >= rank {
			lo := time.Duration(0)
			if i > 0 {
				lo = latenessBounds[i-1]
			}
			hi := h.max
			if i < len(latenessBounds) {
				hi = min(latenessBounds[i], h.max)
			}
			if hi < lo {
				return hi
			}
			frac := (rank - cum) / float64(c)
			return lo + time.Duration(frac*float64(hi-lo))
		}
		cum += float64(c)
	}
	return h.max
}

// mean is the average lateness.
func (h *latHist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return h.sum / time.Duration(h.n)
}
