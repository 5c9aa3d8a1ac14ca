package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServeRateLimitFlags: the four rate-limit settings follow the usual
// precedence (flag, DELAYQ_ env, config file) and default to off.
func TestServeRateLimitFlags(t *testing.T) {
	o, err := parseServe(nil, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if o.rateToken != 0 || o.rateIP != 0 || o.burstToken != 0 || o.burstIP != 0 {
		t.Fatalf("rate limits on by default: %+v", o)
	}
	cfg := writeFile(t, t.TempDir(), "c.json", `{"rate-limit-token":50,"rate-limit-token-burst":10,"rate-limit-ip":"5"}`)
	env := map[string]string{"DELAYQ_CONFIG": cfg, "DELAYQ_RATE_LIMIT_IP": "200.5"}
	o, err = parseServe([]string{"--rate-limit-ip-burst", "7"}, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if o.rateToken != 50 || o.burstToken != 10 || o.rateIP != 200.5 || o.burstIP != 7 {
		t.Fatalf("token %v/%d ip %v/%d; want 50/10 (file) 200.5 (env) /7 (flag)", o.rateToken, o.burstToken, o.rateIP, o.burstIP)
	}
	var stderr bytes.Buffer
	if code := runServe(context.Background(), []string{"--rate-limit-ip", "-1", "--data", filepath.Join(t.TempDir(), "d")}, io.Discard, &stderr); code == 0 || !strings.Contains(stderr.String(), "rate limit") {
		t.Fatalf("negative rate: exit %d, stderr %q", code, stderr.String())
	}
}

// TestServeRateLimitEndToEnd: the real server with a per-token limit
// answers 429 with Retry-After once the burst is spent; health checks are
// not limited. The rate is so low that no token comes back during the test.
func TestServeRateLimitEndToEnd(t *testing.T) {
	secret := "rl-secret-0123456789ab"
	args := []string{"--addr", "127.0.0.1:0", "--data", filepath.Join(t.TempDir(), "data"), "--log-level", "info",
		"--token", "ops:" + secret + ":admin:*", "--rate-limit-token", "0.001", "--rate-limit-token-burst", "2"}
	client := &http.Client{Transport: &http.Transport{}, Timeout: 30 * time.Second}
	defer client.CloseIdleConnections()
	line, stop := startServe(t, args)
	base := serveURL(t, line)
	get := func(path string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest("GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+secret)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for i := range 3 {
		res := get("/v1/topics")
		switch {
		case i < 2 && res.StatusCode != 200:
			t.Fatalf("request %d within the burst: %d", i, res.StatusCode)
		case i == 2 && res.StatusCode != http.StatusTooManyRequests:
			t.Fatalf("request over the burst: %d, want 429", res.StatusCode)
		case i == 2:
			if ra, err := strconv.Atoi(res.Header.Get("Retry-After")); err != nil || ra < 900 {
				t.Fatalf("Retry-After %q; want ≈ 1000 s (rate 0.001/s)", res.Header.Get("Retry-After"))
			}
		}
	}
	if res := get("/healthz"); res.StatusCode != 200 {
		t.Fatalf("healthz rate limited: %d", res.StatusCode)
	}
	client.CloseIdleConnections()
	if code, stderr := stop(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, stderr)
	}
}
