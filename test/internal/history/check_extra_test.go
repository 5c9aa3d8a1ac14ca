package history

import (
	"strconv"
	"strings"
	"testing"
)

func TestSlowAfterRestart(t *testing.T) {
	ops := []Op{
		sendOp("fast", 0, 100, OK), deliverOp("fast", 0, 900), // due in the window, delivered by To+grace
		sendOp("slow", 0, 100, OK), deliverOp("slow", 0, 2000), // due in the window, too late
		sendOp("steady", 0, 1000, OK), deliverOp("steady", 0, 5000), // due after the window: not judged
	}
	down := []Window{{From: ms(50), To: ms(500)}}
	r := Check(ops, down, Options{DownGrace: ms(1000)})
	if len(r.SlowAfterRestart) != 1 || r.SlowAfterRestart[0] != "slow" {
		t.Fatalf("slow after restart: %v", r.SlowAfterRestart)
	}
	if r := Check(ops, down, Options{}); len(r.SlowAfterRestart) != 0 {
		t.Fatalf("judged without DownGrace: %v", r.SlowAfterRestart)
	}
}

// A long-poll invoked before the first delivery returned the retry after
// a nack: lateness is the first delivery's, not the retry's.
func TestLatenessOfFirstDeliveryNotFirstInvoked(t *testing.T) {
	ops := []Op{
		sendOp("a", 0, 100, OK),
		deliverOp("a", 10, 800), // long-poll invoked first, answered with the retry
		deliverOp("a", 50, 103), // the first delivery
		endOp(Nack, "a", 104),
		sendOp("b", 0, 100, OK), deliverOp("b", 5, 2000), deliverOp("b", 90, 700),
	}
	down := []Window{{From: ms(50), To: ms(500)}}
	r := Check(ops[:4], down, Options{DownGrace: ms(1000)})
	if r.CameDueWhileDown.N != 1 || r.CameDueWhileDown.Max != ms(3) {
		t.Fatalf("lateness %+v, want 3 ms (the first delivery, not the first invoked)", r.CameDueWhileDown)
	}
	r = Check(ops[4:], down, Options{DownGrace: ms(1000)})
	if r.CameDueWhileDown.N != 1 || r.CameDueWhileDown.Max != ms(600) {
		t.Fatalf("lateness %+v, want 600 ms", r.CameDueWhileDown)
	}
	if len(r.SlowAfterRestart) != 0 {
		t.Fatalf("slow after restart: %v (judged by a later delivery)", r.SlowAfterRestart)
	}
}

func TestLostSplit(t *testing.T) {
	var ops []Op
	for i := 0; i < 10; i++ {
		id := "w-" + strconv.Itoa(i)
		ops = append(ops, sendOp(id, i, 0, OK))
		if i >= 2 && i <= 7 && i != 5 {
			ops = append(ops, deliverOp(id, i, i+1))
		}
	}
	r := Check(ops, nil, Options{})
	p, m, q := r.LostSplit(func(id string) (string, int, bool) {
		w, n, ok := strings.Cut(id, "-")
		k, err := strconv.Atoi(n)
		return w, k, ok && err == nil
	})
	if p != 2 || m != 1 || q != 2 {
		t.Fatalf("prefix/middle/postfix = %d/%d/%d, want 2/1/2 (lost %v)", p, m, q, r.Lost)
	}
}
