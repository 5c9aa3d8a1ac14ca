package bench

import (
	"os"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// A command name with spaces and a ')' must not shift the fields.
	line := "4242 (my (odd) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 125 0 0 20 0 7 0 12345 1000 50"
	got, err := parseStatCPU([]byte(line), 4242)
	if err != nil || got != 3750*time.Millisecond {
		t.Fatalf("parseStatCPU = %v, %v; want 3.75s (250 + 125 ticks)", got, err)
	}
	for _, bad := range []string{"", "4242 no paren", "4242 (x) S 1 2"} {
		if _, err := parseStatCPU([]byte(bad), 4242); err == nil {
			t.Errorf("parseStatCPU(%q) did not fail", bad)
		}
	}
}

// TestProcCPUOfThisProcess: the CPU time of this process grows while it
// spins (10 ms resolution; the loop gives up after 10 s of wall time).
func TestProcCPUOfThisProcess(t *testing.T) {
	c0, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	x := 0
	for time.Now().Before(deadline) {
		for i := range 1_000_000 {
			x += i
		}
		c1, err := ProcCPU(os.Getpid())
		if err != nil {
			t.Fatal(err)
		}
		if c1 > c0 {
			return
		}
	}
	t.Fatalf("CPU time did not grow from %v while spinning for 10 s (x=%d)", c0, x)
}
