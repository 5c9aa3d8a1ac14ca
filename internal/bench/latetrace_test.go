package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLateTraceWrittenForTheFirstLateReceiveOnly(t *testing.T) {
	path := filepath.Join(t.TempDir(), "late.trace")
	lt, err := StartLateTrace(5*time.Millisecond, path)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now()
	ck := NewChecker(3)
	ck.TraceLate(lt)
	for s := range uint64(3) {
		ck.SetDue(s, due)
	}
	ck.Observe([]Delivery{{Seq: 0, At: due.Add(time.Millisecond)}}) // on time: no trace
	ck.Observe([]Delivery{{Seq: 1, At: due.Add(20 * time.Millisecond)}})
	ck.Observe([]Delivery{{Seq: 2, At: due.Add(40 * time.Millisecond)}}) // later, but not the first
	msg, err := lt.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "message 1 ") || !strings.Contains(msg, path) {
		t.Errorf("Stop said %q, want the trace of message 1 at %s", msg, path)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Size() == 0 {
		t.Fatalf("trace file: %v, %v", fi, err)
	}
}

func TestLateTraceNothingLateWritesNothing(t *testing.T) {
	path := filepath.Join(t.TempDir(), "late.trace")
	lt, err := StartLateTrace(time.Second, path)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Now()
	ck := NewChecker(1)
	ck.TraceLate(lt)
	ck.SetDue(0, due)
	ck.Observe([]Delivery{{Seq: 0, At: due.Add(time.Millisecond)}})
	msg, err := lt.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(msg, "no trace written") {
		t.Errorf("Stop said %q", msg)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("trace file exists (%v), want none", err)
	}
}

func TestLateTraceRefusesZeroThreshold(t *testing.T) {
	if _, err := StartLateTrace(0, "x"); err == nil || !strings.Contains(err.Error(), "--trace-late") {
		t.Errorf("err = %v, want one naming --trace-late", err)
	}
}

func TestLateTraceRefusesAMissingDirectory(t *testing.T) {
	path := filepath.Join(t.TempDir(), "nope", "late.trace")
	if _, err := StartLateTrace(time.Millisecond, path); err == nil || !strings.Contains(err.Error(), "no such directory") {
		t.Errorf("err = %v, want one naming the missing directory", err)
	}
}
