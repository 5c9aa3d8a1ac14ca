package history

import (
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// send: invoked at inv ms, ok at inv+1, due after delay ms.
func sendOp(id string, inv, delay int, o Outcome) Op {
	return Op{Kind: Send, ID: id, Outcome: o, Invoke: ms(inv), Complete: ms(inv + 1), Delay: ms(delay), DueAt: t0.Add(ms(inv + delay))}
}

// deliver: lease invoked at inv, received at at (both recorder ms, and the
// server clock equals t0 + recorder ms).
func deliverOp(id string, inv, at int) Op {
	return Op{Kind: Lease, ID: id, Outcome: OK, Invoke: ms(inv), Complete: ms(at), At: t0.Add(ms(at))}
}

func endOp(k Kind, id string, inv int) Op {
	return Op{Kind: k, ID: id, Outcome: OK, Invoke: ms(inv), Complete: ms(inv + 1)}
}

func TestCheckClean(t *testing.T) {
	ops := []Op{
		sendOp("a", 0, 100, OK), deliverOp("a", 50, 103), endOp(Ack, "a", 104),
		sendOp("b", 0, 0, OK), deliverOp("b", 0, 2), endOp(Ack, "b", 3),
		sendOp("c", 0, 10, OK), endOp(Cancel, "c", 2), // cancelled before due: not lost
	}
	r := Check(ops, nil, Options{})
	if !r.Valid() || r.Delivered != 2 || r.Steady.N != 2 || r.Steady.Max != ms(3) {
		t.Fatalf("clean history judged %v", r)
	}
}

func TestCheckFindsEachAnomaly(t *testing.T) {
	cases := []struct {
		name  string
		ops   []Op
		opt   Options
		check func(*Result) bool
	}{
		{"lost", []Op{sendOp("a", 0, 0, OK)}, Options{},
			func(r *Result) bool { return len(r.Lost) == 1 && r.Lost[0] == "a" }},
		{"lost-but-dead-lettered-is-not", []Op{sendOp("a", 0, 0, OK)}, Options{Dead: map[string]bool{"a": true}},
			func(r *Result) bool { return len(r.Lost) == 0 && r.Valid() }},
		{"failed-send-never-delivered-is-fine", []Op{sendOp("a", 0, 0, Fail)}, Options{},
			func(r *Result) bool { return r.Valid() }},
		{"unexpected", []Op{deliverOp("ghost", 0, 1)}, Options{},
			func(r *Result) bool { return len(r.Unexpected) == 1 }},
		{"duplicate-over-bound", []Op{sendOp("a", 0, 0, OK), deliverOp("a", 0, 1), deliverOp("a", 5, 6), endOp(Ack, "a", 7)}, Options{},
			func(r *Result) bool { return r.Duplicated == 1 && !r.Valid() }},
		{"duplicate-within-bound", []Op{sendOp("a", 0, 0, OK), deliverOp("a", 0, 1), deliverOp("a", 5, 6), endOp(Ack, "a", 7)}, Options{DupBound: 1},
			func(r *Result) bool { return r.Duplicated == 1 && r.Valid() }},
		{"redelivery-after-nack-is-no-duplicate", []Op{sendOp("a", 0, 0, OK), deliverOp("a", 0, 1), endOp(Nack, "a", 2), deliverOp("a", 5, 6), endOp(Ack, "a", 7)}, Options{},
			func(r *Result) bool { return r.Duplicated == 0 && r.Valid() }},
		{"early-by-server-clock", []Op{sendOp("a", 0, 100, OK), deliverOp("a", 0, 99)}, Options{},
			func(r *Result) bool { return len(r.Early) == 1 }},
		{"early-by-client-clock", []Op{sendOp("a", 0, 100, OK), {Kind: Lease, ID: "a", Outcome: OK, Invoke: ms(0), Complete: ms(50)}}, Options{},
			func(r *Result) bool { return len(r.Early) == 1 }},
		// D5: a send whose first attempt died unanswered (info) but
		// created the message, which was delivered and nacked; the retry
		// is answered as a duplicate with the retry's due time. The first
		// delivery came before that answer: not early.
		{"duplicate-answer-after-nack-bounds-only-later-deliveries", []Op{
			sendOp("p", 0, 0, Info), deliverOp("p", 5, 6), endOp(Nack, "p", 7),
			{Kind: Send, ID: "p", Outcome: OK, Invoke: ms(8), Complete: ms(9), DueAt: t0.Add(ms(500))},
			deliverOp("p", 400, 501)}, Options{},
			func(r *Result) bool { return len(r.Early) == 0 && r.Valid() }},
		{"duplicate-answer-bounds-later-deliveries", []Op{
			sendOp("p", 0, 0, Info), deliverOp("p", 5, 6), endOp(Nack, "p", 7),
			{Kind: Send, ID: "p", Outcome: OK, Invoke: ms(8), Complete: ms(9), DueAt: t0.Add(ms(500))},
			deliverOp("p", 400, 450)}, Options{},
			func(r *Result) bool { return len(r.Early) == 1 }},
		{"creating-send-bounds-deliveries-before-its-answer", []Op{
			{Kind: Send, ID: "a", Outcome: OK, Invoke: ms(0), Complete: ms(200), Delay: ms(0), DueAt: t0.Add(ms(100))},
			deliverOp("a", 10, 60)}, Options{},
			func(r *Result) bool { return len(r.Early) == 1 }},
		{"resurrected-after-ack", []Op{sendOp("a", 0, 0, OK), deliverOp("a", 0, 1), endOp(Ack, "a", 2), deliverOp("a", 10, 11)}, Options{DupBound: 5},
			func(r *Result) bool { return len(r.Resurrected) == 1 && !r.Valid() }},
		{"resurrected-after-cancel", []Op{sendOp("a", 0, 50, OK), endOp(Cancel, "a", 5), deliverOp("a", 40, 51)}, Options{},
			func(r *Result) bool { return len(r.Resurrected) == 1 }},
		{"recovered-info-send", []Op{sendOp("a", 0, 0, Info), deliverOp("a", 0, 3), endOp(Ack, "a", 4)}, Options{},
			func(r *Result) bool { return r.Recovered == 1 && r.Valid() }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if r := Check(c.ops, nil, c.opt); !c.check(r) {
				t.Fatalf("verdict: %v", r)
			}
		})
	}
}

func TestLatenessSplitByDowntime(t *testing.T) {
	ops := []Op{
		sendOp("steady", 0, 10, OK), deliverOp("steady", 0, 11),
		sendOp("down", 0, 100, OK), deliverOp("down", 0, 600),
	}
	r := Check(ops, []Window{{From: ms(50), To: ms(500)}}, Options{})
	if r.Steady.N != 1 || r.Steady.Max != ms(1) || r.CameDueWhileDown.N != 1 || r.CameDueWhileDown.Max != ms(500) {
		t.Fatalf("split: %v", r)
	}
}

func TestRecorderIsConcurrencySafe(t *testing.T) {
	r := NewRecorder()
	done := make(chan bool)
	for g := 0; g < 8; g++ {
		go func() {
			for i := 0; i < 100; i++ {
				r.Invoke(Send, "x").WithDelay(0).OK()
			}
			done <- true
		}()
	}
	for g := 0; g < 8; g++ {
		<-done
	}
	if n := len(r.Ops()); n != 800 {
		t.Fatalf("recorded %d ops, want 800", n)
	}
}
