package redistest

import (
	"strconv"
	"testing"
	"time"
)

// redisTime reads TIME, directly or from inside a script, as Unix ms.
func redisTime(t *testing.T, s *Server, script bool) int64 {
	t.Helper()
	args := []string{"TIME"}
	if script {
		args = []string{"EVAL", "return redis.call('TIME')", "0"}
	}
	r, err := commandStrings(s.Addr(), args...)
	if err != nil || len(r) != 2 {
		t.Fatalf("%v: %v %v", args, r, err)
	}
	sec, err1 := strconv.ParseInt(r[0], 10, 64)
	usec, err2 := strconv.ParseInt(r[1], 10, 64)
	if err1 != nil || err2 != nil {
		t.Fatalf("%v: %v", args, r)
	}
	return sec*1000 + usec/1000
}

// The server runs (PING, writes, scripts) and TIME follows SetTime, to the
// millisecond, in and out of scripts; the real clock comes back with 0.
func TestStartWithClock(t *testing.T) {
	s := StartWithClock(t)
	if d := redisTime(t, s, false) - time.Now().UnixMilli(); d < -1000 || d > 1000 {
		t.Fatalf("before SetTime: TIME is %d ms off the real clock", d)
	}
	const t0 = 1_700_000_000_123
	for _, at := range []int64{t0, t0 + 1, t0 - 86_400_000} {
		s.SetTime(at)
		time.Sleep(20 * time.Millisecond) // frozen: no time passes
		if got := redisTime(t, s, false); got != at {
			t.Fatalf("TIME after SetTime(%d): %d", at, got)
		}
		if got := redisTime(t, s, true); got != at {
			t.Fatalf("TIME in a script after SetTime(%d): %d", at, got)
		}
	}
	if r, err := command(s.Addr(), "SET", "k", "v"); err != nil || r != "OK" {
		t.Fatalf("SET: %q %v", r, err)
	}
	if r, err := command(s.Addr(), "GET", "k"); err != nil || r != "v" {
		t.Fatalf("GET: %q %v", r, err)
	}
	s.Restart() // the clock survives a restart, and the data (AOF) too
	if got := redisTime(t, s, false); got != t0-86_400_000 {
		t.Fatalf("TIME after a restart: %d", got)
	}
	if r, err := command(s.Addr(), "GET", "k"); err != nil || r != "v" {
		t.Fatalf("GET after a restart: %q %v", r, err)
	}
	s.SetTime(0)
	if d := redisTime(t, s, false) - time.Now().UnixMilli(); d < -1000 || d > 1000 {
		t.Fatalf("after SetTime(0): TIME is %d ms off the real clock", d)
	}
}
