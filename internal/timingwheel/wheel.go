package timingwheel

import (
	"cmp"
	"math"
	"math/bits"
	"slices"
	"time"
)

const (
	levelBits  = 8 // 256 buckets per level: 8 levels cover every int64 tick
	levelSlots = 1 << levelBits
	slotMask   = levelSlots - 1
)

// Config configures a Wheel. The zero value is usable.
type Config struct {
	// Tick is the width of a level-0 bucket, truncated to whole
	// milliseconds. Zero or anything below 1ms means 1ms. A coarser tick
	// means fewer, larger buckets; entries still never fire early.
	Tick time.Duration
	// Start is the wheel's initial time in unix milliseconds. It only
	// affects how the first entries are spread over levels; negative
	// values are treated as 0.
	Start int64
}

// Wheel is a hierarchical timing wheel over int64 unix-millisecond dues.
// It is not safe for concurrent use; see Runner for a goroutine-safe driver.
type Wheel struct {
	tick int64
	cur  int64 // wheel time in ticks; never decreases, never negative
	n    int   // pending entries, including those being delivered

	chunks []*chunk
	used   int32 // slots ever handed out
	free   int32 // head of the free list, -1 if empty

	pseudo [2]list             // firing and deferred lists
	levels []*[levelSlots]list // created on first use, never moved
	heap   []heapItem          // non-empty buckets by start
	scr    []dueIdx            // reused by the sorting path of collect

	next   int64 // cached exact NextDue, valid when nextOK
	nextOK bool

	advancing bool
	advNow    int64
}

type dueIdx struct {
	due int64
	i   int32
}

func cmpDue(a, b dueIdx) int { return cmp.Compare(a.due, b.due) }

// New returns an empty wheel.
func New(cfg Config) *Wheel {
	tick := int64(cfg.Tick / time.Millisecond)
	if tick < 1 {
		tick = 1
	}
	// Room for two full levels of buckets: the heap rarely grows after this.
	w := &Wheel{tick: tick, free: -1, heap: make([]heapItem, 0, 2*levelSlots)}
	w.cur = max(floorDiv(cfg.Start, tick), 0)
	for k := range w.pseudo {
		w.pseudo[k].reset(int32(k))
		w.pseudo[k].hidx = -1
	}
	w.addLevel()
	return w
}

// Len returns the number of pending entries.
func (w *Wheel) Len() int { return w.n }

// Add schedules id to fire at due (unix ms) and returns its handle. A due
// at or before the wheel's time fires on the next Advance. Entries with
// equal dues fire in the order they were added.
func (w *Wheel) Add(id uint64, due int64) Handle {
	i := w.alloc()
	c := w.chunks[i>>chunkBits]
	j := i & chunkMask
	n := &c[j]
	n.setID(id)
	n.setDue(due)
	w.n++
	w.schedule(i, n)
	return makeHandle(i, n.gen)
}

// Remove cancels the entry named by h. It reports false if h is stale:
// the entry already fired (or is being delivered right now), was removed,
// or h is the zero Handle.
func (w *Wheel) Remove(h Handle) bool {
	i, n, ok := w.lookup(h)
	if !ok {
		return false
	}
	w.unlink(n)
	w.forget(n.due())
	w.n--
	w.release(i)
	return true
}

// Reschedule moves a pending entry to a new due, keeping its handle and
// id. For tie-breaking it counts as newly added. It reports false if h is
// stale.
func (w *Wheel) Reschedule(h Handle, due int64) bool {
	i, n, ok := w.lookup(h)
	if !ok {
		return false
	}
	w.unlink(n)
	w.forget(n.due())
	n.setDue(due)
	w.schedule(i, n)
	return true
}

// NextDue returns the earliest due among pending entries. It is exact; it
// is O(1) except after the earliest entry was removed or after Advance,
// when it may scan the first bucket once.
func (w *Wheel) NextDue() (int64, bool) {
	if w.n == 0 {
		return 0, false
	}
	if w.advancing {
		return w.nextDuringAdvance(), true
	}
	if !w.nextOK {
		w.next, w.nextOK = w.topMin(), true
	}
	return w.next, true
}

// Advance moves the wheel to now (unix ms) and calls fn, if not nil, for
// every pending entry with due <= now, in due order, ties in insertion
// order. It never delivers an entry with due > now. A now earlier than a
// previous one does not move the wheel back; it still delivers entries
// added since with due <= now.
//
// Inside fn the wheel may be used freely, except for calling Advance:
// Remove or Reschedule of an entry not yet delivered prevents its
// delivery; entries added (or rescheduled) with due <= now are not
// delivered by this call but by the next Advance.
func (w *Wheel) Advance(now int64, fn func(id uint64, due int64)) {
	w.AdvanceLimit(now, 0, fn)
}

// AdvanceLimit is Advance delivering at most limit entries (no limit if
// limit <= 0). It reports whether entries with due <= now remain
// undelivered (not counting ones added from inside fn); the next call
// continues in order.
func (w *Wheel) AdvanceLimit(now int64, limit int, fn func(id uint64, due int64)) (more bool) {
	if w.advancing {
		panic("timingwheel: Advance called from inside its callback")
	}
	w.advancing, w.advNow, w.nextOK = true, now, false
	defer w.endAdvance()
	left := limit
	if left <= 0 {
		left = -1
	}
	nowTick := w.toTick(now)
	for len(w.heap) > 0 {
		if left == 0 {
			return w.topMin() <= now
		}
		top := w.heap[0]
		l := w.list(top.k)
		if bucketLevel(top.k) > 0 {
			if top.start > nowTick {
				break
			}
			w.cur = top.start
			w.heapRemove(l)
			w.cascade(l, top.k)
			continue
		}
		if l.minDue > now {
			break
		}
		w.cur = max(w.cur, top.start)
		w.collect(l, top.k, now)
		if !w.drain(fn, &left) {
			return true
		}
	}
	w.cur = max(w.cur, nowTick)
	return false
}

// schedule files entry i, new or moved.
func (w *Wheel) schedule(i int32, n *node) {
	if w.advancing {
		if n.due() <= w.advNow {
			w.pushBack(&w.pseudo[deferredList], deferredList, i, n)
			return
		}
	} else if w.n == 1 {
		w.next, w.nextOK = n.due(), true
	} else if w.nextOK && n.due() < w.next {
		w.next = n.due()
	}
	w.place(i, n)
}

// forget invalidates the NextDue cache if it may have named due.
func (w *Wheel) forget(due int64) {
	if w.nextOK && due == w.next {
		w.nextOK = false
	}
}

// place puts entry i into its bucket relative to the wheel time: a due
// tick at or before cur goes to the current level-0 bucket; otherwise the
// level is given by the highest base-256 digit in which the due tick and
// cur differ. Thus non-empty buckets cover disjoint, ordered ranges, all
// entries with one due share one bucket (in insertion order), and a
// bucket's start is reached exactly when its entries must move down.
func (w *Wheel) place(i int32, n *node) {
	t := w.toTick(n.due())
	level, slot, start := 0, w.cur&slotMask, w.cur
	if t > w.cur {
		level = (bits.Len64(uint64(t^w.cur)) - 1) / levelBits
		shift := uint(level * levelBits)
		slot, start = (t>>shift)&slotMask, t&^(1<<shift-1)
		for level >= len(w.levels) {
			w.addLevel()
		}
	}
	l := &w.levels[level][slot]
	k := bucketIndex(level, slot)
	if l.empty() {
		l.start, l.minDue, l.maxDue = start, n.due(), n.due()
		w.heapPush(l, k)
	} else {
		if l.start != start {
			panic("timingwheel: internal error: bucket reused across epochs")
		}
		l.minDue = min(l.minDue, n.due())
		l.maxDue = max(l.maxDue, n.due())
	}
	w.pushBack(l, k, i, n)
}

// cascade re-files every entry of an outer bucket whose start was reached.
func (w *Wheel) cascade(l *list, k int32) {
	i := l.head
	l.reset(k)
	for i >= 0 {
		n := w.node(i)
		next := n.next
		w.place(i, n)
		i = next
	}
}

// collect moves the entries of level-0 bucket l with due <= now to the
// firing list in (due, insertion) order and keeps the rest in l.
func (w *Wheel) collect(l *list, k int32, now int64) {
	f := &w.pseudo[firingList]
	if l.minDue == l.maxDue { // one due, already <= now: the common 1ms-tick case
		w.heapRemove(l)
		w.spliceBack(f, firingList, l, k)
		return
	}
	// Mixed dues (coarse tick, past dues, clock went back): a stable sort
	// keeps insertion order among equal dues because lists are kept in
	// insertion order per due.
	s := w.scr[:0]
	for i := l.head; i >= 0; {
		n := w.node(i)
		s = append(s, dueIdx{n.due(), i})
		i = n.next
	}
	slices.SortStableFunc(s, cmpDue)
	l.reset(k)
	for _, e := range s {
		if e.due <= now {
			w.pushBack(f, firingList, e.i, w.node(e.i))
		} else {
			w.pushBack(l, k, e.i, w.node(e.i))
		}
	}
	w.scr = s[:0]
	if l.empty() {
		w.heapRemove(l)
		return
	}
	l.minDue, l.maxDue = w.node(l.head).due(), w.node(l.tail).due()
}

// drain delivers the firing list; it stops early when *left reaches 0.
func (w *Wheel) drain(fn func(id uint64, due int64), left *int) bool {
	f := &w.pseudo[firingList]
	for !f.empty() {
		if *left == 0 {
			return false
		}
		*left--
		i := f.head
		c := w.chunks[i>>chunkBits]
		j := i & chunkMask
		n := &c[j]
		id, due := n.id(), n.due()
		w.unlink(n)
		w.n--
		w.release(i) // before fn, so the handle is already stale inside fn
		if fn != nil {
			fn(id, due)
		}
	}
	return true
}

// endAdvance restores the resting state when Advance returns, normally,
// at its limit, or by a panic in fn.
func (w *Wheel) endAdvance() {
	w.advancing, w.nextOK = false, false
	if f := &w.pseudo[firingList]; !f.empty() {
		// Undelivered entries came from the current bucket and are older
		// than anything added there since: put them back at its front.
		k := bucketIndex(0, w.cur&slotMask)
		l := w.list(k)
		lo, hi := w.node(f.head).due(), w.node(f.tail).due()
		if l.empty() {
			l.start, l.minDue, l.maxDue = w.cur, lo, hi
			w.heapPush(l, k)
		} else {
			l.minDue, l.maxDue = min(l.minDue, lo), max(l.maxDue, hi)
		}
		w.spliceFront(l, k, f, firingList)
	}
	d := &w.pseudo[deferredList]
	for !d.empty() {
		i := d.head
		n := w.node(i)
		w.unlink(n)
		w.place(i, n)
	}
}

// topMin returns the exact earliest due in the first bucket, which holds
// the earliest due of all bucketed entries. The heap must not be empty.
func (w *Wheel) topMin() int64 {
	l := w.list(w.heap[0].k)
	if l.minDue != l.maxDue {
		w.rescan(l)
	}
	return l.minDue
}

// rescan tightens l's due bounds to the exact values.
func (w *Wheel) rescan(l *list) {
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i := l.head; i >= 0; {
		n := w.node(i)
		lo, hi = min(lo, n.due()), max(hi, n.due())
		i = n.next
	}
	l.minDue, l.maxDue = lo, hi
}

func (w *Wheel) nextDuringAdvance() int64 {
	lo := int64(math.MaxInt64)
	if len(w.heap) > 0 {
		lo = w.topMin()
	}
	for _, k := range [...]int32{firingList, deferredList} {
		l := w.list(k)
		if !l.empty() {
			w.rescan(l)
			lo = min(lo, l.minDue)
		}
	}
	return lo
}

// wakeAt returns when Advance next has work to do: the start of the first
// bucket if it must cascade, else its earliest due. After removals this
// can be early, never late; the Advance at that time tightens it.
func (w *Wheel) wakeAt() (int64, bool) {
	if len(w.heap) == 0 {
		return 0, false
	}
	top := w.heap[0]
	if bucketLevel(top.k) > 0 {
		return top.start * w.tick, true
	}
	return w.list(top.k).minDue, true
}

func (w *Wheel) toTick(ms int64) int64 {
	if w.tick == 1 {
		return ms
	}
	return floorDiv(ms, w.tick)
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
