//go:build !linux

package timingwheel

import "time"

var epoch = time.Now()

// threadCPU falls back to wall time outside Linux.
func threadCPU() time.Duration { return time.Since(epoch) }

func lockThread() func() { return func() {} }
