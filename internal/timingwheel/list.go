package timingwheel

// Lists are intrusive doubly-linked lists threaded through the slab. A
// link that is negative is ^k, the index of the list itself: the first
// node's prev and the last node's next point back at their list, so
// unlinking needs no list pointer in the node, and an empty list has
// head == tail == ^k.
//
// List indexes: 0 is the firing list (entries being delivered by
// Advance), 1 the deferred list (due entries added from inside fn),
// and 2+level*bankSlots+bank*levelSlots+slot are the buckets.
const (
	firingList   int32 = 0
	deferredList int32 = 1
	firstBucket  int32 = 2
)

type list struct {
	head, tail int32
	hidx       int32 // position in the bucket heap, -1 when not queued
	start      int64 // tick at which the bucket is cascaded or fired
	minDue     int64 // lower bound of the dues in the list (exact until a removal)
	maxDue     int64 // upper bound of the dues in the list
}

func (l *list) empty() bool { return l.head < 0 }

func (l *list) reset(k int32) {
	l.head, l.tail = ^k, ^k
}

// level of bucket k.
func bucketLevel(k int32) int { return int(k-firstBucket) >> (levelBits + 1) }

func bucketIndex(level int, bank, slot int64) int32 {
	return firstBucket + int32(level*bankSlots) + int32(bank<<levelBits) + int32(slot) // #nosec G115 -- level < 8, bank < 2, slot < 256: the sum is < 4100
}

// bucketOf names the level-`level` bucket that starts at tick start. Each
// level has two banks of 256 buckets, chosen by the parity of the
// start's digit above the level (its "epoch"): the bank of cur's epoch
// and the bank of the next epoch, which open buckets are moved into
// ahead of time (see cascadeAhead).
func bucketOf(level int, start int64) int32 {
	shift := uint(level * levelBits)
	// For level 7 the shift is 64 and the bank is 0 (start >= 0).
	return bucketIndex(level, (start>>(shift+levelBits))&1, (start>>shift)&slotMask)
}

func (w *Wheel) list(k int32) *list {
	if k < firstBucket {
		return &w.pseudo[k]
	}
	u := uint32(k - firstBucket)
	return &w.levels[u/bankSlots][u%bankSlots]
}

// addLevel creates the next overflow level on first use.
func (w *Wheel) addLevel() {
	lv := new([bankSlots]list)
	base := bucketIndex(len(w.levels), 0, 0)
	for s := range lv {
		lv[s].reset(base + int32(s))
		lv[s].hidx = -1
	}
	w.levels = append(w.levels, lv)
}

// pushBack appends slot i (whose node is n) to list k.
func (w *Wheel) pushBack(l *list, k, i int32, n *node) {
	t := l.tail
	n.prev = t
	n.next = ^k
	if t >= 0 {
		w.node(t).next = i
	} else {
		l.head = i
	}
	l.tail = i
}

// unlink removes n from whatever list holds it and dequeues a bucket that
// becomes empty, so the heap only ever holds non-empty buckets.
func (w *Wheel) unlink(n *node) {
	p, x := n.prev, n.next
	if p >= 0 {
		w.node(p).next = x
	} else {
		w.list(^p).head = x
	}
	if x >= 0 {
		w.node(x).prev = p
	} else {
		w.list(^x).tail = p
	}
	if p < 0 && x < 0 && ^p >= firstBucket {
		if l := w.list(^p); l.hidx >= 0 {
			w.heapRemove(l)
		}
	}
}

// spliceBack moves all of src (index sk) to the end of dst (index dk).
func (w *Wheel) spliceBack(dst *list, dk int32, src *list, sk int32) {
	if src.empty() {
		return
	}
	first, last := src.head, src.tail
	if dst.empty() {
		dst.head = first
	} else {
		w.node(dst.tail).next = first
	}
	w.node(first).prev = dst.tail
	w.node(last).next = ^dk
	dst.tail = last
	src.reset(sk)
}

// spliceFront moves all of src (index sk) to the start of dst (index dk).
func (w *Wheel) spliceFront(dst *list, dk int32, src *list, sk int32) {
	if src.empty() {
		return
	}
	first, last := src.head, src.tail
	if dst.empty() {
		dst.tail = last
	} else {
		w.node(dst.head).prev = last
	}
	w.node(last).next = dst.head
	w.node(first).prev = ^dk
	dst.head = first
	src.reset(sk)
}
