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
