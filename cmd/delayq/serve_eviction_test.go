package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestServeEvictionNamesFlag: on a Redis that may evict, serve refuses to
// start and names its own flag, not the library's option.
func TestServeEvictionNamesFlag(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis-server")
	}
	rs := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	var stdout, stderr bytes.Buffer
	code := runServe(context.Background(), []string{"--addr", "127.0.0.1:0", "--redis", rs.URL(), "--data", filepath.Join(t.TempDir(), "never")}, &stdout, &stderr)
	msg := stderr.String()
	if code != 1 || !strings.Contains(msg, `maxmemory-policy "allkeys-lru"`) || !strings.Contains(msg, "(or --redis-allow-eviction, unsafe)") ||
		strings.Contains(msg, "Options.AllowEviction") || strings.Contains(msg, "Config.RedisAllowEviction") {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
}
