package timingwheel

import "math"

// The slab stores every timer as plain values in fixed-size chunks.
// Chunks (not one growing slice) keep memory at ~28 B per timer: a
// growing slice would hold up to 25% spare capacity and copy hundreds of
// megabytes while the runner holds its lock.
const (
	chunkBits = 12
	chunkSize = 1 << chunkBits
	chunkMask = chunkSize - 1

	// maxEntries keeps every index positive in an int32 link.
	maxEntries = math.MaxInt32

	// freeMark in node.prev marks a slot that is on the free list, so a
	// forged or stale handle can never unlink a free slot.
	freeMark int32 = math.MinInt32
)

// node is one timer: 28 bytes with 4-byte alignment (the 64-bit fields
// are stored as halves), so a timer costs 28 B of heap and one cache line
// (sometimes two) is all that Add, Remove, a cascade or firing touches.
type node struct {
	next         int32 // slot index, or ^list for the list's end
	prev         int32 // slot index, or ^list for the list's start; freeMark when free
	dueLo, dueHi uint32
	idLo, idHi   uint32
	gen          uint32 // bumped on release; part of the Handle
}

func (n *node) due() int64 { return int64(uint64(n.dueLo) | uint64(n.dueHi)<<32) } // #nosec G115 -- reassembles the halves setDue split: bit reinterpretation
func (n *node) id() uint64 { return uint64(n.idLo) | uint64(n.idHi)<<32 }

func (n *node) setDue(d int64)  { n.dueLo, n.dueHi = uint32(d), uint32(uint64(d)>>32) } // #nosec G115 -- splits d into 32-bit halves: truncation is the point
func (n *node) setID(id uint64) { n.idLo, n.idHi = uint32(id), uint32(id>>32) }         // #nosec G115 -- splits id into 32-bit halves: truncation is the point

// chunk is a fixed block of slots; 4096*28 B = 112 KiB, a whole number of
// 8 KiB pages, so the allocator wastes nothing.
type chunk [chunkSize]node

// Handle names one scheduled timer. The low 32 bits are the slot index,
// the high 32 bits the slot's generation, so a handle kept after its timer
// fired or was removed is recognised as stale. The zero Handle is never
// valid.
type Handle uint64

func makeHandle(i int32, gen uint32) Handle { return Handle(uint64(gen)<<32 | uint64(uint32(i))) } // #nosec G115 -- slot index 0 ≤ i < maxEntries, packed in the low 32 bits

func (h Handle) index() int32 { return int32(uint32(h)) } // #nosec G115 -- unpacks makeHandle's low 32 bits
func (h Handle) gen() uint32  { return uint32(h >> 32) }

func (w *Wheel) node(i int32) *node {
	return &w.chunks[i>>chunkBits][i&chunkMask]
}

// alloc returns a free slot, reusing released slots first.
func (w *Wheel) alloc() int32 {
	if i := w.free; i >= 0 {
		w.free = w.node(i).next
		return i
	}
	if w.used == maxEntries {
		panic("timingwheel: too many pending timers")
	}
	i := w.used
	if int(i>>chunkBits) == len(w.chunks) {
		w.chunks = append(w.chunks, new(chunk))
	}
	w.chunks[i>>chunkBits][i&chunkMask].gen = 1 // generation 0 would allow the zero Handle
	w.used++
	return i
}

// release puts slot i on the free list and invalidates its handle.
func (w *Wheel) release(i int32) {
	n := w.node(i)
	n.gen++
	if n.gen == 0 {
		n.gen = 1
	}
	n.next, n.prev = w.free, freeMark
	w.free = i
}

// lookup returns the live node named by h.
func (w *Wheel) lookup(h Handle) (int32, *node, bool) {
	i := h.index()
	if i < 0 || i >= w.used {
		return 0, nil, false
	}
	n := w.node(i)
	if n.gen != h.gen() || n.prev == freeMark {
		return 0, nil, false
	}
	return i, n, true
}
