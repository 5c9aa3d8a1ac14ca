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
	bankSlots  = 2 * levelSlots // two banks per level: cur's epoch and the next

	// DefaultCascadeBatch is the default Config.CascadeBatch.
	DefaultCascadeBatch = 512
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
	// CascadeBatch is how many entries one Advance call moves down from
	// open buckets ahead of their start (see "Cascading ahead" in the
	// package doc). Zero means DefaultCascadeBatch; a negative value turns
	// moving ahead off, so every bucket is cascaded in one step when its
	// start is reached.
	CascadeBatch int
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

	pseudo [2]list            // firing and deferred lists
	levels []*[bankSlots]list // created on first use, never moved
	heap   []heapItem         // non-empty buckets by start
	scr    []dueIdx           // reused by the sorting path of collect

	next   int64 // cached exact NextDue, valid when nextOK
	nextOK bool

	ahead  int      // entries moved ahead per Advance; 0: off
	queued [8]int32 // non-empty buckets per level
	forced uint64   // entries moved by cascade, at a bucket's start (for tests)

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
	// Room for two full levels of buckets in both banks: the heap rarely
	// grows after this.
	ahead := cfg.CascadeBatch
	if ahead == 0 {
		ahead = DefaultCascadeBatch
	}
	w := &Wheel{tick: tick, free: -1, heap: make([]heapItem, 0, 4*levelSlots), ahead: max(ahead, 0)}
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
//
// A call that delivers everything due then moves up to
// Config.CascadeBatch entries of open buckets down a level (cascading
// ahead); CascadePending reports whether more of that work is waiting.
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
	w.cascadeAhead(w.ahead)
	return false
}

// CascadePending reports whether an open bucket still has entries to move
// down, that is whether calling Advance again, even at the same time,
// has work to do. A driver that keeps calling Advance while this is true,
// and also at the times wakeAt names (the Runner does both), cascades
// ahead in CascadeBatch-sized steps and never needs a big cascade when a
// bucket's start is reached.
func (w *Wheel) CascadePending() bool {
	if w.ahead == 0 {
		return false
	}
	l, _ := w.nextOpen()
	return l != nil
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
// cur differ, or a lower one if that bucket is open (see file). Thus
// non-empty buckets cover disjoint or nested ranges, all entries with one
// due that are in one level share a bucket (in insertion order), and a
// bucket's start is reached exactly when its entries must have moved down.
func (w *Wheel) place(i int32, n *node) {
	t, level := w.toTick(n.due()), 0
	if t > w.cur {
		level = (bits.Len64(uint64(t^w.cur)) - 1) / levelBits // #nosec G115 -- bit length of the XOR of two ticks: bit reinterpretation
	} else {
		t = w.cur // the current bucket
	}
	w.file(i, n, t, level)
}

// file appends entry i, due tick t, to the level-`level` bucket whose
// range holds t. While that bucket is open (level >= 1 and cur within one
// bucket width of its start, so it is being moved down) and empty, it
// goes one level lower instead: the entries filed there before it have
// all moved down already, so appending below keeps insertion order. An
// open bucket that still has entries gets it at its tail, and it moves
// down after them.
func (w *Wheel) file(i int32, n *node, t int64, level int) {
	for level >= len(w.levels) {
		w.addLevel()
	}
	start := t &^ (1<<uint(level*levelBits) - 1)
	k := bucketOf(level, start)
	l := w.list(k)
	for level > 0 && w.open(level, start) && l.empty() {
		level--
		start = t &^ (1<<uint(level*levelBits) - 1)
		k = bucketOf(level, start)
		l = w.list(k)
	}
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

// open reports whether the level-`level` (>= 1) bucket starting at start
// is open: cur is within one bucket width of its start. With cascading
// ahead off, only a bucket whose start is reached counts as open, which
// files entries by their natural level relative to cur.
func (w *Wheel) open(level int, start int64) bool {
	if w.ahead == 0 {
		return start <= w.cur
	}
	return start-1<<uint(level*levelBits) <= w.cur
}

// cascade moves every entry of an outer bucket whose start was reached
// (cur == its start) one level down. It is the fallback for what
// cascadeAhead did not finish in time: after a clock jump, when Advance
// is not called often enough, or with CascadeBatch < 0.
func (w *Wheel) cascade(l *list, k int32) {
	level := bucketLevel(k)
	i := l.head
	l.reset(k)
	for i >= 0 {
		n := w.node(i)
		next := n.next
		w.file(i, n, w.toTick(n.due()), level-1)
		w.forced++
		i = next
	}
}

// nextOpen returns the open bucket with the earliest start that still
// has entries. On a tie (a bucket and its first child) it is the lower
// one: once the child is empty, the parent's entries skip it, so each
// moves once instead of twice; order is kept either way, as the child's
// entries came from the parent earlier. For each level L >= 1 the open
// bucket is the one starting at the first multiple of 256^L after cur; it
// is at level L in the bank of its epoch.
func (w *Wheel) nextOpen() (*list, int32) {
	var best *list
	var bk int32
	var bs int64
	for level := 1; level < len(w.levels); level++ {
		shift := uint(level * levelBits)
		s := (w.cur>>shift + 1) << shift
		if s <= w.cur { // past the int64 range
			break
		}
		k := bucketOf(level, s)
		l := w.list(k)
		if l.empty() || l.start != s {
			continue
		}
		if best == nil || s < bs {
			best, bk, bs = l, k, s
		}
	}
	return best, bk
}

// cascadeAhead moves up to budget entries from the heads of open buckets
// one level down, earliest start first. Their children are in the bank of
// the next epoch, which holds nothing else, so nothing due before the
// bucket's start is disturbed; entries move in list order, so a child
// receives each due's entries in insertion order.
func (w *Wheel) cascadeAhead(budget int) {
	for budget > 0 {
		l, k := w.nextOpen()
		if l == nil {
			return
		}
		level := bucketLevel(k)
		for ; budget > 0 && !l.empty(); budget-- {
			i := l.head
			n := w.node(i)
			w.unlink(n) // dequeues l when it empties
			w.file(i, n, w.toTick(n.due()), level-1)
		}
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
		k := bucketOf(0, w.cur)
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

// topMin returns the exact earliest due of all bucketed entries. The heap
// must not be empty. It is in the first bucket unless that bucket is open
// and partly moved down: then buckets nested in its range, which are
// later in the heap, may hold earlier dues.
func (w *Wheel) topMin() int64 {
	top := w.heap[0]
	lo := w.exactMin(w.list(top.k))
	if level := bucketLevel(top.k); level > 0 && w.open(level, top.start) {
		lo = w.heapMin(1, w.heapMin(2, lo))
	}
	return lo
}

// heapMin returns min(lo, the dues in the heap subtree at i), visiting
// only buckets that start before lo.
func (w *Wheel) heapMin(i int, lo int64) int64 {
	if i >= len(w.heap) || w.heap[i].start*w.tick >= lo {
		return lo
	}
	lo = min(lo, w.exactMin(w.list(w.heap[i].k)))
	return w.heapMin(2*i+2, w.heapMin(2*i+1, lo))
}

func (w *Wheel) exactMin(l *list) int64 {
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
// bucket if it must cascade, else its earliest due; the wheel time if
// open buckets have entries to move down; and, with cascading ahead on,
// the next level-L boundary if level L has closed non-empty buckets, as
// one of them may open there. After removals this can be early, never
// late; the Advance at that time tightens it.
func (w *Wheel) wakeAt() (int64, bool) {
	if len(w.heap) == 0 {
		return 0, false
	}
	top := w.heap[0]
	at := w.list(top.k).minDue
	if bucketLevel(top.k) > 0 {
		at = top.start * w.tick
	}
	if w.ahead == 0 {
		return at, true
	}
	for level := 1; level < len(w.levels); level++ {
		shift := uint(level * levelBits)
		s := (w.cur>>shift + 1) << shift
		if s <= w.cur { // past the int64 range
			break
		}
		closed := w.queued[level]
		if l := w.list(bucketOf(level, s)); !l.empty() && l.start == s {
			at = min(at, w.cur*w.tick) // open with entries: work now
			closed--
		}
		if closed > 0 { // s*tick fits: a closed bucket starts later
			at = min(at, s*w.tick)
		}
	}
	return at, true
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
