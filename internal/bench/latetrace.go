package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/trace"
	"sync"
	"time"
)

// LateTrace captures a runtime execution trace around the first message
// released at least Threshold late, with the runtime's flight recorder:
// the last few seconds of scheduling, GC, syscalls and goroutine blocking
// before the late receive, and a little after it. With an in-process
// target (embedded, memory) the trace shows the wheel, promotion, the
// long-poll handoff and the consumer side by side, which a percentile
// cannot; with an HTTP target it shows the client process only.
//
//	go tool trace FILE
type LateTrace struct {
	Threshold time.Duration
	Path      string

	fr    *trace.FlightRecorder
	once  sync.Once
	done  chan struct{}
	mu    sync.Mutex
	err   error
	found string // what triggered it
}

// lateTraceAfter is how long the recorder keeps running after the late
// receive, so the trace also shows what the process did right after.
const lateTraceAfter = 100 * time.Millisecond

// StartLateTrace starts the flight recorder. Stop must be called.
func StartLateTrace(threshold time.Duration, path string) (*LateTrace, error) {
	if threshold <= 0 {
		return nil, fmt.Errorf("--trace-late must be > 0")
	}
	// Fail now, not after the run, if the trace cannot be written there.
	if fi, err := os.Stat(filepath.Dir(path)); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("--trace %s: no such directory %s", path, filepath.Dir(path))
	}
	lt := &LateTrace{Threshold: threshold, Path: path, done: make(chan struct{})}
	lt.fr = trace.NewFlightRecorder(trace.FlightRecorderConfig{MinAge: 2 * time.Second, MaxBytes: 64 << 20})
	if err := lt.fr.Start(); err != nil {
		return nil, fmt.Errorf("start the flight recorder: %w", err)
	}
	return lt, nil
}

// late is called by a Checker for each first receive; the first one at
// least Threshold late writes the trace (once per LateTrace).
func (lt *LateTrace) late(seq uint64, due, at time.Time) {
	if lt == nil || at.Sub(due) < lt.Threshold {
		return
	}
	lt.once.Do(func() {
		go func() {
			defer close(lt.done)
			time.Sleep(lateTraceAfter)
			err := lt.write()
			lt.mu.Lock()
			lt.err = err
			lt.found = fmt.Sprintf("message %d due %s received %s (%v late)", seq, due.Format("15:04:05.000000"), at.Format("15:04:05.000000"), at.Sub(due))
			lt.mu.Unlock()
		}()
	})
}

func (lt *LateTrace) write() error {
	f, err := os.Create(lt.Path)
	if err != nil {
		return err
	}
	if _, err := lt.fr.WriteTo(f); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// Stop stops the recorder, waiting for a trace being written, and says
// what was captured.
func (lt *LateTrace) Stop() (string, error) {
	triggered := false
	lt.once.Do(func() { close(lt.done) }) // no late message: nothing to wait for
	<-lt.done
	lt.fr.Stop()
	lt.mu.Lock()
	defer lt.mu.Unlock()
	if lt.found != "" {
		triggered = true
	}
	if lt.err != nil {
		return "", fmt.Errorf("write trace %s: %w", lt.Path, lt.err)
	}
	if !triggered {
		return fmt.Sprintf("no message was %v or more late: no trace written", lt.Threshold), nil
	}
	return fmt.Sprintf("trace of %s written to %s (go tool trace %s)", lt.found, lt.Path, lt.Path), nil
}
