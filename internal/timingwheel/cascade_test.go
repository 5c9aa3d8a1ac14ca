package timingwheel

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// pair drives a wheel and the reference queue together and checks every
// delivery, NextDue and the invariants after each operation.
type pair struct {
	t   *testing.T
	w   *Wheel
	ref *refQueue
	id  uint64
	now int64
}

func newPair(t *testing.T, cfg Config) *pair {
	return &pair{t: t, w: New(cfg), ref: &refQueue{live: map[Handle]*refItem{}}, now: cfg.Start}
}

func (p *pair) add(due int64) Handle {
	p.t.Helper()
	p.id++
	h := p.w.Add(p.id, due)
	p.ref.add(h, p.id, due)
	p.check()
	return h
}

func (p *pair) remove(h Handle) {
	p.t.Helper()
	if got, want := p.w.Remove(h), p.ref.remove(h); got != want {
		p.t.Fatalf("Remove = %v, want %v", got, want)
	}
	p.check()
}

func (p *pair) reschedule(h Handle, due int64) {
	p.t.Helper()
	if got, want := p.w.Reschedule(h, due), p.ref.reschedule(h, due); got != want {
		p.t.Fatalf("Reschedule = %v, want %v", got, want)
	}
	p.check()
}

// advance moves both to now and returns how many entries fired.
func (p *pair) advance(now int64) int {
	p.t.Helper()
	p.now = now
	var got []fired
	p.w.Advance(now, func(id uint64, due int64) { got = append(got, fired{id, due}) })
	want, _ := p.ref.advance(now, 0)
	if !slices.Equal(got, want) {
		p.t.Fatalf("Advance(%d) fired %d entries, want %d\n%v\nwant\n%v", now, len(got), len(want), head(got), head(want))
	}
	p.check()
	return len(got)
}

func head(f []fired) []fired { return f[:min(len(f), 20)] }

func (p *pair) check() {
	p.t.Helper()
	nd, ok := p.w.NextDue()
	if ok != (len(p.ref.q) > 0) || ok && nd != p.ref.q[0].due {
		p.t.Fatalf("NextDue = %d,%v, want %v", nd, ok, p.ref.q)
	}
	if err := checkInvariants(p.w); err != nil {
		p.t.Fatal(err)
	}
}

// level2 returns a wheel time whose next level-2 boundary (65536 ticks) is
// 2*65536 ahead: a bucket there is closed until the wheel reaches base+65536.
const level2 = int64(1 << 16)

func atBoundary(x, width int64) int64 { return (x/width + 1) * width }

// bucketLen counts the entries of the level-`level` bucket starting at start.
func bucketLen(w *Wheel, level int, start int64) int {
	if level >= len(w.levels) {
		return 0
	}
	l := w.list(bucketOf(level, start))
	if l.empty() || l.start != start {
		return 0
	}
	n := 0
	for i := l.head; i >= 0; i = w.node(i).next {
		n++
	}
	return n
}

// A level-2 bucket moves down a batch per Advance once it opens, and
// adds with the same dues before, during and after the move keep FIFO.
func TestCascadeAheadStraddle(t *testing.T) {
	base := atBoundary(t0, level2) // cur at a level-2 boundary
	S := base + 2*level2           // closed until cur reaches base+level2
	p := newPair(t, Config{Start: base, CascadeBatch: 3})
	dues := []int64{S, S + 1, S + 300, S + 256, S + 40_000, S + 65_534}
	for round := range 4 {
		for _, d := range dues {
			p.add(d + int64(round%2)) // two rounds share each due
		}
	}
	if got := bucketLen(p.w, 2, S); got != 24 {
		t.Fatalf("closed bucket holds %d, want 24", got)
	}
	if p.w.CascadePending() {
		t.Fatal("work pending before the bucket opens")
	}
	p.advance(base + level2 - 1)
	if got := bucketLen(p.w, 2, S); got != 24 {
		t.Fatalf("bucket moved before it opened: %d left", got)
	}
	// Opens: one Advance moves 3; adds in between go behind what is left.
	p.advance(base + level2)
	if got := bucketLen(p.w, 2, S); got != 21 {
		t.Fatalf("after one step %d left, want 21", got)
	}
	for _, d := range dues {
		p.add(d) // same dues as entries already moved and still waiting
	}
	for i := range 4 {
		p.advance(base + level2 + int64(i))
		if i == 1 {
			p.add(S + 1)
		}
	}
	if !p.w.CascadePending() {
		t.Fatal("no work pending mid-cascade")
	}
	for p.w.CascadePending() {
		p.advance(p.now)
	}
	if got := bucketLen(p.w, 2, S); got != 0 {
		t.Fatalf("%d left after the cascade finished", got)
	}
	p.add(S + 300) // open and empty: filed below it directly
	if got := bucketLen(p.w, 2, S); got != 0 {
		t.Fatal("add went into the emptied open bucket")
	}
	for now := p.now; p.w.Len() > 0; now += 7 {
		p.advance(now)
	}
	if p.w.forced != 0 {
		t.Fatalf("%d entries moved at a bucket start; all should have moved ahead", p.w.forced)
	}
}

// Remove and Reschedule work on entries that have moved down and on ones
// still waiting in the open bucket, in both directions.
func TestCascadeAheadRemoveReschedule(t *testing.T) {
	base := atBoundary(t0, level2)
	S := base + 2*level2
	p := newPair(t, Config{Start: base, CascadeBatch: 4})
	var hs []Handle
	for i := range 40 {
		hs = append(hs, p.add(S+int64(i%5)*300+int64(i%3)))
	}
	p.advance(base + level2) // opens, moves 4
	p.advance(base + level2) // moves 4 more
	moved, waiting := hs[:8], hs[8:]
	p.remove(moved[0])
	p.remove(waiting[0])
	p.reschedule(moved[1], S+5)          // moved -> into the open bucket's range
	p.reschedule(waiting[1], S+900)      // waiting -> the same range again
	p.reschedule(moved[2], base+level2)  // -> due now
	p.reschedule(waiting[2], S+level2+9) // -> past the open bucket
	p.reschedule(waiting[3], base+10)    // -> the past
	p.remove(moved[0])                   // stale
	for range 3 {
		p.advance(base + level2 + 1)
	}
	// Empty the open bucket by removals: it must leave the heap.
	for _, h := range waiting[4:] {
		p.remove(h)
	}
	for now := p.now; p.w.Len() > 0; now += 50 {
		p.advance(now)
	}
}

// A jump past the start of a partly moved bucket moves the rest at once,
// behind what already moved, and fires everything in order; so does a
// jump over several levels. A clock that steps back changes nothing.
func TestCascadeAheadClockJump(t *testing.T) {
	for _, jump := range []int64{0, 1, 300, 3 * level2, 40 * dayMs} {
		base := atBoundary(t0, level2)
		S := base + 2*level2
		p := newPair(t, Config{Start: base, CascadeBatch: 2})
		for i := range 30 {
			p.add(S + 10 + int64(i%3)) // into the first child bucket
			p.add(S + int64(i%7)*1000)
		}
		p.add(S + 5*level2)
		p.advance(base + level2) // opens, moves 2
		p.advance(base + level2)
		p.advance(base + level2 - 5000) // clock went back: nothing fires
		p.add(S + 11)
		p.advance(S + jump)
		if p.w.forced == 0 {
			t.Fatalf("jump %d: nothing was left to move at the start", jump)
		}
		for now := p.now; p.w.Len() > 0; now += 997 {
			p.advance(now)
		}
	}
}

// drive runs w like the Runner: it advances to the clock, keeps stepping
// at the same time while cascade work is pending, and when idle jumps
// the clock to the next wake-up, never further than step.
func drive(t *testing.T, w *Wheel, now, step int64, until func() bool) {
	t.Helper()
	fired := int64(0)
	last := int64(-1 << 63)
	for steps := 0; !until(); steps++ {
		w.Advance(now, func(_ uint64, due int64) {
			if due > now || due < last {
				t.Fatalf("due %d fired at %d after %d", due, now, last)
			}
			last = due
			fired++
		})
		if w.CascadePending() {
			continue
		}
		next, ok := w.wakeAt()
		if !ok {
			return
		}
		now = max(now+1, min(next, now+step))
	}
}

// Driven like the runner, a dense wheel never needs a cascade at a
// bucket's start: each Advance moves at most CascadeBatch entries ahead.
func TestCascadeAheadSteadyNoForced(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	w := New(Config{Start: t0})
	for i := range 200_000 {
		w.Add(uint64(i), t0+rng.Int64N(200_000)) // 200 s: crosses level-2 boundaries
	}
	drive(t, w, t0, 1, func() bool { return w.Len() == 0 })
	if w.forced != 0 {
		t.Fatalf("%d entries moved at a bucket start", w.forced)
	}
}

// An idle runner must wake when a distant dense cluster's bucket opens,
// not sleep until its start: the cluster moves down ahead of time.
func TestCascadeAheadWakesForDistantCluster(t *testing.T) {
	w := New(Config{Start: t0})
	at := t0 + 3*hourMs
	for i := range 50_000 {
		w.Add(uint64(i), at+int64(i%4000))
	}
	w.Add(1, t0+5) // something else to do first
	drive(t, w, t0, 1<<62, func() bool { return w.Len() == 0 })
	if w.forced != 0 {
		t.Fatalf("%d entries moved at a bucket start", w.forced)
	}
}

// CascadeBatch < 0 restores the one-step cascade at the bucket's start.
func TestCascadeAheadOff(t *testing.T) {
	base := atBoundary(t0, level2)
	p := newPair(t, Config{Start: base, CascadeBatch: -1})
	for i := range 100 {
		p.add(base + 2*level2 + int64(i))
	}
	p.advance(base + level2 + 100)
	if p.w.CascadePending() || bucketLen(p.w, 2, base+2*level2) != 100 {
		t.Fatal("moved ahead with CascadeBatch < 0")
	}
	for now := p.now; p.w.Len() > 0; now += 5000 {
		p.advance(now)
	}
	if p.w.forced == 0 {
		t.Fatal("no cascade at the start")
	}
}
