// Package clock is the time seam: core code reads time only through a Clock,
// so tests drive it with a simulated one.
package clock

import (
	"sync"
	"time"
)

// Clock tells the time. Implementations are safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// Real is the system clock. Its readings carry Go's monotonic component, so
// durations between them are immune to wall-clock jumps.
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Sim is a simulated clock that moves only when told to.
type Sim struct {
	mu  sync.Mutex
	now time.Time
}

// NewSim returns a simulated clock reading start.
func NewSim(start time.Time) *Sim { return &Sim{now: start} }

// Now returns the simulated time.
func (s *Sim) Now() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.now
}

// Advance moves the clock by d (which may be negative, to test jumps back).
func (s *Sim) Advance(d time.Duration) {
	s.mu.Lock()
	s.now = s.now.Add(d)
	s.mu.Unlock()
}

// Set moves the clock to t.
func (s *Sim) Set(t time.Time) {
	s.mu.Lock()
	s.now = t
	s.mu.Unlock()
}

// UnixMilli returns t in Unix milliseconds.
func UnixMilli(c Clock) int64 { return c.Now().UnixMilli() }

// Offset reads Base shifted by By: a server whose clock is off, for tests
// of several servers sharing one store. Base defaults to Real.
type Offset struct {
	Base Clock
	By   time.Duration
}

// Now returns Base's time plus By. A Real base keeps its monotonic
// reading, so durations between readings stay exact.
func (o Offset) Now() time.Time {
	if o.Base == nil {
		return time.Now().Add(o.By)
	}
	return o.Base.Now().Add(o.By)
}
