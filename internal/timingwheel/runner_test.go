package timingwheel

import (
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// Runner tests run in a synctest bubble: time.Now and time.Timer are
// fake and advance only when every goroutine is blocked, so "fired at
// exactly the due millisecond" is a deterministic assertion, not a
// wall-clock one. synctest.Test also fails if the runner's goroutine
// outlives the test.

type firing struct {
	id  uint64
	due int64
	at  int64 // clock ms when fire ran
}

type sink struct {
	mu  sync.Mutex
	got []firing
	clk Clock
}

func (s *sink) fire(id uint64, due int64) {
	s.mu.Lock()
	s.got = append(s.got, firing{id, due, s.clk.Now().UnixMilli()})
	s.mu.Unlock()
}

func (s *sink) take() []firing {
	s.mu.Lock()
	defer s.mu.Unlock()
	g := s.got
	s.got = nil
	return g
}

func nowMs() int64 { return time.Now().UnixMilli() }

func TestRunnerFiresOnTime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{clk: systemClock{}}
		r := NewRunner(RunnerConfig{}, s.fire)
		r.Start()
		defer r.Stop()
		base := nowMs()
		r.Add(1, base+250)
		r.Add(2, base+100)
		r.Add(3, base+100)
		r.Add(4, base-10) // already due
		time.Sleep(99 * time.Millisecond)
		synctest.Wait()
		if got := s.take(); !slices.Equal(got, []firing{{4, base - 10, base}}) {
			t.Fatalf("before 100ms: %v", got)
		}
		time.Sleep(time.Second)
		synctest.Wait()
		want := []firing{{2, base + 100, base + 100}, {3, base + 100, base + 100}, {1, base + 250, base + 250}}
		if got := s.take(); !slices.Equal(got, want) {
			t.Fatalf("got %v want %v", got, want)
		}
		if r.Len() != 0 {
			t.Fatalf("Len %d", r.Len())
		}
	})
}

func TestRunnerEarlierAddWakes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{clk: systemClock{}}
		r := NewRunner(RunnerConfig{}, s.fire)
		r.Start()
		defer r.Stop()
		base := nowMs()
		r.Add(1, base+10*hourMs)
		time.Sleep(time.Second) // the runner now sleeps towards +10h
		synctest.Wait()
		r.Add(2, base+1500)
		time.Sleep(time.Second)
		synctest.Wait()
		if got := s.take(); !slices.Equal(got, []firing{{2, base + 1500, base + 1500}}) {
			t.Fatalf("got %v", got)
		}
		if nd, ok := r.NextDue(); !ok || nd != base+10*hourMs {
			t.Fatalf("NextDue %d %v", nd, ok)
		}
	})
}

func TestRunnerRemoveAndReschedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{clk: systemClock{}}
		r := NewRunner(RunnerConfig{}, s.fire)
		r.Start()
		defer r.Stop()
		base := nowMs()
		h1 := r.Add(1, base+100)
		h2 := r.Add(2, base+200)
		h3 := r.Add(3, base+5000)
		if !r.Remove(h1) {
			t.Fatal("remove pending")
		}
		if !r.Reschedule(h3, base+50) {
			t.Fatal("reschedule pending")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if r.Remove(h2) || r.Remove(h1) || r.Reschedule(h3, base) {
			t.Fatal("stale handle accepted after firing")
		}
		want := []firing{{3, base + 50, base + 50}, {2, base + 200, base + 200}}
		if got := s.take(); !slices.Equal(got, want) {
			t.Fatalf("got %v", got)
		}
	})
}

func TestRunnerCallbackReentrant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var r *Runner
		var mu sync.Mutex
		var at []int64
		r = NewRunner(RunnerConfig{}, func(id uint64, due int64) {
			mu.Lock()
			at = append(at, nowMs())
			n := len(at)
			mu.Unlock()
			if n < 3 {
				r.Add(id, due+1000) // re-arm from inside the callback
			}
		})
		r.Start()
		defer r.Stop()
		base := nowMs()
		r.Add(7, base+10)
		time.Sleep(10 * time.Second)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if !slices.Equal(at, []int64{base + 10, base + 1010, base + 2010}) {
			t.Fatalf("fired at %v", at)
		}
	})
}

type offsetClock struct{ d time.Duration }

func (c offsetClock) Now() time.Time { return time.Now().Add(c.d) }

func TestRunnerInjectedClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := offsetClock{d: 3 * time.Hour}
		s := &sink{clk: clk}
		r := NewRunner(RunnerConfig{Clock: clk, Tick: 10 * time.Millisecond}, s.fire)
		r.Start()
		defer r.Stop()
		base := clk.Now().UnixMilli()
		r.Add(1, base+3)   // inside the first 10ms bucket
		r.Add(2, base+123) // mid-bucket due with a coarse tick
		time.Sleep(time.Second)
		synctest.Wait()
		want := []firing{{1, base + 3, base + 3}, {2, base + 123, base + 123}}
		if got := s.take(); !slices.Equal(got, want) {
			t.Fatalf("got %v want %v", got, want)
		}
	})
}

func TestRunnerBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{clk: systemClock{}}
		r := NewRunner(RunnerConfig{Batch: 7}, s.fire)
		base := nowMs()
		for i := range uint64(1000) {
			r.Add(i, base+int64(i%10))
		}
		r.Start()
		defer r.Stop()
		time.Sleep(time.Second)
		synctest.Wait()
		got := s.take()
		if len(got) != 1000 {
			t.Fatalf("fired %d", len(got))
		}
		for i := 1; i < len(got); i++ {
			a, b := got[i-1], got[i]
			if a.due > b.due || a.due == b.due && a.id > b.id {
				t.Fatalf("out of order at %d: %v %v", i, a, b)
			}
		}
	})
}

func TestRunnerStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := &sink{clk: systemClock{}}
		r := NewRunner(RunnerConfig{}, s.fire)
		r.Stop() // before Start: no goroutine, returns
		r.Start()
		if r.started {
			t.Fatal("Start after Stop started the loop")
		}
		r2 := NewRunner(RunnerConfig{}, s.fire)
		r2.Start()
		r2.Start()
		r2.Add(1, nowMs()+hourMs)
		time.Sleep(time.Second)
		r2.Stop()
		r2.Stop()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if got := s.take(); len(got) != 0 || r2.Len() != 1 {
			t.Fatalf("fired after Stop: %v", got)
		}
		// The bubble ends only if the loop goroutine exited.
	})
}

// A smoke test on the real clock: only "eventually, never early".
func TestRunnerRealClock(t *testing.T) {
	done := make(chan firing, 1)
	r := NewRunner(RunnerConfig{}, func(id uint64, due int64) { done <- firing{id, due, nowMs()} })
	r.Start()
	defer r.Stop()
	due := nowMs() + 20
	r.Add(1, due)
	select {
	case f := <-done:
		if f.at < due {
			t.Fatalf("fired early: at %d due %d", f.at, due)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("did not fire")
	}
}

// steppingClock is the (bubble's) real clock plus an offset a test steps.
type steppingClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *steppingClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *steppingClock) step(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func TestRunnerMaxSleepNoticesWallClockSteps(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &steppingClock{}
		var mu sync.Mutex
		var got []uint64
		r := NewRunner(RunnerConfig{Clock: clk, MaxSleep: time.Second}, func(id uint64, due int64) {
			mu.Lock()
			got = append(got, id)
			mu.Unlock()
		})
		r.Start()
		defer r.Stop()
		r.Add(1, clk.Now().Add(time.Hour).UnixMilli())
		clk.step(-time.Hour) // the wall clock steps back: due is now 2h away
		time.Sleep(10 * time.Second)
		clk.step(2 * time.Hour) // and forward past the due time
		time.Sleep(time.Second + time.Millisecond)
		synctest.Wait()
		mu.Lock()
		defer mu.Unlock()
		if len(got) != 1 {
			t.Fatalf("fired %v within MaxSleep of the step forward, want [1]", got)
		}
	})
}
