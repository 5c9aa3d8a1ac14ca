package history

import (
	"fmt"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability of per-message operations (RELIABILITY S12/S16), checked
// with porcupine. Each message id is an independent object (the history
// is partitioned by id) whose state follows docs/state-machine.md:
//
//	absent ─send→ ready ─lease(r)→ inflight(r) ─ack(r)→ acked
//	                 ▲                 │
//	                 └── nack(r) ──────┤ failures+1 < max
//	                                   └─ failures+1 ≥ max → dead
//	cancel: ready | inflight → absent (the id is free again)
//
// Sends are due now (no delay), and leases are long enough not to expire
// during a run, so no transition depends on time. A lease is an operation
// on the id it returned; lease calls that returned nothing say something
// about every id at once and are left out (they cannot be partitioned).
//
// The model is exact about statuses: a send of a known id (in any state,
// acked and dead included) is a duplicate; ack, nack and extend with any
// receipt but the current one are 409, on an absent id 404, except an ack
// repeated with the receipt that acked the message and a nack repeated with
// the receipt whose nack ended the last delivery (a client retrying after a
// lost answer), which are 200 and change nothing (a repeated nack answers
// the state it left; the scenario's nacks all give one reason, which the
// server also compares); cancel of an acked or dead message is 409, of an
// absent one 404.

// LinKind is an operation on one message.
type LinKind uint8

// Operation kinds of the linearizability model.
const (
	LinSend LinKind = iota + 1
	LinCancel
	LinLease
	LinAck
	LinNack
	LinExtend
)

func (k LinKind) String() string {
	return [...]string{"?", "send", "cancel", "lease", "ack", "nack", "extend"}[min(int(k), 6)]
}

// LinInput is what was asked.
type LinInput struct {
	Kind    LinKind
	ID      string
	Receipt string // ack, nack, extend
}

// LinOutput is what was answered.
type LinOutput struct {
	// Unknown: no answer (transport error); the op may or may not have
	// taken effect.
	Unknown bool
	// Status is the HTTP status (lease: 200 for the op on the returned id).
	Status int
	// Duplicate is a send's "duplicate" flag.
	Duplicate bool
	// Receipt is the receipt a lease handed out.
	Receipt string
	// State is cancel's prior state, or the state nack left the message in.
	State string
}

// LinOp is one completed operation; Call and Return are on one monotonic
// clock (ns).
type LinOp struct {
	Client       int
	In           LinInput
	Out          LinOutput
	Call, Return int64
}

type phase uint8

const (
	absent phase = iota
	ready
	inflight
	acked
	dead
)

func (p phase) String() string {
	return [...]string{"absent", "ready", "inflight", "acked", "dead"}[p]
}

// linState is one message's state; comparable, so porcupine's default
// equality works. Receipt is the lease's when inflight, the acking one when
// acked, and the nacking one when a nack ended the last delivery (ready,
// dead), until the next lease.
type linState struct {
	Phase    phase
	Receipt  string
	Failures int
}

// QueueModel is the per-id model for messages with the given max_attempts.
func QueueModel(maxAttempts int) porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
			by := map[string][]porcupine.Operation{}
			var order []string
			for _, op := range h {
				id := op.Input.(LinInput).ID
				if _, ok := by[id]; !ok {
					order = append(order, id)
				}
				by[id] = append(by[id], op)
			}
			out := make([][]porcupine.Operation, 0, len(order))
			for _, id := range order {
				out = append(out, by[id])
			}
			return out
		},
		Init: func() []interface{} { return []interface{}{linState{}} },
		Step: func(state, input, output interface{}) []interface{} {
			s, in, out := state.(linState), input.(LinInput), output.(LinOutput)
			if out.Unknown {
				// Either it did not happen, or it happened with some answer.
				res := []interface{}{s}
				if next, ok := success(s, in, maxAttempts); ok {
					res = append(res, next)
				}
				return res
			}
			if next, ok := step(s, in, out, maxAttempts); ok {
				return []interface{}{next}
			}
			return nil
		},
		DescribeOperation: func(input, output interface{}) string {
			in, out := input.(LinInput), output.(LinOutput)
			arg := ""
			if in.Receipt != "" {
				arg = "(" + in.Receipt + ")"
			}
			if out.Unknown {
				return fmt.Sprintf("%s %s%s → ?", in.Kind, in.ID, arg)
			}
			extra := ""
			switch {
			case out.Receipt != "":
				extra = " " + out.Receipt
			case out.Duplicate:
				extra = " duplicate"
			case out.State != "":
				extra = " " + out.State
			}
			return fmt.Sprintf("%s %s%s → %d%s", in.Kind, in.ID, arg, out.Status, extra)
		},
		DescribeState: func(state interface{}) string {
			s := state.(linState)
			if s.Receipt != "" {
				return fmt.Sprintf("%s(%s) failures=%d", s.Phase, s.Receipt, s.Failures)
			}
			return fmt.Sprintf("%s failures=%d", s.Phase, s.Failures)
		},
	}
	return nm.ToModel()
}

// success is the state after in took effect successfully (for unknown
// outcomes). A lease with an unknown outcome is never recorded (its id is
// not known), so it needs no case.
func success(s linState, in LinInput, maxAttempts int) (linState, bool) {
	switch in.Kind {
	case LinSend:
		if s.Phase == absent {
			return linState{Phase: ready}, true
		}
	case LinCancel:
		if s.Phase == ready || s.Phase == inflight {
			return linState{}, true
		}
	case LinAck:
		if s.Phase == inflight && s.Receipt == in.Receipt {
			return linState{Phase: acked, Receipt: in.Receipt, Failures: s.Failures}, true
		}
	case LinNack:
		if s.Phase == inflight && s.Receipt == in.Receipt {
			return nacked(s, maxAttempts), true
		}
	}
	return s, false
}

func nacked(s linState, maxAttempts int) linState {
	n := linState{Phase: ready, Receipt: s.Receipt, Failures: s.Failures + 1}
	if n.Failures >= maxAttempts {
		n.Phase = dead
	}
	return n
}

// step is the model's transition for an answered operation; false when
// the answer is impossible in state s.
func step(s linState, in LinInput, out LinOutput, maxAttempts int) (linState, bool) {
	switch in.Kind {
	case LinSend:
		if s.Phase == absent {
			return linState{Phase: ready}, out.Status == 201 && !out.Duplicate
		}
		return s, out.Status == 200 && out.Duplicate
	case LinCancel:
		switch s.Phase {
		case absent:
			return s, out.Status == 404
		case ready, inflight:
			return linState{}, out.Status == 200 && out.State == s.Phase.String()
		default:
			return s, out.Status == 409
		}
	case LinLease:
		if s.Phase != ready || out.Status != 200 || out.Receipt == "" {
			return s, false
		}
		return linState{Phase: inflight, Receipt: out.Receipt, Failures: s.Failures}, true
	case LinAck, LinNack, LinExtend:
		switch {
		case s.Phase == absent:
			return s, out.Status == 404
		case s.Phase == acked && in.Kind == LinAck && s.Receipt == in.Receipt:
			return s, out.Status == 200
		case (s.Phase == ready || s.Phase == dead) && in.Kind == LinNack && s.Receipt != "" && s.Receipt == in.Receipt:
			return s, out.Status == 200 && out.State == s.Phase.String()
		case s.Phase != inflight || s.Receipt != in.Receipt:
			return s, out.Status == 409
		case out.Status != 200:
			return s, false
		case in.Kind == LinAck:
			return linState{Phase: acked, Receipt: in.Receipt, Failures: s.Failures}, true
		case in.Kind == LinNack:
			n := nacked(s, maxAttempts)
			return n, out.State == n.Phase.String()
		default:
			return s, true
		}
	}
	return s, false
}

// CheckLinearizable runs porcupine over ops with QueueModel(maxAttempts).
// Operations with an unknown outcome are given a return time after every
// other operation's.
func CheckLinearizable(ops []LinOp, maxAttempts int, timeout time.Duration) (porcupine.CheckResult, porcupine.LinearizationInfo) {
	var last int64
	for _, op := range ops {
		last = max(last, op.Return, op.Call)
	}
	h := make([]porcupine.Operation, len(ops))
	for i, op := range ops {
		ret := op.Return
		if op.Out.Unknown {
			ret = last + 1
		}
		h[i] = porcupine.Operation{ClientId: op.Client, Input: op.In, Call: op.Call, Output: op.Out, Return: ret}
	}
	return porcupine.CheckOperationsVerbose(QueueModel(maxAttempts), h, timeout)
}

// VisualizeLinearization writes porcupine's HTML visualization to path.
func VisualizeLinearization(maxAttempts int, info porcupine.LinearizationInfo, path string) error {
	return porcupine.VisualizePath(QueueModel(maxAttempts), info, path)
}
