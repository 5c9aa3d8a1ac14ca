package bench

import (
	"context"
	"sync"
	"time"
)

// fakeTarget is an in-memory queue for testing the runner. Its knobs make
// it misbehave on purpose so the tests can check that the checker sees it.
type fakeTarget struct {
	drop    func(seq uint64) bool // never deliver
	dup     func(seq uint64) bool // deliver twice
	early   func(seq uint64) bool // deliver earlyBy before due
	earlyBy time.Duration

	mu      sync.Mutex
	held    bool // holdingFake: deliver nothing
	pending []Msg
	closed  bool
	work    int64 // messages sent + messages taken: the fake's "CPU"
}

// fakeCPUPerMsg is the CPU the fake reports per message sent and per
// message handed out: a correct run costs 2× this per message.
const fakeCPUPerMsg = 10 * time.Microsecond

// ServerCPU implements CPUReporter.
func (f *fakeTarget) ServerCPU() (time.Duration, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.work) * fakeCPUPerMsg, "fake", nil
}

func (f *fakeTarget) Send(_ context.Context, msgs []Msg) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range msgs {
		f.work++
		if f.drop != nil && f.drop(m.Seq) {
			continue
		}
		f.pending = append(f.pending, m)
	}
	return nil
}

func (f *fakeTarget) take(max int) []Msg {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.held {
		return nil
	}
	now := time.Now()
	var out []Msg
	keep := f.pending[:0]
	for _, m := range f.pending {
		due := m.DeliverAt
		if f.early != nil && f.early(m.Seq) {
			due = due.Add(-f.earlyBy)
		}
		if len(out) < max && !due.After(now) {
			out = append(out, m)
		} else {
			keep = append(keep, m)
		}
	}
	f.pending = keep
	f.work += int64(len(out))
	return out
}

func (f *fakeTarget) Consume(ctx context.Context, o ConsumeOptions, handle func([]Delivery)) error {
	var wg sync.WaitGroup
	for range o.Consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ms := f.take(o.Max)
				if len(ms) == 0 {
					time.Sleep(200 * time.Microsecond)
					continue
				}
				now := time.Now()
				var ds []Delivery
				for _, m := range ms {
					ds = append(ds, Delivery{Seq: m.Seq, At: now})
					if f.dup != nil && f.dup(m.Seq) {
						ds = append(ds, Delivery{Seq: m.Seq, At: now})
					}
				}
				handle(ds)
			}
		}()
	}
	wg.Wait()
	return nil
}

func (f *fakeTarget) Close() error {
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	return nil
}

func (f *fakeTarget) RSS() (int64, string, error) { return 42 << 20, "fake", nil }

func (f *fakeTarget) Restart(context.Context) (time.Time, error) { return time.Now(), nil }

// holdingFake is a fakeTarget that implements Holder.
type holdingFake struct {
	*fakeTarget
	holds int // calls of Hold(true)
}

func (h *holdingFake) Hold(_ context.Context, held bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.held = held
	if held {
		h.holds++
	}
	return nil
}

// fakeFactory opens a fresh fakeTarget (configured by mk) per run.
func fakeFactory(name string, mk func() *fakeTarget) Factory {
	return Factory{Name: name, Open: func(context.Context, OpenOptions) (Target, error) { return mk(), nil }}
}

// syncBuf is a bytes.Buffer safe for concurrent use.
type syncBuf struct {
	mu sync.Mutex
	b  []byte
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b = append(s.b, p...)
	return len(p), nil
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return string(s.b)
}
