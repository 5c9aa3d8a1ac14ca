package timingwheel

// The bucket heap orders non-empty buckets by start tick. It holds at most
// levels*levelSlots items however many timers are pending, which is what
// lets a driver sleep until the next bucket instead of ticking.

type heapItem struct {
	start int64
	k     int32 // bucket index
}

// before orders by start; on a tie the higher bucket index (a higher
// level) first, so a cascade lands before anything fires at that tick.
func before(a, b heapItem) bool {
	return a.start < b.start || a.start == b.start && a.k > b.k
}

func (w *Wheel) heapPush(l *list, k int32) {
	w.queued[bucketLevel(k)]++
	l.hidx = int32(len(w.heap)) // #nosec G115 -- the heap holds at most one entry per bucket (a few thousand)
	w.heap = append(w.heap, heapItem{start: l.start, k: k})
	w.heapUp(int(l.hidx))
}

func (w *Wheel) heapRemove(l *list) {
	i := int(l.hidx)
	last := len(w.heap) - 1
	w.queued[bucketLevel(w.heap[i].k)]--
	l.hidx = -1
	if i != last {
		w.heap[i] = w.heap[last]
		w.list(w.heap[i].k).hidx = int32(i) // #nosec G115 -- heap index: at most one entry per bucket
	}
	w.heap = w.heap[:last]
	if i != last {
		w.heapDown(i)
		w.heapUp(i)
	}
}

func (w *Wheel) heapSwap(i, j int) {
	h := w.heap
	h[i], h[j] = h[j], h[i]
	w.list(h[i].k).hidx = int32(i) // #nosec G115 -- heap index: at most one entry per bucket
	w.list(h[j].k).hidx = int32(j) // #nosec G115 -- heap index: at most one entry per bucket
}

func (w *Wheel) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !before(w.heap[i], w.heap[p]) {
			return
		}
		w.heapSwap(i, p)
		i = p
	}
}

func (w *Wheel) heapDown(i int) {
	n := len(w.heap)
	for {
		c := 2*i + 1
		if c >= n {
			return
		}
		if r := c + 1; r < n && before(w.heap[r], w.heap[c]) {
			c = r
		}
		if !before(w.heap[c], w.heap[i]) {
			return
		}
		w.heapSwap(i, c)
		i = c
	}
}
