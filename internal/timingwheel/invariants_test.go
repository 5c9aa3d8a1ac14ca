package timingwheel

import (
	"fmt"
	"math/bits"
)

// checkInvariants verifies the wheel's resting state; it returns an error
// describing the first violation.
func checkInvariants(w *Wheel) error {
	if w.advancing {
		return fmt.Errorf("advancing at rest")
	}
	for k := range w.pseudo {
		if !w.pseudo[k].empty() {
			return fmt.Errorf("pseudo list %d not empty at rest", k)
		}
	}
	count := 0
	for lv, arr := range w.levels {
		for s := range arr {
			k := bucketIndex(lv, int64(s/levelSlots), int64(s%levelSlots))
			l := &arr[s]
			if l.empty() {
				if l.tail != ^k || l.head != ^k {
					return fmt.Errorf("bucket %d: empty but tail %d head %d", k, l.tail, l.head)
				}
				if l.hidx != -1 {
					return fmt.Errorf("bucket %d: empty but queued at %d", k, l.hidx)
				}
				continue
			}
			if l.hidx < 0 || int(l.hidx) >= len(w.heap) || w.heap[l.hidx].k != k || w.heap[l.hidx].start != l.start {
				return fmt.Errorf("bucket %d: bad heap position %d", k, l.hidx)
			}
			if bucketOf(lv, l.start) != k || l.start&(1<<uint(lv*levelBits)-1) != 0 {
				return fmt.Errorf("bucket %d (level %d) has start %d, which belongs in bucket %d", k, lv, l.start, bucketOf(lv, l.start))
			}
			current := lv == 0 && l.start == w.cur
			if !current && l.start <= w.cur {
				return fmt.Errorf("bucket %d (level %d) start %d <= cur %d", k, lv, l.start, w.cur)
			}
			prev := ^k
			for i := l.head; i >= 0; {
				n := w.node(i)
				if n.prev != prev {
					return fmt.Errorf("bucket %d: node %d prev %d want %d", k, i, n.prev, prev)
				}
				if n.due() < l.minDue || n.due() > l.maxDue {
					return fmt.Errorf("bucket %d: due %d outside bounds [%d,%d]", k, n.due(), l.minDue, l.maxDue)
				}
				if err := checkPlacement(w, w.toTick(n.due()), lv, l.start, current); err != nil {
					return fmt.Errorf("bucket %d: %v", k, err)
				}
				count++
				prev = i
				if n.next < 0 && n.next != ^k {
					return fmt.Errorf("bucket %d: node %d ends in list %d", k, i, ^n.next)
				}
				i = n.next
			}
			if l.tail != prev {
				return fmt.Errorf("bucket %d: tail %d want %d", k, l.tail, prev)
			}
		}
	}
	var queued [8]int32
	for _, it := range w.heap {
		queued[bucketLevel(it.k)]++
	}
	if queued != w.queued {
		return fmt.Errorf("queued per level %v, want %v", w.queued, queued)
	}
	if count != w.n {
		return fmt.Errorf("found %d entries, Len %d", count, w.n)
	}
	for i := range w.heap {
		if i > 0 && before(w.heap[i], w.heap[(i-1)/2]) {
			return fmt.Errorf("heap order broken at %d", i)
		}
	}
	free := 0
	for i := w.free; i >= 0; i = w.node(i).next {
		if w.node(i).prev != freeMark {
			return fmt.Errorf("free slot %d not marked", i)
		}
		free++
		if free > int(w.used) {
			return fmt.Errorf("free list cycle")
		}
	}
	if free+w.n != int(w.used) {
		return fmt.Errorf("free %d + pending %d != used %d", free, w.n, w.used)
	}
	return nil
}

// checkPlacement checks that an entry with due tick t may sit at level lv
// in the bucket starting at start: overdue entries are in the current
// bucket; others are at their natural level (the highest digit in which
// t and cur differ) or below it, but only below buckets that are open
// (cur within one bucket width of their start).
func checkPlacement(w *Wheel, t int64, lv int, start int64, current bool) error {
	if t <= w.cur {
		if !current {
			return fmt.Errorf("overdue entry (tick %d, cur %d) at level %d start %d", t, w.cur, lv, start)
		}
		return nil
	}
	nat := (bits.Len64(uint64(t^w.cur)) - 1) / levelBits
	if lv > nat {
		return fmt.Errorf("entry tick %d at level %d above its natural level %d", t, lv, nat)
	}
	for m := nat; m > lv; m-- {
		sh := uint(m * levelBits)
		if s := t &^ (1<<sh - 1); !w.open(m, s) {
			return fmt.Errorf("entry tick %d at level %d below closed level-%d bucket %d (cur %d)", t, lv, m, s, w.cur)
		}
	}
	if want := t &^ (1<<uint(lv*levelBits) - 1); want != start {
		return fmt.Errorf("entry tick %d at level %d in bucket start %d, want %d", t, lv, start, want)
	}
	return nil
}
