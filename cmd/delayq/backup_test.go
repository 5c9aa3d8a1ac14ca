package main

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestBackupRestore: `delayq backup` of a live server taking sends holds
// every message answered before it began; a server started on the
// extracted archive serves them, due times and states intact.
func TestBackupRestore(t *testing.T) {
	ctx := context.Background()
	line, stop := startServe(t, []string{"--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-level", "info", "--no-dashboard"})
	base := serveURL(t, line)
	cl, err := delayq.NewClient(base)
	if err != nil {
		t.Fatal(err)
	}
	const before = 300
	for i := range before {
		if _, err := cl.Send(ctx, "orders.close", delayq.NewSendRequest([]byte(fmt.Sprintf(`{"order":%d}`, i)),
			delayq.WithID(fmt.Sprintf("o%04d", i)), delayq.After(time.Hour))); err != nil {
			t.Fatal(err)
		}
	}
	var during atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			if _, err := cl.Send(ctx, "orders.close", delayq.NewSendRequest([]byte("x"), delayq.WithID(fmt.Sprintf("d%05d", i)), delayq.After(time.Hour))); err != nil {
				t.Error(err)
				return
			}
			during.Add(1)
		}
	})
	archive := filepath.Join(t.TempDir(), "delayq.tar")
	r := runCLI(t, "backup", "--out", archive, "--server", base)
	close(done)
	wg.Wait()
	r.ok(t)
	if !strings.HasPrefix(r.stdout, "backup written to "+archive) {
		t.Fatalf("stdout %q", r.stdout)
	}
	if during.Load() == 0 {
		t.Fatal("no send ran during the backup")
	}
	runCLI(t, "backup", "--out", archive, "--server", base).failed(t, exitUsage, "delayq backup: --out "+archive+" exists")
	if code, stderr := stop(); code != 0 {
		t.Fatalf("serve exit %d: %s", code, stderr)
	}

	restored := filepath.Join(t.TempDir(), "restored")
	if r := runCLI(t, "restore", "--from", archive, "--data", restored).ok(t); !strings.HasPrefix(r.stdout, "restored ") {
		t.Fatalf("restore: %q", r.stdout)
	}
	runCLI(t, "restore", "--from", archive, "--data", restored).failed(t, exitRequest, "delayq restore: pebblestore: restore: "+restored+" is not empty")
	line, stop = startServe(t, []string{"--addr", "127.0.0.1:0", "--data", restored, "--log-level", "info", "--no-dashboard"})
	defer stop()
	cl2, err := delayq.NewClient(serveURL(t, line))
	if err != nil {
		t.Fatal(err)
	}
	for i := range before {
		id := fmt.Sprintf("o%04d", i)
		m, err := cl2.Get(ctx, "orders.close", id)
		if err != nil {
			t.Fatalf("restored server lacks %s: %v", id, err)
		}
		if m.State != delayq.StateScheduled || string(m.Payload) != fmt.Sprintf(`{"order":%d}`, i) || time.Until(m.DeliverAt) < 50*time.Minute {
			t.Fatalf("restored %s: %+v", id, m)
		}
	}
}
