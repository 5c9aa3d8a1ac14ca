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
