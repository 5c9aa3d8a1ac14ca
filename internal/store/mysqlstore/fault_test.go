package mysqlstore_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// With the database gone, calls fail with ErrUnavailable within the
// timeout instead of hanging, and Subscribe returns.
func TestServerGone(t *testing.T) {
	srv := mysqltest.Start(t)
	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{{ID: "a", Relative: true, MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	subErr := make(chan error, 1)
	live := make(chan struct{})
	go func() { subErr <- s.Subscribe(ctx, func() { close(live) }, func(string, int64) {}) }()
	<-live
	srv.Stop()
	start := time.Now()
	_, err = s.MessageGet(ctx, "t", "a")
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("MessageGet with the server gone: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("MessageGet took %v", d)
	}
	select {
	case err := <-subErr:
		if !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("Subscribe: %v, want ErrUnavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Subscribe still running with the server gone")
	}
}
