package mysqlstore_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// A send made through one store (server) reaches the subscriber of
// another on the same tables: ready now as dueAt 0, later as its due time.
func TestNotifyAcrossStores(t *testing.T) {
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	openP := func() *mysqlstore.Store {
		s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	a, b := openP(), openP()
	type note struct {
		topic string
		due   int64
	}
	notes := make(chan note, 16)
	live := make(chan struct{})
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := a.Subscribe(sctx, func() { close(live) }, func(topic string, due int64) { notes <- note{topic, due} })
		if err != nil {
			t.Errorf("Subscribe: %v", err)
		}
	}()
	defer func() { cancel(); wg.Wait() }()
	select {
	case <-live:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription not live")
	}
	wait := func(want note) {
		t.Helper()
		select {
		case n := <-notes:
			if n != want {
				t.Fatalf("notification %+v, want %+v", n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification, want %+v", want)
		}
	}
	res, err := b.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "later", Messages: []store.InsertMessage{{ID: "x", Relative: true, Delay: 3_600_000, MaxAttempts: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	wait(note{"later", res[0].Record.DueAt})
	if _, err := b.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "now", Messages: []store.InsertMessage{{ID: "y", Relative: true, MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	wait(note{"now", 0})
}
