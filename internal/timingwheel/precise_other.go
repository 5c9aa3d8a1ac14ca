//go:build !linux

package timingwheel

import "time"

// preciseTimer exists on Linux only (precise_linux.go); elsewhere the
// runner sleeps on its time.Timer alone.
type preciseTimer struct{}

func newPreciseTimer() *preciseTimer { return nil }

func (*preciseTimer) arm(time.Duration) {}

func (*preciseTimer) close() {}
