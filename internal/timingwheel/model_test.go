package timingwheel

import (
	"container/heap"
	"math"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// refQueue is the reference model: a plain container/heap ordered by
// (due, insertion sequence).
type refItem struct {
	h   Handle
	id  uint64
	due int64
	seq uint64
	idx int
}

type refHeap []*refItem

func (q refHeap) Len() int { return len(q) }
func (q refHeap) Less(i, j int) bool {
	return q[i].due < q[j].due || q[i].due == q[j].due && q[i].seq < q[j].seq
}
func (q refHeap) Swap(i, j int) { q[i], q[j] = q[j], q[i]; q[i].idx = i; q[j].idx = j }
func (q *refHeap) Push(x any)   { it := x.(*refItem); it.idx = len(*q); *q = append(*q, it) }
func (q *refHeap) Pop() any {
	old := *q
	it := old[len(old)-1]
	*q = old[:len(old)-1]
	return it
}

type refQueue struct {
	q    refHeap
	live map[Handle]*refItem
	seq  uint64
}

func (r *refQueue) add(h Handle, id uint64, due int64) {
	r.seq++
	it := &refItem{h: h, id: id, due: due, seq: r.seq}
	heap.Push(&r.q, it)
	r.live[h] = it
}

func (r *refQueue) remove(h Handle) bool {
	it, ok := r.live[h]
	if !ok {
		return false
	}
	heap.Remove(&r.q, it.idx)
	delete(r.live, h)
	return true
}

func (r *refQueue) reschedule(h Handle, due int64) bool {
	it, ok := r.live[h]
	if !ok {
		return false
	}
	r.seq++
	it.due, it.seq = due, r.seq
	heap.Fix(&r.q, it.idx)
	return true
}

// advance pops up to limit (<=0: all) entries with due <= now.
func (r *refQueue) advance(now int64, limit int) (out []fired, more bool) {
	for len(r.q) > 0 && r.q[0].due <= now {
		if limit > 0 && len(out) == limit {
			return out, true
		}
		it := heap.Pop(&r.q).(*refItem)
		delete(r.live, it.h)
		out = append(out, fired{it.id, it.due})
	}
	return out, false
}

const (
	hourMs = int64(time.Hour / time.Millisecond)
	dayMs  = 24 * hourMs
	yearMs = 365 * dayMs
)

func satAdd(a, b int64) int64 {
	if b > 0 && a > math.MaxInt64-b {
		return math.MaxInt64
	}
	if b < 0 && a < math.MinInt64-b {
		return math.MinInt64
	}
	return a + b
}

func drawDue(t *rapid.T, now int64, pending []int64) int64 {
	switch rapid.IntRange(0, 8).Draw(t, "dueKind") {
	case 0:
		return satAdd(now, rapid.Int64Range(-50, 50).Draw(t, "near"))
	case 1:
		return satAdd(now, rapid.Int64Range(0, 600).Draw(t, "ms"))
	case 2:
		return satAdd(now, rapid.Int64Range(0, 200_000).Draw(t, "secs"))
	case 3:
		return satAdd(now, rapid.Int64Range(0, 30*hourMs).Draw(t, "hours"))
	case 4:
		return satAdd(now, rapid.Int64Range(0, 40*dayMs).Draw(t, "days"))
	case 5:
		return satAdd(now, rapid.Int64Range(0, 12*yearMs).Draw(t, "years"))
	case 6:
		if len(pending) > 0 {
			return rapid.SampledFrom(pending).Draw(t, "sameDue")
		}
		return now
	case 7:
		return satAdd(now, -rapid.Int64Range(0, 3*dayMs).Draw(t, "past"))
	default:
		return rapid.SampledFrom([]int64{math.MaxInt64, math.MaxInt64 - 1, math.MinInt64, -1, 0, 1 << 40}).Draw(t, "extreme")
	}
}

func drawJump(t *rapid.T) int64 {
	switch rapid.IntRange(0, 8).Draw(t, "jumpKind") {
	case 0:
		return 0 // standing still
	case 1:
		return rapid.Int64Range(1, 3).Draw(t, "j1")
	case 2:
		return rapid.Int64Range(1, 700).Draw(t, "jms")
	case 3:
		return rapid.Int64Range(1, 300_000).Draw(t, "jsecs")
	case 4:
		return rapid.Int64Range(1, 30*hourMs).Draw(t, "jhours")
	case 5:
		return rapid.Int64Range(1, 60*dayMs).Draw(t, "jdays")
	case 6:
		return rapid.Int64Range(1, 12*yearMs).Draw(t, "jyears")
	case 7:
		return -rapid.Int64Range(1, 5000).Draw(t, "back")
	default:
		return -rapid.Int64Range(1, 3*dayMs).Draw(t, "backFar")
	}
}

func tickMs(d time.Duration) int64 { return max(int64(d/time.Millisecond), 1) }

// drawBoundary returns a time near the next level-L bucket boundary b
// after now, or near b - width/256. At b the bucket starting there must
// have moved down, whatever is left of it at once, and the next one
// opens; at b - width/256 its first child opens. Plain random jumps
// rarely stop inside a partly moved level-2 bucket.
func drawBoundary(t *rapid.T, now, tick int64) int64 {
	level := rapid.IntRange(1, 3).Draw(t, "bLevel")
	width := tick << (levelBits * level)
	b := satAdd(floorDiv(now, width)*width, width)
	if rapid.Bool().Draw(t, "bChild") {
		b = satAdd(b, -width>>levelBits)
	}
	return satAdd(b, rapid.Int64Range(-2, 2).Draw(t, "bDelta")*tick)
}

func TestModel(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		tick := rapid.SampledFrom([]time.Duration{0, time.Millisecond, 2 * time.Millisecond, 10 * time.Millisecond, time.Second}).Draw(t, "tick")
		start := rapid.SampledFrom([]int64{0, 1_700_000_000_000, 1 << 33, 12345}).Draw(t, "start")
		// Small batches keep cascades in progress across many steps, so
		// adds, removes, reschedules and jumps land in the middle of them.
		batch := rapid.SampledFrom([]int{0, -1, 1, 2, 5}).Draw(t, "cascadeBatch")
		w := New(Config{Tick: tick, Start: start, CascadeBatch: batch})
		ref := &refQueue{live: map[Handle]*refItem{}}
		now := start
		var handles []Handle
		var nextID uint64
		pendingDues := func() []int64 {
			ds := make([]int64, 0, len(ref.q))
			for _, it := range ref.q {
				ds = append(ds, it.due)
			}
			return ds
		}
		pickHandle := func() Handle {
			if len(handles) == 0 || rapid.IntRange(0, 9).Draw(t, "bogus") == 0 {
				return rapid.SampledFrom([]Handle{0, 1, makeHandle(5, 1), Handle(math.MaxUint64)}).Draw(t, "bogusHandle")
			}
			return rapid.SampledFrom(handles).Draw(t, "handle")
		}
		steps := rapid.IntRange(1, 300).Draw(t, "steps")
		for step := 0; step < steps; step++ {
			switch op := rapid.IntRange(0, 9).Draw(t, "op"); {
			case op <= 3: // add, sometimes a burst
				burst := rapid.SampledFrom([]int{1, 1, 1, 5, 40}).Draw(t, "burst")
				for range burst {
					due := drawDue(t, now, pendingDues())
					nextID++
					h := w.Add(nextID, due)
					ref.add(h, nextID, due)
					handles = append(handles, h)
				}
			case op == 4:
				h := pickHandle()
				if got, want := w.Remove(h), ref.remove(h); got != want {
					t.Fatalf("Remove(%x) = %v, want %v", h, got, want)
				}
			case op == 5:
				h := pickHandle()
				due := drawDue(t, now, pendingDues())
				if got, want := w.Reschedule(h, due), ref.reschedule(h, due); got != want {
					t.Fatalf("Reschedule(%x) = %v, want %v", h, got, want)
				}
			default: // advance
				if rapid.IntRange(0, 3).Draw(t, "toBoundary") == 0 {
					now = drawBoundary(t, now, tickMs(tick))
				} else {
					now = satAdd(now, drawJump(t))
				}
				limit := rapid.SampledFrom([]int{0, 0, 0, 1, 3}).Draw(t, "limit")
				var got []fired
				more := w.AdvanceLimit(now, limit, func(id uint64, due int64) {
					if due > now {
						t.Fatalf("fired early: due %d > now %d", due, now)
					}
					got = append(got, fired{id, due})
				})
				want, wantMore := ref.advance(now, limit)
				if !slices.Equal(got, want) {
					t.Fatalf("Advance(%d, limit %d) fired\n%v\nwant\n%v", now, limit, got, want)
				}
				if more != wantMore {
					t.Fatalf("Advance(%d, limit %d) more = %v, want %v", now, limit, more, wantMore)
				}
			}
			if w.Len() != len(ref.q) {
				t.Fatalf("Len = %d, want %d", w.Len(), len(ref.q))
			}
			nd, ok := w.NextDue()
			if ok != (len(ref.q) > 0) || ok && nd != ref.q[0].due {
				var want int64
				if len(ref.q) > 0 {
					want = ref.q[0].due
				}
				t.Fatalf("NextDue = %d,%v want %d,%v", nd, ok, want, len(ref.q) > 0)
			}
			if wk, ok := w.wakeAt(); ok && len(ref.q) > 0 && wk > ref.q[0].due {
				t.Fatalf("wakeAt %d later than earliest due %d", wk, ref.q[0].due)
			}
			if err := checkInvariants(w); err != nil {
				t.Fatalf("invariant: %v", err)
			}
		}
	})
}
