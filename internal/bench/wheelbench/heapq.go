package wheelbench

import (
	"container/heap"
	"sync"
	"time"
)

// The container/heap baseline: the textbook timer queue, one heap object
// per timer, ordered by (due, insertion sequence).

type hitem struct {
	id  uint64
	due int64
	seq uint64
	idx int // position in the heap, -1 once popped or removed
}

type hheap []*hitem

func (h hheap) Len() int { return len(h) }
func (h hheap) Less(i, j int) bool {
	return h[i].due < h[j].due || h[i].due == h[j].due && h[i].seq < h[j].seq
}
func (h hheap) Swap(i, j int) { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *hheap) Push(x any)   { it := x.(*hitem); it.idx = len(*h); *h = append(*h, it) }
func (h *hheap) Pop() any {
	old := *h
	it := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	it.idx = -1
	return it
}

type heapQueue struct {
	h   hheap
	seq uint64
}

func (q *heapQueue) add(id uint64, due int64) *hitem {
	q.seq++
	it := &hitem{id: id, due: due, seq: q.seq}
	heap.Push(&q.h, it)
	return it
}

func (q *heapQueue) remove(it *hitem) bool {
	if it.idx < 0 {
		return false
	}
	heap.Remove(&q.h, it.idx)
	return true
}

// heapRunner drives a heapQueue exactly like timingwheel.Runner drives a
// wheel (one goroutine, one timer, batch under the lock, deliver outside),
// so the lateness comparison isolates the data structure.
type heapRunner struct {
	mu     sync.Mutex
	q      heapQueue
	wakeAt int64
	armed  bool
	batch  []hitem
	fire   func(id uint64, due int64)
	wake   chan struct{}
	stop   chan struct{}
	done   chan struct{}
}

func newHeapRunner(fire func(id uint64, due int64)) *heapRunner {
	r := &heapRunner{fire: fire, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go r.loop()
	return r
}

func (r *heapRunner) add(id uint64, due int64) *hitem {
	r.mu.Lock()
	it := r.q.add(id, due)
	if !r.armed || due < r.wakeAt {
		r.wakeAt, r.armed = due, true
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	r.mu.Unlock()
	return it
}

func (r *heapRunner) close() {
	close(r.stop)
	<-r.done
}

func (r *heapRunner) loop() {
	defer close(r.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		r.mu.Lock()
		now := time.Now().UnixMilli()
		r.batch = r.batch[:0]
		for len(r.q.h) > 0 && r.q.h[0].due <= now && len(r.batch) < 4096 {
			r.batch = append(r.batch, *heap.Pop(&r.q.h).(*hitem))
		}
		more := len(r.q.h) > 0 && r.q.h[0].due <= now
		var next int64
		ok := len(r.q.h) > 0
		if ok {
			next = r.q.h[0].due
		}
		r.wakeAt, r.armed = next, ok && !more
		r.mu.Unlock()
		for _, it := range r.batch {
			r.fire(it.id, it.due)
		}
		if more {
			continue
		}
		var tc <-chan time.Time
		if ok {
			d := time.Until(time.UnixMilli(next))
			if d <= 0 {
				continue
			}
			t.Reset(d)
			tc = t.C
		}
		select {
		case <-tc:
		case <-r.wake:
			t.Stop()
		case <-r.stop:
			t.Stop()
			return
		}
	}
}
