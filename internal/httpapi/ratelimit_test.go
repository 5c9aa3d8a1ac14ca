package httpapi

import (
	"math"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// fakeNow is an injected clock for the limiters: rates are measured in
// token counts over fake time, never by wall-clock timing.
type fakeNow struct{ off atomic.Int64 }

var fakeEpoch = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func (f *fakeNow) Now() time.Time          { return fakeEpoch.Add(time.Duration(f.off.Load())) }
func (f *fakeNow) Advance(d time.Duration) { f.off.Add(int64(d)) }

// TestRateLimitIP429 is S24's answer: over the per-IP limit, 429 in the
// API's error shape with a Retry-After, on the API and the dashboard;
// health checks are not limited; the bucket refills with (fake) time.
func TestRateLimitIP429(t *testing.T) {
	clk := &fakeNow{}
	dash := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("dashboard")) })
	b := setup(t, func(c *Config) { c.IPRateLimit = 0.5; c.IPRateBurst = 2; c.Now = clk.Now; c.Dashboard = dash })
	want(t, b.do(t, "GET", "/v1/topics", ""), 200)
	want(t, b.do(t, "GET", "/v1/topics", ""), 200)
	r := b.do(t, "GET", "/v1/topics", "")
	want(t, r, http.StatusTooManyRequests)
	if r.err.Code != wire.CodeRateLimited || !strings.Contains(r.err.Message, "client 127.0.0.1") {
		t.Errorf("429 body = %+v; want code %q naming the client", r.err, wire.CodeRateLimited)
	}
	// One token per 2 s: the whole seconds until the next one.
	if got := r.header.Get("Retry-After"); got != "2" {
		t.Errorf("Retry-After = %q, want 2", got)
	}
	want(t, b.do(t, "GET", "/ui/", ""), http.StatusTooManyRequests) // the dashboard shares the IP's bucket
	for range 5 {
		want(t, b.do(t, "GET", "/healthz", ""), 200)
		want(t, b.do(t, "GET", "/readyz", ""), 200)
	}
	clk.Advance(2 * time.Second)
	want(t, b.do(t, "GET", "/v1/topics", ""), 200)
	want(t, b.do(t, "POST", "/v1/topics/orders/messages", `{"payload":"x"}`), http.StatusTooManyRequests)
	if b.spy.Mutations() != 0 {
		t.Error("a rate-limited send reached the queue")
	}
}

// TestRateLimitTokenEnforcedRate offers 4× the per-token rate for 10 s of
// fake time and counts the 200s: burst + rate × 10 s, within ±10%.
func TestRateLimitTokenEnforcedRate(t *testing.T) {
	const rate, burst = 25.0, 5
	clk := &fakeNow{}
	b := setup(t, func(c *Config) {
		c.Tokens = tokenSet(t)
		c.TokenRateLimit, c.TokenRateBurst = rate, burst
		c.Now = clk.Now
	})
	cons := []string{"Authorization", "Bearer " + consSecret}
	const window = 10 * time.Second
	step := time.Duration(float64(time.Second) / (4 * rate))
	ok, limited := 0, 0
	for elapsed := time.Duration(0); elapsed < window; elapsed += step {
		r := b.do(t, "GET", "/v1/topics", "", cons...)
		switch r.status {
		case 200:
			ok++
		case http.StatusTooManyRequests:
			limited++
			if r.header.Get("Retry-After") != "1" || r.err.Code != wire.CodeRateLimited {
				t.Fatalf("429 with Retry-After %q, body %+v", r.header.Get("Retry-After"), r.err)
			}
		default:
			t.Fatalf("status %d: %s", r.status, r.raw)
		}
		clk.Advance(step)
	}
	wantOK := burst + rate*window.Seconds()
	if math.Abs(float64(ok)-wantOK) > 0.1*wantOK {
		t.Fatalf("%d requests allowed in %v at %v/s burst %d; want %.0f ±10%%", ok, window, rate, burst, wantOK)
	}
	t.Logf("allowed %d (want %.0f), limited %d", ok, wantOK, limited)
	// Unauthenticated requests are refused by auth (401), not counted.
	want(t, b.do(t, "GET", "/v1/topics", ""), http.StatusUnauthorized)
}

// TestRateLimitAbusiveTokenDoesNotStarveOthers: one token floods from
// four goroutines while another sends at half its limit; every request of
// the second succeeds.
func TestRateLimitAbusiveTokenDoesNotStarveOthers(t *testing.T) {
	clk := &fakeNow{}
	b := setup(t, func(c *Config) {
		c.Tokens = tokenSet(t)
		c.TokenRateLimit, c.TokenRateBurst = 20, 20
		c.Now = clk.Now
	})
	abuser := []string{"Authorization", "Bearer " + otherSecret}
	victim := []string{"Authorization", "Bearer " + consSecret}
	stop := make(chan struct{})
	var abused, abuserOK, abuserLimited atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := b.do(t, "GET", "/v1/topics", "", abuser...)
				abused.Add(1)
				switch r.status {
				case 200:
					abuserOK.Add(1)
				case http.StatusTooManyRequests:
					abuserLimited.Add(1)
				}
			}
		})
	}
	for abuserLimited.Load() == 0 { // start once the abuser is being refused
		time.Sleep(time.Millisecond)
	}
	failed := 0
	for range 100 { // 10/s for 10 s of fake time, half the limit
		if r := b.do(t, "GET", "/v1/topics", "", victim...); r.status != 200 {
			failed++
			t.Errorf("victim token got %d: %s", r.status, r.raw)
		}
		clk.Advance(100 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if failed > 0 {
		t.Fatalf("%d of 100 requests of the well-behaved token failed", failed)
	}
	// The abuser is held to about burst + 20/s × 10 s.
	if n := abuserOK.Load(); n > 20+200*1.1 {
		t.Fatalf("abuser got %d of %d requests through; want ≤ 240", n, abused.Load())
	}
	t.Logf("abuser: %d requests, %d allowed; victim: 100 of 100 allowed", abused.Load(), abuserOK.Load())
}

func TestRateLimitConfig(t *testing.T) {
	for _, bad := range []Config{{IPRateLimit: -1}, {TokenRateLimit: math.NaN()}, {IPRateLimit: math.Inf(1)}, {TokenRateBurst: -1}} {
		bad.Queue = &spyQueue{}
		if _, err := New(bad); err == nil {
			t.Errorf("accepted %+v", bad)
		}
	}
	s, err := New(Config{Queue: &spyQueue{}})
	if err != nil {
		t.Fatal(err)
	}
	if s.tokenLim != nil || s.ipLim != nil {
		t.Error("rate limits are on by default; they must be off")
	}
}
