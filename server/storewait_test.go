package server_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/server"
)

// TestNewWaitsForStore: New keeps trying a store that is unavailable at
// start (Redis down, then up on the same port) and opens it once it
// answers; a store still down when StoreWait runs out is an error naming
// the wait; a stop while waiting ends the wait at once; StoreWait < 0
// and errors no wait can fix (credentials refused included) fail at once.
func TestNewWaitsForStore(t *testing.T) {
	rs := redistest.Start(t)
	rs.Kill()

	t.Run("store comes up", func(t *testing.T) {
		type opened struct {
			srv *server.Server
			err error
		}
		done := make(chan opened, 1)
		go func() {
			srv, err := server.New(context.Background(), server.Config{RedisURL: rs.URL(), StoreWait: 30 * time.Second, Logger: quiet()})
			done <- opened{srv, err}
		}()
		select {
		case o := <-done:
			t.Fatalf("New returned while Redis was down: %v", o.err)
		case <-time.After(time.Second):
		}
		rs.Restart()
		select {
		case o := <-done:
			if o.err != nil {
				t.Fatalf("New after Redis came up: %v", o.err)
			}
			if err := o.srv.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
		case <-time.After(15 * time.Second): // retries are at most 5 s apart
			t.Fatal("New did not open Redis within 15 s of its start")
		}
		rs.Kill()
	})

	t.Run("still down", func(t *testing.T) {
		t0 := time.Now()
		_, err := server.New(context.Background(), server.Config{RedisURL: rs.URL(), StoreWait: 1500 * time.Millisecond, Logger: quiet()})
		took := time.Since(t0)
		if err == nil || !strings.Contains(err.Error(), "still unavailable after") || !strings.Contains(err.Error(), "StoreWait") {
			t.Fatalf("New: %v; want the store's error and the wait", err)
		}
		if took < 1500*time.Millisecond || took > 5*time.Second {
			t.Fatalf("New gave up after %s; want the 1.5 s wait", took)
		}
	})

	t.Run("stopped while waiting", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 700*time.Millisecond)
		defer cancel()
		t0 := time.Now()
		_, err := server.New(ctx, server.Config{RedisURL: rs.URL(), StoreWait: time.Minute, Logger: quiet()})
		if err == nil || !strings.Contains(err.Error(), "stopped while waiting") || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("New: %v; want it stopped by its context", err)
		}
		if took := time.Since(t0); took > 3*time.Second {
			t.Fatalf("New returned %s after its context ended", took)
		}
	})

	locked := redistest.Start(t)
	rc := redis.NewClient(&redis.Options{Addr: locked.Addr()})
	if err := rc.ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	for _, tc := range []struct {
		name string
		cfg  server.Config
		msg  string
	}{
		{"no wait", server.Config{RedisURL: rs.URL(), StoreWait: -1}, "connect"},
		{"a refusal no wait fixes", server.Config{RedisURL: rs.URL(), RedisPartitions: 100000, StoreWait: time.Minute}, "Partitions"},
		{"credentials refused", server.Config{RedisURL: locked.URL(), StoreWait: time.Minute}, "NOAUTH"},
		{"wrong password", server.Config{RedisURL: "redis://:nope@" + locked.Addr() + "/0", StoreWait: time.Minute}, "WRONGPASS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.Logger = quiet()
			t0 := time.Now()
			_, err := server.New(context.Background(), tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("New: %v; want an error with %q", err, tc.msg)
			}
			if took := time.Since(t0); took > time.Second {
				t.Fatalf("New failed after %s; want at once", took)
			}
		})
	}
}
