// Package history records what clients of a queue did and saw, and checks
// the record against delayq's guarantees in the vocabulary of Jepsen's
// total-queue checker: lost, unexpected, duplicated, recovered, early,
// resurrected, plus release lateness split into steady state and "came due
// while the server was down".
//
// Every operation is recorded as an invoke and a completion: ok (it
// happened), fail (it certainly did not), or info (unknown: the connection
// broke or the server died before answering). Times are offsets on the
// recorder's monotonic clock, so wall-clock steps cannot fake an early
// delivery.
package history

import (
	"sync"
	"time"
)

// Kind is an operation kind.
type Kind string

// Operation kinds.
const (
	Send   Kind = "send"
	Lease  Kind = "lease" // one op per delivered message
	Ack    Kind = "ack"
	Nack   Kind = "nack"
	Cancel Kind = "cancel"
)

// Outcome is how an operation completed.
type Outcome string

// Outcomes.
const (
	OK   Outcome = "ok"
	Fail Outcome = "fail"
	Info Outcome = "info"
)

// Op is one completed operation.
type Op struct {
	Kind    Kind
	ID      string
	Outcome Outcome
	// Invoke and Complete are offsets on the recorder's monotonic clock.
	Invoke   time.Duration
	Complete time.Duration
	// Delay is the delay a send asked for (client-side never-early check).
	Delay time.Duration
	// DueAt is the due time the server reported (sends and deliveries).
	DueAt time.Time
	// At is the server's wall time of a delivery, when the client knows it;
	// zero otherwise. Deliveries are also judged by the client clock.
	At time.Time
}

// Recorder collects operations from many goroutines. The zero value is
// not usable; call NewRecorder.
type Recorder struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
	down  []Window
}

// Window is a span of server downtime, on the recorder's clock.
type Window struct{ From, To time.Duration }

// NewRecorder starts a recorder; its clock starts now.
func NewRecorder() *Recorder { return &Recorder{start: time.Now()} }

// Wall maps an offset on the recorder's clock to wall time (to compare
// with times the server reports).
func (r *Recorder) Wall(d time.Duration) time.Time { return r.start.Add(d).Round(0) }

// Now is the recorder's monotonic clock.
func (r *Recorder) Now() time.Duration { return time.Since(r.start) }

// Invoke starts an operation; finish it with one of Pending's methods.
func (r *Recorder) Invoke(kind Kind, id string) *Pending {
	return &Pending{r: r, op: Op{Kind: kind, ID: id, Invoke: r.Now()}}
}

// Down records that the server was down (killed) from..to.
func (r *Recorder) Down(from, to time.Duration) {
	r.mu.Lock()
	r.down = append(r.down, Window{from, to})
	r.mu.Unlock()
}

// Ops returns a copy of the history.
func (r *Recorder) Ops() []Op {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Op(nil), r.ops...)
}

// Downtime returns the recorded down windows.
func (r *Recorder) Downtime() []Window {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Window(nil), r.down...)
}

// Pending is an invoked operation.
type Pending struct {
	r  *Recorder
	op Op
}

// WithDelay notes the delay a send asked for.
func (p *Pending) WithDelay(d time.Duration) *Pending { p.op.Delay = d; return p }

// WithDue notes the due time the server reported.
func (p *Pending) WithDue(t time.Time) *Pending { p.op.DueAt = t; return p }

// WithAt notes the server's time of a delivery.
func (p *Pending) WithAt(t time.Time) *Pending { p.op.At = t; return p }

// OK completes the operation as done.
func (p *Pending) OK() { p.finish(OK) }

// Fail completes it as certainly not done.
func (p *Pending) Fail() { p.finish(Fail) }

// Info completes it as unknown.
func (p *Pending) Info() { p.finish(Info) }

func (p *Pending) finish(o Outcome) {
	p.op.Outcome = o
	p.op.Complete = p.r.Now()
	p.r.mu.Lock()
	p.r.ops = append(p.r.ops, p.op)
	p.r.mu.Unlock()
}

// Record appends a finished op as is (for deliveries, whose invoke is the
// lease call's and whose completion is when the message arrived).
func (r *Recorder) Record(op Op) {
	r.mu.Lock()
	r.ops = append(r.ops, op)
	r.mu.Unlock()
}
