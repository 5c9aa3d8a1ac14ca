package history

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// seqOps builds a history where op i runs from 10i to 10i+5 (no overlap)
// unless the caller sets times.
func seqOps(ops ...LinOp) []LinOp {
	for i := range ops {
		if ops[i].Call == 0 && ops[i].Return == 0 {
			ops[i].Call, ops[i].Return = int64(10*i), int64(10*i+5)
		}
	}
	return ops
}

func op(kind LinKind, id, receipt string, out LinOutput) LinOp {
	return LinOp{In: LinInput{Kind: kind, ID: id, Receipt: receipt}, Out: out}
}

var (
	created   = LinOutput{Status: 201}
	duplicate = LinOutput{Status: 200, Duplicate: true}
	ok        = LinOutput{Status: 200}
	conflict  = LinOutput{Status: 409}
	notFound  = LinOutput{Status: 404}
)

func leased(r string) LinOutput { return LinOutput{Status: 200, Receipt: r} }

func TestLinearizableHistoriesPass(t *testing.T) {
	cases := map[string][]LinOp{
		"send-lease-ack-then-dedup": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinExtend, "a", "r1", ok), op(LinAck, "a", "r1", ok),
			op(LinAck, "a", "r1", ok), // retried: done, not a conflict
			op(LinAck, "a", "r0", conflict), op(LinNack, "a", "r1", conflict), op(LinExtend, "a", "r1", conflict),
			op(LinSend, "a", "", duplicate), op(LinCancel, "a", "", conflict)),
		"nack-to-dead-at-max": seqOps(
			op(LinSend, "a", "", created),
			op(LinLease, "a", "", leased("r1")), op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinAck, "a", "r1", conflict), // stale after the nack
			op(LinLease, "a", "", leased("r2")), op(LinNack, "a", "r2", LinOutput{Status: 200, State: "dead"}),
			op(LinSend, "a", "", duplicate), op(LinCancel, "a", "", conflict)),
		"cancel-frees-the-id": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinCancel, "a", "", LinOutput{Status: 200, State: "inflight"}),
			op(LinAck, "a", "r1", notFound), op(LinSend, "a", "", created)),
		// Concurrent send and cancel: the cancel's 404 says it came first.
		"concurrent-send-cancel": {
			{In: LinInput{Kind: LinSend, ID: "a"}, Out: created, Call: 0, Return: 10},
			{In: LinInput{Kind: LinCancel, ID: "a"}, Out: notFound, Call: 1, Return: 9},
			{In: LinInput{Kind: LinLease, ID: "a"}, Out: leased("r1"), Call: 11, Return: 12},
		},
		// A nack retried with its receipt is answered with the state it
		// left; the receipt stays stale for acks, and for nacks once the
		// message was leased again.
		"nack-retried": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinAck, "a", "r1", conflict), op(LinExtend, "a", "r1", conflict),
			op(LinLease, "a", "", leased("r2")), op(LinNack, "a", "r1", conflict),
			op(LinNack, "a", "r2", LinOutput{Status: 200, State: "dead"}),
			op(LinNack, "a", "r2", LinOutput{Status: 200, State: "dead"})),
		// An ack whose answer was lost may have taken effect.
		"unknown-ack": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinAck, "a", "r1", LinOutput{Unknown: true}), op(LinAck, "a", "r1", ok)),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res, _ := CheckLinearizable(h, 2, 5*time.Second); res != porcupine.Ok {
				t.Fatalf("porcupine says %s for a linearizable history", res)
			}
		})
	}
}

// The model must reject what delayq must never do; a model that accepts
// everything would prove nothing.
func TestNonLinearizableHistoriesFail(t *testing.T) {
	cases := map[string][]LinOp{
		"two-live-leases": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")), op(LinLease, "a", "", leased("r2"))),
		"stale-receipt-acked": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinLease, "a", "", leased("r2")), op(LinAck, "a", "r1", ok)),
		// A retried ack must be answered as the first was.
		"retried-ack-conflict": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinAck, "a", "r1", ok), op(LinAck, "a", "r1", conflict)),
		// A retried nack must not count a second failure.
		"retried-nack-counted-twice": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "dead"})),
		// The nacked receipt is not the lease's: it cannot ack.
		"nacked-receipt-acked": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinAck, "a", "r1", ok)),
		"extend-after-ack": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinAck, "a", "r1", ok), op(LinExtend, "a", "r1", ok)),
		"delivered-after-cancel": seqOps(
			op(LinSend, "a", "", created), op(LinCancel, "a", "", LinOutput{Status: 200, State: "ready"}),
			op(LinLease, "a", "", leased("r1"))),
		"redelivered-after-ack": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinAck, "a", "r1", ok), op(LinLease, "a", "", leased("r2"))),
		"second-create":    seqOps(op(LinSend, "a", "", created), op(LinSend, "a", "", created)),
		"lease-never-sent": seqOps(op(LinLease, "a", "", leased("r1"))),
		"dead-too-early": seqOps(
			op(LinSend, "a", "", created), op(LinLease, "a", "", leased("r1")),
			op(LinNack, "a", "r1", LinOutput{Status: 200, State: "dead"})),
		"not-dead-at-max": seqOps(
			op(LinSend, "a", "", created),
			op(LinLease, "a", "", leased("r1")), op(LinNack, "a", "r1", LinOutput{Status: 200, State: "ready"}),
			op(LinLease, "a", "", leased("r2")), op(LinNack, "a", "r2", LinOutput{Status: 200, State: "ready"})),
		"cancel-wrong-prior-state": seqOps(
			op(LinSend, "a", "", created), op(LinCancel, "a", "", LinOutput{Status: 200, State: "inflight"})),
		// The cancel returned before the lease was invoked: no order
		// puts the lease first.
		"no-overlap-no-reorder": {
			{In: LinInput{Kind: LinSend, ID: "a"}, Out: created, Call: 0, Return: 1},
			{In: LinInput{Kind: LinCancel, ID: "a"}, Out: LinOutput{Status: 200, State: "ready"}, Call: 2, Return: 3},
			{In: LinInput{Kind: LinLease, ID: "a"}, Out: leased("r1"), Call: 4, Return: 5},
		},
		// One bad id among good ones still fails the whole history.
		"bad-partition": append(seqOps(
			op(LinSend, "good", "", created), op(LinLease, "good", "", leased("g1")), op(LinAck, "good", "g1", ok),
		), LinOp{In: LinInput{Kind: LinAck, ID: "bad", Receipt: "x"}, Out: ok, Call: 100, Return: 101}),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if res, _ := CheckLinearizable(h, 2, 5*time.Second); res != porcupine.Illegal {
				t.Fatalf("porcupine says %s for a history delayq must never produce", res)
			}
		})
	}
}
