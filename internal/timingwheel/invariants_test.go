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
			k := bucketIndex(lv, int64(s))
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
			if lv == 0 && int64(s) == w.cur&slotMask {
				if l.start != w.cur {
					return fmt.Errorf("current bucket start %d != cur %d", l.start, w.cur)
				}
			} else if l.start <= w.cur {
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
				t := w.toTick(n.due())
				if t <= w.cur {
					if lv != 0 || int64(s) != w.cur&slotMask {
						return fmt.Errorf("overdue entry (tick %d, cur %d) in bucket level %d slot %d", t, w.cur, lv, s)
					}
				} else {
					wl := (bits.Len64(uint64(t^w.cur)) - 1) / levelBits
					sh := uint(wl * levelBits)
					if wl != lv || (t>>sh)&slotMask != int64(s) || t&^(1<<sh-1) != l.start {
						return fmt.Errorf("entry tick %d in bucket level %d slot %d start %d, want level %d", t, lv, s, l.start, wl)
					}
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
