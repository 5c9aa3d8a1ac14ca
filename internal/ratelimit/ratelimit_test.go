package ratelimit

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

var t0 = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func TestNilAllowsEverything(t *testing.T) {
	var l *Limiter
	if ok, _ := l.Allow("k", t0); !ok {
		t.Fatal("a nil limiter refused")
	}
	if New(Config{Rate: 0}) != nil || New(Config{Rate: -1}) != nil || New(Config{Rate: math.NaN()}) != nil {
		t.Fatal("New with no positive rate must return nil (off)")
	}
}

// TestEnforcedRate offers 4× the configured rate for 60 s of injected
// time and counts what is let through: burst + rate × 60 s, within ±10%
// (token counting exactly; the tolerance is scenario S24's in docs/reliability.md).
func TestEnforcedRate(t *testing.T) {
	for _, tc := range []struct {
		rate  float64
		burst int
	}{{10, 0}, {100, 20}, {0.5, 1}, {2500, 100}} {
		t.Run(fmt.Sprint(tc.rate), func(t *testing.T) {
			l := New(Config{Rate: tc.rate, Burst: tc.burst})
			const window = 60 * time.Second
			step := time.Duration(float64(time.Second) / (4 * tc.rate))
			allowed, refused := 0, 0
			for now := t0; now.Before(t0.Add(window)); now = now.Add(step) {
				ok, retry := l.Allow("k", now)
				switch {
				case ok:
					allowed++
				case retry <= 0 || retry > time.Duration(float64(time.Second)/tc.rate)+time.Millisecond:
					t.Fatalf("refused with retry-after %v; want (0, 1/rate]", retry)
				default:
					refused++
				}
			}
			want := float64(l.burst) + tc.rate*window.Seconds()
			if got := float64(allowed); math.Abs(got-want) > 0.1*want {
				t.Fatalf("allowed %d in %v at rate %v burst %d; want %.0f ±10%%", allowed, window, tc.rate, l.burst, want)
			}
			if refused == 0 {
				t.Fatal("4× the rate was never refused")
			}
			t.Logf("rate %v/s burst %d: allowed %d (want %.0f), refused %d", tc.rate, l.burst, allowed, want, refused)
		})
	}
}

// TestRetryAfterIsHonest: a client that waits exactly the Retry-After it
// was given is let through.
func TestRetryAfterIsHonest(t *testing.T) {
	l := New(Config{Rate: 3, Burst: 2})
	now := t0
	for range 2 {
		if ok, _ := l.Allow("k", now); !ok {
			t.Fatal("burst refused")
		}
	}
	ok, retry := l.Allow("k", now)
	if ok || retry <= 0 {
		t.Fatalf("third request at once: ok=%v retry=%v", ok, retry)
	}
	if ok, _ := l.Allow("k", now.Add(retry+time.Microsecond)); !ok {
		t.Fatalf("refused after waiting the Retry-After %v", retry)
	}
}

func TestKeysAreIndependent(t *testing.T) {
	l := New(Config{Rate: 1, Burst: 1})
	for i := range 1000 {
		l.Allow("abuser", t0.Add(time.Duration(i)*time.Millisecond))
	}
	for i := range 10 {
		if ok, _ := l.Allow(fmt.Sprint("other", i), t0.Add(time.Second)); !ok {
			t.Fatalf("key other%d refused because another key was abusive", i)
		}
	}
}

// TestBoundedKeys: a flood of distinct keys never tracks more than
// MaxKeys, and idle keys are forgotten as traffic goes on.
func TestBoundedKeys(t *testing.T) {
	l := New(Config{Rate: 10, Burst: 10, MaxKeys: 100})
	now := t0
	for i := range 10_000 {
		l.Allow(fmt.Sprintf("10.0.%d.%d", i/256, i%256), now)
		if n := l.Len(); n > 100 {
			t.Fatalf("%d keys tracked after %d distinct keys; bound 100", n, i+1)
		}
	}
	// 1 s later every bucket is full again (burst/rate = 1 s): each call
	// forgets up to two idle keys, so 60 calls from one key empty the map.
	now = now.Add(time.Second)
	for range 60 {
		l.Allow("steady", now)
	}
	if n := l.Len(); n != 1 {
		t.Fatalf("%d keys tracked after the flood went idle; want 1", n)
	}
}

// TestEvictionKeepsRecentKeys: under pressure the least recently used key
// goes, not a busy one, so a flood of new keys does not refill an abuser.
func TestEvictionKeepsRecentKeys(t *testing.T) {
	l := New(Config{Rate: 1, Burst: 1, MaxKeys: 3})
	now := t0
	l.Allow("busy", now) // takes the one token
	for i := range 10 {
		now = now.Add(time.Millisecond)
		if ok, _ := l.Allow("busy", now); ok {
			t.Fatal("busy got a token it does not have")
		}
		l.Allow(fmt.Sprint("new", i), now)
	}
}

func TestConcurrent(t *testing.T) {
	l := New(Config{Rate: 1000, Burst: 10, MaxKeys: 50})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 2000 {
				l.Allow(fmt.Sprint(g, "-", i%80), time.Now())
			}
		})
	}
	wg.Wait()
	if n := l.Len(); n > 50 {
		t.Fatalf("%d keys; bound 50", n)
	}
}

func TestClientKey(t *testing.T) {
	for in, want := range map[string]string{
		"192.0.2.7:5555":            "192.0.2.7",
		"[::ffff:192.0.2.7]:1":      "192.0.2.7",
		"[2001:db8:1:2:3:4:5:6]:80": "2001:db8:1:2::/64",
		"[2001:db8:1:2:ff::1]:81":   "2001:db8:1:2::/64",
		"[fe80::1%eth0]:80":         "fe80::/64",
		"not-an-address":            "not-an-address",
		"@":                         "@",
	} {
		if got := ClientKey(in); got != want {
			t.Errorf("ClientKey(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
