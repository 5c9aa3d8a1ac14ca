package bench

import (
	"math"
	"math/bits"
	"sort"
)

// Histogram records non-negative int64 values (microseconds, by
// convention) in log-linear buckets in the style of HdrHistogram: values
// below 2^subBits are exact; above, each power of two is split into
// 2^(subBits-1) buckets, so a bucket's width is under 1/64 of its values
// (relative error < 1.6 %). Min, max, count and sum are exact. The zero
// value is ready to use; it is not safe for concurrent use.
type Histogram struct {
	counts []uint64
	count  uint64
	sum    float64
	min    int64
	max    int64
}

const (
	subBits  = 7
	subCount = 1 << subBits       // exact values below this
	subHalf  = 1 << (subBits - 1) // buckets per power of two above it
)

// bucketOf returns the bucket index of v ≥ 0.
func bucketOf(v int64) int {
	if v < subCount {
		return int(v)
	}
	e := bits.Len64(uint64(v)) - subBits // ≥ 1
	m := int(v >> e)                     // in [subHalf, subCount)
	return e*subHalf + m
}

// bucketBounds returns the lowest and highest value of bucket i.
func bucketBounds(i int) (lo, hi int64) {
	if i < subCount {
		return int64(i), int64(i)
	}
	e := i/subHalf - 1
	m := int64(i%subHalf + subHalf)
	return m << e, (m+1)<<e - 1
}

// Record adds one value; negative values are recorded as 0 (callers that
// care, like the lateness checker, count them separately).
func (h *Histogram) Record(v int64) {
	if v < 0 {
		v = 0
	}
	i := bucketOf(v)
	if i >= len(h.counts) {
		n := make([]uint64, i+1+subHalf)
		copy(n, h.counts)
		h.counts = n
	}
	h.counts[i]++
	if h.count == 0 || v < h.min {
		h.min = v
	}
	if v > h.max {
		h.max = v
	}
	h.count++
	h.sum += float64(v)
}

// Merge adds every value of o.
func (h *Histogram) Merge(o *Histogram) {
	if o == nil || o.count == 0 {
		return
	}
	if len(o.counts) > len(h.counts) {
		n := make([]uint64, len(o.counts))
		copy(n, h.counts)
		h.counts = n
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	if h.count == 0 || o.min < h.min {
		h.min = o.min
	}
	h.max = max(h.max, o.max)
	h.count += o.count
	h.sum += o.sum
}

// Count is the number of recorded values.
func (h *Histogram) Count() uint64 { return h.count }

// Min is the smallest recorded value (0 when empty).
func (h *Histogram) Min() int64 { return h.min }

// Max is the largest recorded value (0 when empty).
func (h *Histogram) Max() int64 { return h.max }

// Mean is the exact mean (0 when empty).
func (h *Histogram) Mean() float64 {
	if h.count == 0 {
		return 0
	}
	return h.sum / float64(h.count)
}

// Quantile returns the value at quantile q in [0,1]: the highest value of
// the bucket holding the ceil(q·count)-th smallest value, clamped to the
// exact min and max (so Quantile(1) is the exact max). 0 when empty.
func (h *Histogram) Quantile(q float64) int64 {
	if h.count == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.count)))
	rank = max(rank, 1)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			_, hi := bucketBounds(i)
			return min(max(hi, h.min), h.max)
		}
	}
	return h.max
}

// Bucket is one non-empty bucket: values in [Lo, Hi].
type Bucket struct {
	Lo    int64  `json:"lo"`
	Hi    int64  `json:"hi"`
	Count uint64 `json:"n"`
}

// Buckets lists the non-empty buckets in increasing order.
func (h *Histogram) Buckets() []Bucket {
	var out []Bucket
	for i, c := range h.counts {
		if c > 0 {
			lo, hi := bucketBounds(i)
			out = append(out, Bucket{Lo: lo, Hi: hi, Count: c})
		}
	}
	return out
}

// HistogramFromBuckets rebuilds a histogram from Buckets output (min and
// max become the bounds of the extreme buckets); used to read JSON back.
func HistogramFromBuckets(bs []Bucket) *Histogram {
	h := &Histogram{}
	sort.Slice(bs, func(i, j int) bool { return bs[i].Lo < bs[j].Lo })
	for _, b := range bs {
		i := bucketOf(b.Lo)
		if i >= len(h.counts) {
			n := make([]uint64, i+1)
			copy(n, h.counts)
			h.counts = n
		}
		h.counts[i] += b.Count
		if h.count == 0 {
			h.min = b.Lo
		}
		h.max = max(h.max, b.Hi)
		h.count += b.Count
		h.sum += float64(b.Count) * float64(b.Lo+b.Hi) / 2
	}
	return h
}
