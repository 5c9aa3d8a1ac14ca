//go:build !linux

package timingwheel

import "time"

// preciseTimer exists on Linux only (precise_linux.go); elsewhere the
// runner sleeps on a time.Timer.
type preciseTimer struct{}

func newPreciseTimer() *preciseTimer { return nil }

func (*preciseTimer) arm(time.Duration) {}

func (*preciseTimer) disarm() {}

func (*preciseTimer) wait() {}

func (*preciseTimer) close() {}
