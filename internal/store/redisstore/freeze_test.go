package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestLeaseDuringFreezeLeasesNothing: a lease called while Redis is
// frozen (SIGSTOP) fails, and what it sent, which Redis runs when it
// resumes, leases nothing: the ready message stays ready for the next
// lease. A lease that sent its script straight away would leave the
// message inflight to nobody until its lease ran out (in S11's freeze,
// messages that came due during it were delivered a lease length late).
// The same for MessageLeaseDue and a due scheduled message: it stays
// scheduled.
//
// On one server a lease that follows another within a second sends its
// script without a peek (runby.go): its run-by time from the earlier
// lease's TIME refuses it. "peek/…" drop that TIME first.
func TestLeaseDuringFreezeLeasesNothing(t *testing.T) {
	t.Parallel()
	t.Run("ready", func(t *testing.T) { t.Parallel(); checkLeaseDuringFreeze(t, false, false, false) })
	t.Run("due", func(t *testing.T) { t.Parallel(); checkLeaseDuringFreeze(t, true, false, false) })
	t.Run("peek/ready", func(t *testing.T) { t.Parallel(); checkLeaseDuringFreeze(t, false, false, false, withPeek) })
	t.Run("peek/due", func(t *testing.T) { t.Parallel(); checkLeaseDuringFreeze(t, true, false, false, withPeek) })
}

// withPeek makes checkLeaseDuringFreeze's lease on one server peek first.
const withPeek = true

// TestLeaseFrozenAfterPeekLeasesNothing: Redis freezes after answering a
// lease's peek and before reading its lease script (testHookLease stops
// it there). The script waits in the socket and runs when Redis resumes,
// after the call gave up; it must lease nothing (its run-by time, from the
// peek's TIME, has passed), or the message would be inflight to nobody
// until its lease ran out. The peek alone does not guard this window.
// On one server and on a 3-master Cluster (all masters frozen). On one
// server "ready" and "due" send the script without a peek (a TIME kept
// from the warm-up lease): Redis freezes just before it.
func TestLeaseFrozenAfterPeekLeasesNothing(t *testing.T) {
	// Not parallel: testHookLease is package-wide.
	t.Run("ready", func(t *testing.T) { checkLeaseDuringFreeze(t, false, true, false) })
	t.Run("due", func(t *testing.T) { checkLeaseDuringFreeze(t, true, true, false) })
	t.Run("peek/ready", func(t *testing.T) { checkLeaseDuringFreeze(t, false, true, false, withPeek) })
	t.Run("peek/due", func(t *testing.T) { checkLeaseDuringFreeze(t, true, true, false, withPeek) })
	t.Run("cluster/ready", func(t *testing.T) { checkLeaseDuringFreeze(t, false, true, true) })
	t.Run("cluster/due", func(t *testing.T) { checkLeaseDuringFreeze(t, true, true, true) })
}

// checkLeaseDuringFreeze freezes Redis before a lease call, or with
// afterPeek between its peek and its lease script, and checks that what
// the call sent leased nothing when Redis resumed.
func checkLeaseDuringFreeze(t *testing.T, due, afterPeek, cluster bool, peek ...bool) {
	var servers []*redistest.Server
	var url string
	if cluster {
		cl := downCluster(t)
		servers, url = cl.Nodes, cl.URL()
	} else {
		srv := redistest.Start(t)
		servers, url = []*redistest.Server{srv}, srv.URL()
	}
	pause := func() {
		for _, srv := range servers {
			srv.Pause()
		}
	}
	resume := func() {
		for _, srv := range servers {
			srv.Resume()
		}
	}
	ctx := context.Background()
	const topic, now = "frz", int64(1_000_000)
	s, err := Open(ctx, Options{URL: url, Prefix: "frz", TimeSource: TimeCaller, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.oneServer == cluster {
		t.Fatalf("oneServer %v on a Cluster %v: not the path under test", s.oneServer, cluster)
	}
	lease := func() ([]*store.Record, error) {
		p := &store.MessageLeaseParams{Topic: topic, Now: now, Max: 10, LeaseFor: 60_000, Token: "tok"}
		if due {
			return s.MessageLeaseDue(ctx, p)
		}
		return s.MessageLease(ctx, p)
	}
	// With due, "a" is scheduled (sent before it was due) and due by now.
	sentAt, want := now, store.StateReady
	if due {
		sentAt, want = now-10, store.StateScheduled
	}
	// Load the scripts and leave an idle pooled connection, which the
	// call during the freeze writes to.
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now,
		Messages: []store.InsertMessage{{ID: "warm", DueAt: now - 1, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	if recs, err := lease(); err != nil || len(recs) != 1 {
		t.Fatalf("warm-up lease: %d records, %v", len(recs), err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: sentAt,
		Messages: []store.InsertMessage{{ID: "a", DueAt: now - 1, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	var admins []*redis.Client
	for _, srv := range servers {
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		admins = append(admins, admin)
	}
	scripts := func() int64 {
		var n int64
		for _, admin := range admins {
			info, err := admin.Info(ctx, "commandstats").Result()
			if err != nil {
				t.Fatal(err)
			}
			for line := range strings.SplitSeq(info, "\n") {
				for _, c := range []string{"cmdstat_fcall:calls=", "cmdstat_evalsha:calls=", "cmdstat_eval:calls="} {
					if rest, ok := strings.CutPrefix(line, c); ok {
						var v int64
						fmt.Sscanf(rest, "%d", &v)
						n += v
					}
				}
			}
		}
		return n
	}
	// The path under test: on one server, a lease with a Redis TIME kept
	// (a round trip under 50 ms: lease again until one was) or with peek,
	// none.
	for i := 0; !cluster && s.clock.Load() == nil && i < 50; i++ {
		if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "other", Now: now, Max: 1, LeaseFor: 60_000, Token: "tok"}); err != nil {
			t.Fatal(err)
		}
	}
	if !cluster && s.clock.Load() == nil {
		t.Fatal("no lease kept Redis's TIME: the lease without a peek is not under test")
	}
	if len(peek) > 0 && peek[0] {
		s.clock.Store(nil)
	}
	before := scripts()

	if afterPeek {
		paused := false
		testHookLease = func(int) {
			if !paused {
				paused = true
				pause()
			}
		}
		_, err = lease()
		testHookLease = nil
		if !paused {
			t.Fatal("the lease call never reached its lease script")
		}
		// The run-by instant is the call's deadline plus the time the peek
		// took to reach Redis: stay frozen well past that.
		time.Sleep(300 * time.Millisecond)
	} else {
		pause()
		_, err = lease()
	}
	resume()
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("lease during the freeze: %v; want store.ErrUnavailable", err)
	}
	// Wait until Redis has run what the call sent (a connection made
	// after the resume is served after the frozen socket's bytes, but
	// wait for the count anyway).
	for deadline := time.Now().Add(10 * time.Second); scripts() == before; {
		if time.Now().After(deadline) {
			t.Fatal("what the lease sent during the freeze never ran")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Read back through a store with a generous timeout: on a loaded
	// machine the first calls after the resume may be slow.
	s2, err := Open(ctx, Options{URL: url, Prefix: "frz", TimeSource: TimeCaller, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	r, err := s2.MessageGet(ctx, topic, "a")
	if err != nil {
		t.Fatal(err)
	}
	if r.State != want {
		t.Fatalf("after the freeze, the message is %v (deliveries %d); want %v: the failed lease leased it to nobody", r.State, r.Deliveries, want)
	}
	if recs, err := s2.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 10, LeaseFor: 60_000, Token: "tok2"}); err != nil || len(recs) != 1 || recs[0].ID != "a" {
		t.Fatalf("lease after the freeze: %v, %v; want a", recs, err)
	}
}
