package bench

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Progress shows how far a benchmark is on stderr: a redrawn bar when
// stderr is a terminal, a plain line every PlainEvery otherwise. A nil
// *Progress does nothing. It is safe for concurrent use.
type Progress struct {
	w     io.Writer
	tty   bool
	every time.Duration

	mu         sync.Mutex
	label      string
	phase      string
	phaseStart time.Time
	total      atomic.Int64
	done       atomic.Int64

	stop chan struct{}
	wg   sync.WaitGroup
}

// PlainEvery is the period of the plain (non-terminal) progress line.
const PlainEvery = 10 * time.Second

// Progress modes for NewProgress.
const (
	ProgressAuto  = "auto"  // bar on a terminal, plain lines otherwise
	ProgressBar   = "bar"   // always the bar
	ProgressPlain = "plain" // always plain lines
	ProgressOff   = "off"
)

// IsTerminal reports whether f is a character device (a terminal).
func IsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// NewProgress starts a progress display on w; mode is one of the
// Progress* constants. Close stops it.
func NewProgress(w io.Writer, mode string) *Progress {
	if mode == ProgressOff || w == nil {
		return nil
	}
	tty := mode == ProgressBar
	if mode == ProgressAuto {
		if f, ok := w.(*os.File); ok {
			tty = IsTerminal(f)
		}
	}
	p := &Progress{w: w, tty: tty, every: PlainEvery, stop: make(chan struct{})}
	if tty {
		p.every = 200 * time.Millisecond
	}
	p.wg.Add(1)
	go p.loop()
	return p
}

// Start names what runs now (e.g. "send · embedded · run 1/3").
func (p *Progress) Start(label string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
	p.Phase("", 0)
}

// Phase starts a phase of the current run with total units of work.
func (p *Progress) Phase(name string, total int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.phase, p.phaseStart = name, time.Now()
	p.total.Store(total)
	p.done.Store(0)
	p.mu.Unlock()
}

// Add counts n units of work done.
func (p *Progress) Add(n int64) {
	if p == nil {
		return
	}
	p.done.Add(n)
}

// Logf prints a line between progress updates.
func (p *Progress) Logf(format string, args ...any) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// Close stops the display and clears the bar.
func (p *Progress) Close() {
	if p == nil {
		return
	}
	close(p.stop)
	p.wg.Wait()
	if p.tty {
		fmt.Fprint(p.w, "\r\033[K")
	}
}

func (p *Progress) loop() {
	defer p.wg.Done()
	t := time.NewTicker(p.every)
	defer t.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-t.C:
			p.mu.Lock()
			line := p.line()
			if p.tty {
				fmt.Fprint(p.w, "\r\033[K"+line)
			} else if line != "" {
				fmt.Fprintln(p.w, line)
			}
			p.mu.Unlock()
		}
	}
}

// line renders the current state; the caller holds p.mu.
func (p *Progress) line() string {
	if p.label == "" {
		return ""
	}
	done, total := p.done.Load(), p.total.Load()
	el := time.Since(p.phaseStart)
	rate := float64(done) / max(el.Seconds(), 1e-9)
	frac := 0.0
	if total > 0 {
		frac = max(0, min(float64(done)/float64(total), 1))
	}
	const width = 24
	bar := strings.Repeat("#", int(frac*width)) + strings.Repeat(".", width-int(frac*width))
	return fmt.Sprintf("[%s] %3.0f%% %s · %s %d/%d (%.0f/s, %s)", bar, frac*100, p.label, p.phase, done, total, rate, el.Truncate(100*time.Millisecond))
}
