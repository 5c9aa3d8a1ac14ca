package redisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// TestPing: readiness's ping answers nil while Redis answers, an error
// once it is gone, and ErrClosed after Close. (On a Cluster it pings
// every master: TestClusterMasterDown.)
func TestPing(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	s := openAt(t, srv.URL())
	ctx := context.Background()
	if err := s.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	srv.Kill()
	if err := s.Ping(ctx); err == nil {
		t.Fatal("Ping with Redis killed: nil, want an error")
	}
	_ = s.Close()
	if err := s.Ping(ctx); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Ping after Close: %v, want ErrClosed", err)
	}
}
