package engine

import (
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// gateTimers records Set calls; the first Set of gated blocks until gate
// is closed, to hold an arm in the middle of setting its timer.
type gateTimers struct {
	gated   int64
	entered chan struct{}
	gate    chan struct{}

	mu   sync.Mutex
	last map[uint64]int64
}

func (g *gateTimers) Set(id uint64, due int64) {
	if due == g.gated {
		close(g.entered)
		<-g.gate
	}
	g.mu.Lock()
	g.last[id] = due
	g.mu.Unlock()
}

func (g *gateTimers) Stop() {}

// TestArmKeepsEarliestUnderConcurrentArms: two arms of one entry race; the
// one for the later due is held inside its timer Set while the one for
// the earlier due runs. The timer must end at the earlier due, as the
// dispatcher's bookkeeping says: before the fix, the late Set landed last
// and moved the timer past the earlier due, while the bookkeeping still
// said "armed earlier" and so swallowed every later arm — a message due
// in a second waited for the one due in an hour.
func TestArmKeepsEarliestUnderConcurrentArms(t *testing.T) {
	const id, early, late = 7, 1_000, 3_600_000
	g := &gateTimers{gated: late, entered: make(chan struct{}), gate: make(chan struct{}), last: map[uint64]int64{}}
	d := &dispatcher{tm: g, armed: map[uint64]int64{}}

	doneLate, doneEarly := make(chan struct{}), make(chan struct{})
	go func() { defer close(doneLate); d.arm(id, late) }()
	<-g.entered // the late arm is inside its Set
	go func() { defer close(doneEarly); d.arm(id, early) }()
	// Let the early arm go as far as it can: to its end, or until it
	// waits for the late one (blocked on the dispatcher's lock).
	waitDoneOrBlocked(t, doneEarly, "(*dispatcher).arm")
	close(g.gate)
	<-doneLate
	<-doneEarly

	g.mu.Lock()
	got := g.last[id]
	g.mu.Unlock()
	if got != early {
		t.Fatalf("timer set to %d after concurrent arms for %d and %d, want %d", got, late, early, early)
	}
	if d.armed[id] != early {
		t.Fatalf("armed = %d, want %d", d.armed[id], early)
	}
}

// waitDoneOrBlocked waits until done is closed or a goroutine is blocked
// on a sync.Mutex inside fn.
func waitDoneOrBlocked(t *testing.T, done <-chan struct{}, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return
		default:
		}
		for _, gr := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(gr, "sync.(*Mutex).Lock") && strings.Contains(gr, fn) {
				return
			}
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("neither done nor blocked in %s within 10s", fn)
}
