package timingwheel

import (
	"math"
	"slices"
	"testing"
	"time"
)

const t0 = int64(1_700_000_000_000) // a realistic unix-ms start

type rec struct{ got []fired }

func (r *rec) fn(id uint64, due int64) { r.got = append(r.got, fired{id, due}) }

func (r *rec) take() []fired {
	g := r.got
	r.got = nil
	return g
}

func mustInv(t *testing.T, w *Wheel) {
	t.Helper()
	if err := checkInvariants(w); err != nil {
		t.Fatal(err)
	}
}

func TestEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, w *Wheel, r *rec)
	}{
		{"due in the past fires on next Advance, in due order", func(t *testing.T, w *Wheel, r *rec) {
			w.Advance(t0+1000, r.fn)
			w.Add(1, t0+500)
			w.Add(2, t0-5*dayMs)
			w.Add(3, math.MinInt64)
			w.Add(4, t0+1000)
			if nd, _ := w.NextDue(); nd != math.MinInt64 {
				t.Fatalf("NextDue = %d", nd)
			}
			w.Advance(t0+1000, r.fn)
			want := []fired{{3, math.MinInt64}, {2, t0 - 5*dayMs}, {1, t0 + 500}, {4, t0 + 1000}}
			if got := r.take(); !slices.Equal(got, want) {
				t.Fatalf("got %v want %v", got, want)
			}
		}},
		{"same due is FIFO across levels", func(t *testing.T, w *Wheel, r *rec) {
			due := t0 + 3*hourMs + 7
			// Added at decreasing distance, so they start in different
			// levels and meet in one bucket through cascades.
			w.Add(1, due)
			w.Advance(due-2*hourMs, r.fn)
			w.Add(2, due)
			w.Advance(due-100_000, r.fn)
			w.Add(3, due)
			w.Advance(due-300, r.fn)
			w.Add(4, due)
			w.Advance(due-1, r.fn)
			w.Add(5, due)
			w.Add(6, due-1) // earlier due, added last: fires first
			w.Advance(due, r.fn)
			want := []fired{{6, due - 1}, {1, due}, {2, due}, {3, due}, {4, due}, {5, due}}
			if got := r.take(); !slices.Equal(got, want) {
				t.Fatalf("got %v want %v", got, want)
			}
		}},
		{"many entries with one due", func(t *testing.T, w *Wheel, r *rec) {
			for i := range uint64(10_000) {
				w.Add(i, t0+5000)
			}
			w.Advance(t0+4999, r.fn)
			if len(r.got) != 0 {
				t.Fatal("fired early")
			}
			w.Advance(t0+5000, r.fn)
			got := r.take()
			if len(got) != 10_000 {
				t.Fatalf("fired %d", len(got))
			}
			for i, f := range got {
				if f.id != uint64(i) {
					t.Fatalf("position %d has id %d", i, f.id)
				}
			}
		}},
		{"remove of fired, removed, unknown and zero handles", func(t *testing.T, w *Wheel, r *rec) {
			h := w.Add(1, t0+10)
			h2 := w.Add(2, t0+20)
			w.Advance(t0+10, r.fn)
			if w.Remove(h) {
				t.Fatal("removed a fired entry")
			}
			if !w.Remove(h2) || w.Remove(h2) {
				t.Fatal("double remove")
			}
			h3 := w.Add(3, t0+30) // reuses h2's slot with a new generation
			if h3.index() != h2.index() || h3 == h2 {
				t.Fatalf("slot reuse: %x vs %x", h3, h2)
			}
			if w.Remove(h2) || w.Remove(0) || w.Remove(makeHandle(99, 1)) || w.Reschedule(h2, t0) {
				t.Fatal("stale or unknown handle accepted")
			}
			w.Advance(t0+30, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{1, t0 + 10}, {3, t0 + 30}}) {
				t.Fatalf("got %v", got)
			}
		}},
		{"remove inside fn prevents delivery", func(t *testing.T, w *Wheel, r *rec) {
			var hs []Handle
			for i := range uint64(4) {
				hs = append(hs, w.Add(i, t0+10))
			}
			far := w.Add(9, t0+1000)
			var removed []bool
			w.Advance(t0+2000, func(id uint64, due int64) {
				r.fn(id, due)
				if id == 0 {
					removed = append(removed, w.Remove(hs[0]), w.Remove(hs[2]), w.Remove(far))
				}
			})
			if !slices.Equal(removed, []bool{false, true, true}) {
				t.Fatalf("Remove results %v", removed)
			}
			if got := r.take(); !slices.Equal(got, []fired{{0, t0 + 10}, {1, t0 + 10}, {3, t0 + 10}}) {
				t.Fatalf("got %v", got)
			}
		}},
		{"add inside fn: due <= now waits for the next Advance", func(t *testing.T, w *Wheel, r *rec) {
			w.Add(1, t0+10)
			w.Add(2, t0+20)
			w.Advance(t0+50, func(id uint64, due int64) {
				r.fn(id, due)
				if id == 1 {
					w.Add(10, t0+5)  // past
					w.Add(11, t0+50) // due now
					w.Add(12, t0+51) // future: not fired by either call
				}
			})
			if got := r.take(); !slices.Equal(got, []fired{{1, t0 + 10}, {2, t0 + 20}}) {
				t.Fatalf("first Advance: %v", got)
			}
			mustInv(t, w)
			if nd, _ := w.NextDue(); nd != t0+5 {
				t.Fatalf("NextDue = %d", nd)
			}
			w.Advance(t0+50, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{10, t0 + 5}, {11, t0 + 50}}) {
				t.Fatalf("second Advance: %v", got)
			}
			w.Advance(t0+51, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{12, t0 + 51}}) {
				t.Fatalf("third Advance: %v", got)
			}
		}},
		{"self re-adding callback does not loop", func(t *testing.T, w *Wheel, r *rec) {
			w.Add(1, t0)
			calls := 0
			w.Advance(t0+10, func(id uint64, due int64) {
				calls++
				w.Add(id, due) // would loop forever if delivered in the same call
			})
			if calls != 1 || w.Len() != 1 {
				t.Fatalf("calls %d len %d", calls, w.Len())
			}
		}},
		{"nested Advance panics and leaves the wheel usable", func(t *testing.T, w *Wheel, r *rec) {
			w.Add(1, t0+1)
			w.Add(2, t0+1)
			w.Add(3, t0+2)
			func() {
				defer func() {
					if recover() == nil {
						t.Fatal("no panic")
					}
				}()
				w.Advance(t0+5, func(uint64, int64) { w.Advance(t0+6, nil) })
			}()
			mustInv(t, w)
			w.Advance(t0+5, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{2, t0 + 1}, {3, t0 + 2}}) {
				t.Fatalf("after panic: %v", got)
			}
		}},
		{"delays crossing every level", func(t *testing.T, w *Wheel, r *rec) {
			var want []fired
			for lv := range 6 {
				d := int64(1) << (levelBits * lv)
				for _, delay := range []int64{d - 1, d, d + 1, 3*d + 5} {
					due := t0 + delay
					w.Add(uint64(len(want)), due)
					want = append(want, fired{uint64(len(want)), due})
				}
			}
			slices.SortStableFunc(want, func(a, b fired) int { return int(min(max(a.due-b.due, -1), 1)) })
			if len(w.levels) < 5 {
				t.Fatalf("only %d levels created", len(w.levels))
			}
			// Step to each due and one before it: nothing early, nothing late.
			for _, f := range want {
				w.Advance(f.due-1, r.fn)
				for _, g := range r.got {
					if g.due > f.due-1 {
						t.Fatalf("early: %v at %d", g, f.due-1)
					}
				}
				w.Advance(f.due, r.fn)
			}
			if got := r.take(); !slices.Equal(got, want) {
				t.Fatalf("got %v\nwant %v", got, want)
			}
		}},
		{"30-day and 10-year delays, jumping", func(t *testing.T, w *Wheel, r *rec) {
			d30 := t0 + 30*dayMs + 123
			d10y := t0 + 10*yearMs + 456
			w.Add(1, d10y)
			w.Add(2, d30)
			if nd, _ := w.NextDue(); nd != d30 {
				t.Fatalf("NextDue %d", nd)
			}
			w.Advance(d30-1, r.fn)
			w.Advance(d30, r.fn)
			w.Advance(d10y-1, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{2, d30}}) {
				t.Fatalf("got %v", got)
			}
			if nd, _ := w.NextDue(); nd != d10y {
				t.Fatalf("NextDue %d", nd)
			}
			w.Advance(d10y, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{1, d10y}}) {
				t.Fatalf("got %v", got)
			}
		}},
		{"clock standing still", func(t *testing.T, w *Wheel, r *rec) {
			w.Add(1, t0+1)
			for range 1000 {
				w.Advance(t0, r.fn)
			}
			if len(r.got) != 0 || w.Len() != 1 {
				t.Fatal("fired while standing still")
			}
		}},
		{"jumping forward by hours fires everything in order", func(t *testing.T, w *Wheel, r *rec) {
			var want []fired
			for i := range int64(2000) {
				due := t0 + (i*7919)%(5*hourMs)
				w.Add(uint64(i), due)
				want = append(want, fired{uint64(i), due})
			}
			slices.SortStableFunc(want, func(a, b fired) int { return int(min(max(a.due-b.due, -1), 1)) })
			w.Advance(t0+5*hourMs, r.fn)
			if got := r.take(); !slices.Equal(got, want) {
				t.Fatal("jump delivered wrong sequence")
			}
			if w.Len() != 0 {
				t.Fatal("left entries")
			}
		}},
		{"clock going backwards", func(t *testing.T, w *Wheel, r *rec) {
			w.Add(1, t0+100)
			w.Add(2, t0+200)
			w.Advance(t0+150, r.fn)
			w.Advance(t0+50, r.fn) // back: nothing new is due
			w.Add(3, t0+120)       // past relative to the wheel, future relative to now
			w.Add(4, t0+40)
			w.Advance(t0+60, r.fn) // only 4 is due at 60
			mustInv(t, w)
			if got := r.take(); !slices.Equal(got, []fired{{1, t0 + 100}, {4, t0 + 40}}) {
				t.Fatalf("got %v", got)
			}
			w.Advance(t0+200, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{3, t0 + 120}, {2, t0 + 200}}) {
				t.Fatalf("got %v", got)
			}
		}},
		{"reschedule moves and keeps the handle", func(t *testing.T, w *Wheel, r *rec) {
			h := w.Add(1, t0+10*dayMs)
			w.Add(2, t0+50)
			if !w.Reschedule(h, t0+20) {
				t.Fatal("reschedule failed")
			}
			w.Advance(t0+60, r.fn)
			if got := r.take(); !slices.Equal(got, []fired{{1, t0 + 20}, {2, t0 + 50}}) {
				t.Fatalf("got %v", got)
			}
		}},
		{"limit resumes in order", func(t *testing.T, w *Wheel, r *rec) {
			for i := range uint64(10) {
				w.Add(i, t0+int64(i%3))
			}
			var all []fired
			for w.AdvanceLimit(t0+5, 4, r.fn) {
				mustInv(t, w)
				all = append(all, r.take()...)
			}
			all = append(all, r.take()...)
			want := []fired{{0, t0}, {3, t0}, {6, t0}, {9, t0}, {1, t0 + 1}, {4, t0 + 1}, {7, t0 + 1}, {2, t0 + 2}, {5, t0 + 2}, {8, t0 + 2}}
			if !slices.Equal(all, want) {
				t.Fatalf("got %v", all)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := New(Config{Start: t0})
			r := &rec{}
			tc.run(t, w, r)
			mustInv(t, w)
		})
	}
}

func TestCoarseTickNeverEarly(t *testing.T) {
	w := New(Config{Tick: 100 * time.Millisecond, Start: t0})
	r := &rec{}
	for i := range int64(50) {
		w.Add(uint64(i), t0+i*7)
	}
	for now := t0; now < t0+400; now++ {
		w.Advance(now, func(id uint64, due int64) {
			if due != now {
				t.Fatalf("due %d delivered at %d", due, now)
			}
			r.fn(id, due)
		})
		if nd, ok := w.NextDue(); ok {
			if wk, _ := w.wakeAt(); wk > nd || nd <= now {
				t.Fatalf("now %d NextDue %d wakeAt %d", now, nd, wk)
			}
		}
	}
	if len(r.got) != 50 {
		t.Fatalf("fired %d", len(r.got))
	}
}

func TestConfigDefaults(t *testing.T) {
	var w = New(Config{})
	if w.tick != 1 || w.cur != 0 {
		t.Fatalf("tick %d cur %d", w.tick, w.cur)
	}
	if _, ok := w.NextDue(); ok || w.Len() != 0 {
		t.Fatal("empty wheel has a due")
	}
	w.Advance(t0, nil) // big jump on an empty wheel is O(1)
	if w.cur != t0 {
		t.Fatalf("cur %d", w.cur)
	}
	if New(Config{Start: -5}).cur != 0 || New(Config{Tick: time.Microsecond}).tick != 1 {
		t.Fatal("bad clamping")
	}
}

// A jump of years over a sparse wheel must visit buckets, not ticks.
func TestJumpIsCheap(t *testing.T) {
	w := New(Config{Start: t0})
	for i := range int64(100) {
		w.Add(uint64(i), t0+i*37*dayMs)
	}
	// 96k Advance calls over 11 years: a wheel that stepped through empty
	// ticks would need 3.5e11 steps and time out.
	for now := t0; now <= t0+11*yearMs; now += hourMs {
		w.Advance(now, nil)
	}
	if w.Len() != 0 {
		t.Fatalf("left %d", w.Len())
	}
}
