package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// roundTrips counts what a client sends: each command or pipeline is one
// round trip to Redis.
type roundTrips struct {
	n    atomic.Int64
	cmds atomic.Value // []string of the last counted round trips, for failures
}

func (h *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		h.note(cmd.Name())
		return next(ctx, cmd)
	}
}

func (h *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		names := "pipeline:"
		for _, c := range cmds {
			names += " " + c.Name()
		}
		h.note(names)
		return next(ctx, cmds)
	}
}

func (h *roundTrips) note(s string) {
	old, _ := h.cmds.Load().([]string)
	h.cmds.Store(append(append([]string(nil), old...), s))
}

// reset starts a new count.
func (h *roundTrips) reset() {
	h.n.Store(0)
	h.cmds.Store([]string(nil))
}

func (h *roundTrips) String() string {
	c, _ := h.cmds.Load().([]string)
	return fmt.Sprint(h.n.Load(), " ", c)
}

// TestOneServerRoundTrips: on a single Redis server a send is one round
// trip — topic registration, Seq reservation, the insert and the
// notification all happen in one script — whether the topic is new,
// known, or the id a duplicate; a promotion is one; a lease is one when
// a lease or peek of the last second answered Redis's TIME, else two (a
// read-only peek first: see leaseOneServer), and an empty one stops at
// the peek.
func TestOneServerRoundTrips(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	defer rdb.Close()
	rt := &roundTrips{}
	rdb.AddHook(rt)
	prefix := uniquePrefix()
	s, err := redisstore.Open(ctx, redisstore.Options{Client: rdb, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	send := func(topic, id string) store.InsertResult {
		t.Helper()
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: []store.InsertMessage{
			{ID: id, Relative: true, Delay: 60_000, MaxAttempts: 1},
		}})
		if err != nil {
			t.Fatal(err)
		}
		return res[0]
	}
	// Load the function library (a first FCALL finds no function: the
	// library is loaded and the call sent again, once per Redis server).
	send("warm", "w")
	if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "warm", Max: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "warm", Messages: []store.InsertMessage{
		{ID: "ready", Relative: true, MaxAttempts: 1}, // so that the lease gets past its peek and runs its script
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "warm", Max: 1, LeaseFor: 1000, Token: "w"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "warm", Messages: []store.InsertMessage{
		{ID: "ready2", Relative: true, MaxAttempts: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "warm", Max: 1, LeaseFor: 1000, Token: "w"}); err != nil {
		t.Fatal(err)
	}
	var seqs []uint64
	for _, c := range []struct {
		topic, id string
		dup       bool
	}{{"new-topic", "a", false}, {"new-topic", "b", false}, {"new-topic", "a", true}, {"other", "a", false}} {
		rt.reset()
		r := send(c.topic, c.id)
		if n := rt.n.Load(); n != 1 {
			t.Errorf("send %s/%s: %s round trips; want 1", c.topic, c.id, rt)
		}
		if r.Duplicate != c.dup {
			t.Errorf("send %s/%s: duplicate %v, want %v", c.topic, c.id, r.Duplicate, c.dup)
		}
		if c.topic == "new-topic" && !c.dup {
			seqs = append(seqs, r.Record.Seq)
		}
	}
	if len(seqs) != 2 || seqs[1] <= seqs[0] {
		t.Errorf("Seq of a then b: %v; want increasing in send order", seqs)
	}
	// A batch over every partition is one round trip too, and so is a
	// promotion of the whole topic (one script over all its partitions);
	// a lease is one such script (a peek first without a recent TIME:
	// below). They take messages in
	// (due, Seq) order across
	// partitions: 150 messages of one due time, so that Seq counters
	// reach two base-62 digits, letters included.
	var batch []store.InsertMessage
	for i := range 150 {
		batch = append(batch, store.InsertMessage{ID: fmt.Sprint("m", i), Relative: true, Delay: 1, MaxAttempts: 1})
	}
	batch = append(batch, store.InsertMessage{ID: "first", Relative: true, Delay: 0, MaxAttempts: 1})
	rt.reset()
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "order", Messages: batch})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load(); n != 1 {
		t.Errorf("send of %d messages: %s round trips; want 1", len(batch), rt)
	}
	time.Sleep(5 * time.Millisecond) // let Redis time pass the due times
	rt.reset()
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "order", Max: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load(); n != 1 || pr.Promoted != 150 {
		t.Errorf("promote: %d promoted in %s round trips; want 150 in 1", pr.Promoted, rt)
	}
	// Without a Redis TIME kept (none yet, or the last over a second
	// old), an empty lease is one read-only peek and stops there: it
	// keeps the peek's TIME, so the lease right after it is one script.
	redisstore.ForgetRedisClock(s)
	rt.reset()
	if recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "empty", Max: 10, LeaseFor: 60_000, Token: "tok"}); err != nil || len(recs) != 0 {
		t.Fatalf("empty lease: %v, %v", recs, err)
	}
	if c, _ := rt.cmds.Load().([]string); len(c) != 1 || c[0] != "fcall" {
		t.Errorf("empty lease without a TIME kept sent %q; want one peek script", c)
	}
	// A TIME is kept only from a round trip of under 50 ms: on a loaded
	// machine, peek again until one was that quick.
	for i := 0; !redisstore.KeepsRedisClock(s) && i < 50; i++ {
		if _, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "empty", Max: 10, LeaseFor: 60_000, Token: "tok"}); err != nil {
			t.Fatal(err)
		}
	}
	rt.reset()
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "order", Max: 1000, LeaseFor: 60_000, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	if n := rt.n.Load(); n != 1 || len(recs) != len(batch) {
		t.Errorf("lease: %d leased in %s round trips; want %d in 1", len(recs), rt, len(batch))
	}
	onePeek := func(op string) {
		t.Helper()
		// The peek is one script over the topic's partitions, not a
		// pipeline of one per partition.
		if c, _ := rt.cmds.Load().([]string); len(c) != 2 || c[0] != "fcall" || c[1] != "fcall" {
			t.Errorf("%s sent %q; want one peek script, then one lease script", op, c)
		}
	}
	// A lease of due scheduled messages (store.DueLeaser) is the same
	// scripts, and takes them without a promotion; here without a TIME
	// kept: a peek, then the lease script.
	due := make([]store.InsertMessage, 8)
	for i := range due {
		due[i] = store.InsertMessage{ID: fmt.Sprint("d", i), Relative: true, Delay: 1, MaxAttempts: 1}
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "due", Messages: due}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	redisstore.ForgetRedisClock(s)
	rt.reset()
	if recs, err := s.MessageLeaseDue(ctx, &store.MessageLeaseParams{Topic: "due", Max: 100, LeaseFor: 60_000, Token: "tok"}); err != nil || len(recs) != len(due) {
		t.Errorf("lease due: %d leased, %v; want %d", len(recs), err, len(due))
	}
	onePeek("lease due")
	for i, r := range recs {
		want := res[(i+len(batch)-1)%len(batch)].Record // "first" (due sooner), then the rest in send order
		if r.ID != want.ID || r.Seq != want.Seq {
			t.Fatalf("lease #%d: %s (Seq %d); want %s (Seq %d)", i, r.ID, r.Seq, want.ID, want.Seq)
		}
	}
	topics, err := rdb.SMembers(ctx, prefix+":topics").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(topics) != 5 {
		t.Errorf("registry %v; want warm, new-topic, other, order and due", topics)
	}
}

// TestNotifyFromScripts: the insert, promote and lease expiry scripts
// publish the notification themselves, on one server and on a Cluster (where PUBLISH
// from a script reaches subscribers on every node): one per send with
// new messages, carrying the earliest due; none for a send of duplicates;
// "ready now" (0) for a promotion and for an expiry back to ready, none
// for a promotion that moved nothing. One partition, so that each call runs one script and the
// sequence of notifications is exact.
func TestNotifyFromScripts(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		checkNotifications(t, standalone(t).URL())
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("cluster: skipped in -short")
		}
		checkNotifications(t, redistest.StartCluster(t, 3).URL())
	})
}

func checkNotifications(t *testing.T, url string) {
	prefix := uniquePrefix()
	one := func(o *redisstore.Options) { o.Prefix, o.Partitions = prefix, 1 }
	s := openAt(t, url, one)
	sub := openAt(t, url, one)
	got := make(chan string, 100)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	live := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- sub.Subscribe(sctx, func() { close(live) }, func(topic string, due int64) { got <- fmt.Sprintf("%s@%d", topic, due) })
	}()
	select {
	case <-live:
	case <-time.After(10 * time.Second):
		t.Fatal("subscription never live")
	}
	// Pub/Sub delivers in publishing order, so each notification heard is
	// the next one published: an extra one fails the next check.
	next := func(want string) {
		t.Helper()
		select {
		case n := <-got:
			if n != want {
				t.Fatalf("notification %q; want %q", n, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no notification; want %q", want)
		}
	}
	send := func(msgs ...store.InsertMessage) {
		t.Helper()
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "n", Now: now, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	promote := func(want int) {
		t.Helper()
		pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "n", Now: now + 1000, Max: 100})
		if err != nil {
			t.Fatal(err)
		}
		if pr.Promoted != want {
			t.Fatalf("promoted %d; want %d", pr.Promoted, want)
		}
	}
	send(store.InsertMessage{ID: "a", DueAt: now + 500, MaxAttempts: 1})
	next("n@1000500")
	var batch []store.InsertMessage
	for i := range 8 {
		batch = append(batch, store.InsertMessage{ID: fmt.Sprint("b", i), DueAt: now + 307 - int64(i), MaxAttempts: 1})
	}
	send(batch...)
	// The earliest of the batch, once.
	next("n@1000300")
	send(store.InsertMessage{ID: "a", DueAt: now + 1, MaxAttempts: 1}) // a duplicate: nothing
	send(store.InsertMessage{ID: "ready", DueAt: now - 1, MaxAttempts: 5})
	next("n@0")
	promote(9)
	next("n@0")
	promote(0) // nothing moved: nothing announced
	send(store.InsertMessage{ID: "c", DueAt: now + 777, MaxAttempts: 1})
	next("n@1000777")
	// A lease is not announced; its expiry, back to ready, is.
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "n", Now: now + 1000, Max: 1, LeaseFor: 10, Token: "x"})
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease: %d records, %v; want 1", len(recs), err)
	}
	exp, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now + 2000, Max: 10})
	if err != nil || len(exp) != 1 || exp[0].State != store.StateReady {
		t.Fatalf("lease expiry: %d records, %v; want 1, ready", len(exp), err)
	}
	next("n@0")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Subscribe: %v", err)
	}
}

// now is the caller's clock of checkNotifications (TimeCaller).
const now = 1_000_000
