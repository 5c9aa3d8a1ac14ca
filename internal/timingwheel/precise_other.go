//go:build !linux

package timingwheel

import "time"

// preciseTimer exists on Linux only (precise_linux.go); elsewhere the
// runner sleeps on a time.Timer.
type preciseTimer struct{ c chan struct{} }

func newPreciseTimer() *preciseTimer { return nil }

func (p *preciseTimer) reset(time.Duration) {}

func (p *preciseTimer) close() {}
