package history

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Options tune the checker.
type Options struct {
	// Dead holds ids found in dead-letter lists after the final drain:
	// they were delivered (to the dead-letter list), so they are not lost.
	Dead map[string]bool
	// DupBound is the number of duplicate deliveries the run's faults
	// allow (leases out at each kill, acks that ended info, expiries by
	// design). With no faults it is 0.
	DupBound int
	// Slack is allowed client-clock imprecision for the client-side early
	// check (the server rounds due times up to whole ms). Default 0.
	Slack time.Duration
	// DownGrace, when positive, bounds how late a message that came due
	// while the server was down may be delivered: its first delivery must
	// arrive by the end of that down window (restart ready) + DownGrace.
	// Offenders are listed in Result.SlowAfterRestart.
	DownGrace time.Duration
}

// Result is the checker's verdict.
type Result struct {
	Sends, Acked, InfoSends int
	Delivered               int // distinct ids delivered
	Lost                    []string
	Unexpected              []string
	Duplicated              int
	DupBound                int
	Recovered               int // delivered ids whose every send ended info
	Early                   []string
	// EarlyClient is the part of Early that the client's clock shows
	// (received before send invoke + delay); the rest is early by the
	// server's reported times only.
	EarlyClient              []string
	Resurrected              []string
	Steady, CameDueWhileDown Lateness
	// SlowAfterRestart lists messages that came due while the server was
	// down and were first delivered later than the window's end plus
	// Options.DownGrace (only with DownGrace set).
	SlowAfterRestart []string

	delivered []string // ids delivered at least once
}

// LostSplit classifies lost ids per writer as in Jepsen's queue checker:
// prefix (before the writer's first delivered value), postfix (after its
// last) or middle. parse maps an id to its writer and sequence number;
// ids it cannot parse count as middle.
func (r *Result) LostSplit(parse func(id string) (writer string, seq int, ok bool)) (prefix, middle, postfix int) {
	type span struct{ lo, hi int }
	spans := map[string]*span{}
	for _, id := range r.delivered {
		w, n, ok := parse(id)
		if !ok {
			continue
		}
		if sp := spans[w]; sp == nil {
			spans[w] = &span{n, n}
		} else {
			sp.lo, sp.hi = min(sp.lo, n), max(sp.hi, n)
		}
	}
	for _, id := range r.Lost {
		w, n, ok := parse(id)
		sp := spans[w]
		switch {
		case !ok || sp == nil:
			middle++
		case n < sp.lo:
			prefix++
		case n > sp.hi:
			postfix++
		default:
			middle++
		}
	}
	return prefix, middle, postfix
}

// Lateness summarises receive − due of first deliveries.
type Lateness struct {
	N             int
	P50, P99, Max time.Duration
}

// Valid reports whether the guarantees held: nothing lost, unexpected,
// early or resurrected, and duplicates within the bound.
func (r *Result) Valid() bool {
	return len(r.Lost) == 0 && len(r.Unexpected) == 0 && len(r.Early) == 0 &&
		len(r.Resurrected) == 0 && r.Duplicated <= r.DupBound
}

func (r *Result) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sends=%d acked=%d info=%d delivered=%d lost=%d unexpected=%d duplicated=%d (bound %d) recovered=%d early=%d (by client clock %d) resurrected=%d",
		r.Sends, r.Acked, r.InfoSends, r.Delivered, len(r.Lost), len(r.Unexpected), r.Duplicated, r.DupBound,
		r.Recovered, len(r.Early), len(r.EarlyClient), len(r.Resurrected))
	fmt.Fprintf(&b, " lateness steady p50=%v p99=%v max=%v (n=%d); came-due-while-down p50=%v p99=%v max=%v (n=%d)",
		r.Steady.P50, r.Steady.P99, r.Steady.Max, r.Steady.N,
		r.CameDueWhileDown.P50, r.CameDueWhileDown.P99, r.CameDueWhileDown.Max, r.CameDueWhileDown.N)
	return b.String()
}

type idHist struct {
	sendOK, sendInfo, sendInvoked bool
	firstSendInvoke               time.Duration
	okSendInvoke                  time.Duration // invoke of the first ok send
	delay                         time.Duration
	// due is the due time the first ok send reported; creator says that
	// send created the message (no info send came before it), so its due
	// bounds every delivery. A later ok send may be a duplicate answered
	// after a nack moved the due time on: it bounds only the deliveries
	// invoked after it completed (okSends).
	due        time.Time
	creator    bool
	okSends    []Op
	deliveries []Op
	nacks      int
	endedAt    time.Duration // completion of the first ok ack or cancel
	ended      bool
}

// Check judges a history after a final drain (consume until every acked
// send was read, with no faults active).
func Check(ops []Op, down []Window, opt Options) *Result {
	ids := map[string]*idHist{}
	get := func(id string) *idHist {
		h := ids[id]
		if h == nil {
			h = &idHist{}
			ids[id] = h
		}
		return h
	}
	sorted := append([]Op(nil), ops...)
	sort.SliceStable(sorted, func(i, j int) bool { return sorted[i].Invoke < sorted[j].Invoke })
	res := &Result{DupBound: opt.DupBound}
	for _, op := range sorted {
		h := get(op.ID)
		switch op.Kind {
		case Send:
			res.Sends++
			if !h.sendInvoked || op.Invoke < h.firstSendInvoke {
				h.firstSendInvoke = op.Invoke
			}
			h.sendInvoked = true
			h.delay = op.Delay
			switch op.Outcome {
			case OK:
				if !h.sendOK {
					h.okSendInvoke = op.Invoke
					h.due, h.creator = op.DueAt, !h.sendInfo
				}
				h.sendOK = true
				h.okSends = append(h.okSends, op)
			case Info:
				h.sendInfo = true
			}
		case Lease:
			if op.Outcome == OK {
				h.deliveries = append(h.deliveries, op)
			}
		case Nack:
			if op.Outcome != Fail {
				h.nacks++
			}
		case Ack, Cancel:
			if op.Outcome == OK && (!h.ended || op.Complete < h.endedAt) {
				h.ended, h.endedAt = true, op.Complete
			}
		}
	}
	var steady, whileDown []time.Duration
	for id, h := range ids {
		if h.sendOK {
			res.Acked++
		} else if h.sendInfo {
			res.InfoSends++
		}
		n := len(h.deliveries)
		if n > 0 {
			res.Delivered++
			res.delivered = append(res.delivered, id)
		}
		switch {
		case n == 0 && h.sendOK && !h.ended && !opt.Dead[id]:
			res.Lost = append(res.Lost, id)
		case n > 0 && !h.sendInvoked:
			res.Unexpected = append(res.Unexpected, id)
		}
		if n > 0 && !h.sendOK && h.sendInfo {
			res.Recovered++
		}
		if extra := n - 1 - h.nacks; extra > 0 {
			res.Duplicated += extra
		}
		for _, d := range h.deliveries {
			if early(h, d, opt.Slack) {
				res.Early = append(res.Early, id)
				if earlyByClient(h, d, opt.Slack) {
					res.EarlyClient = append(res.EarlyClient, id)
				}
				break
			}
		}
		for _, d := range h.deliveries {
			// A delivery whose lease call started after an ack or cancel
			// had completed brings back something that was gone.
			if h.ended && d.Invoke > h.endedAt {
				res.Resurrected = append(res.Resurrected, id)
				break
			}
		}
		if n > 0 && h.creator && !h.due.IsZero() && !firstDelivery(h.deliveries).At.IsZero() {
			late := firstDelivery(h.deliveries).At.Sub(h.due)
			if cameDueWhileDown(h, down) {
				whileDown = append(whileDown, late)
			} else {
				steady = append(steady, late)
			}
		}
	}
	if opt.DownGrace > 0 {
		for id, h := range ids {
			if !h.sendOK || len(h.deliveries) == 0 {
				continue
			}
			// The due time on the recorder clock, from the ok send's
			// invoke: at most one round trip before the server's.
			due := h.okSendInvoke + h.delay
			for _, w := range down {
				if due >= w.From && due <= w.To && firstDelivery(h.deliveries).Complete > w.To+opt.DownGrace {
					res.SlowAfterRestart = append(res.SlowAfterRestart, id)
					break
				}
			}
		}
	}
	for _, s := range [][]string{res.Lost, res.Unexpected, res.Early, res.EarlyClient, res.Resurrected, res.SlowAfterRestart} {
		sort.Strings(s)
	}
	res.Steady, res.CameDueWhileDown = summarize(steady), summarize(whileDown)
	return res
}

// firstDelivery is the first of ds to be handed out: the earliest server
// stamp, else the earliest receipt. Not simply the first invoked: a
// long-poll invoked before the first delivery may return a later one (a
// retry after a nack, a redelivery after a lease expired).
func firstDelivery(ds []Op) Op {
	f := ds[0]
	for _, d := range ds[1:] {
		if !d.At.IsZero() && !f.At.IsZero() {
			if d.At.Before(f.At) {
				f = d
			}
		} else if d.Complete < f.Complete {
			f = d
		}
	}
	return f
}

// early applies both clocks: the server's (delivered before its due time)
// and the client's (received before send invoke + delay, which holds
// whatever the server's clock says).
func early(h *idHist, d Op, slack time.Duration) bool {
	if !d.At.IsZero() {
		for i, s := range h.okSends {
			bounds := (i == 0 && h.creator) || d.Invoke >= s.Complete
			if bounds && !s.DueAt.IsZero() && d.At.Before(s.DueAt) {
				return true
			}
		}
	}
	return earlyByClient(h, d, slack)
}

func earlyByClient(h *idHist, d Op, slack time.Duration) bool {
	return h.sendInvoked && d.Complete+slack < h.firstSendInvoke+h.delay
}

// cameDueWhileDown: the message's due time (on the recorder clock, from
// send invoke + delay) fell in a downtime window.
func cameDueWhileDown(h *idHist, down []Window) bool {
	due := h.firstSendInvoke + h.delay
	for _, w := range down {
		if due >= w.From && due <= w.To {
			return true
		}
	}
	return false
}

func summarize(xs []time.Duration) Lateness {
	if len(xs) == 0 {
		return Lateness{}
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i] < xs[j] })
	at := func(q float64) time.Duration { return xs[min(len(xs)-1, int(q*float64(len(xs))))] }
	return Lateness{N: len(xs), P50: at(0.50), P99: at(0.99), Max: xs[len(xs)-1]}
}
