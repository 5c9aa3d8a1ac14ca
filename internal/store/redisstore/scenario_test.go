package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

var ctx = context.Background()

// slotErrors counts replies that say a command or script crossed slots.
type slotErrors struct{ n atomic.Int64 }

func (h *slotErrors) count(err error) {
	if err != nil && (strings.Contains(err.Error(), "CROSSSLOT") || strings.Contains(err.Error(), "same slot")) {
		h.n.Add(1)
	}
}

func (h *slotErrors) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *slotErrors) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd.Err())
		return err
	}
}

func (h *slotErrors) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.count(c.Err())
		}
		return err
	}
}

// TestClusterSlotHygiene runs every script on a corpus of valid names on
// a 3-master cluster: no call may fail, and no reply may be CROSSSLOT.
func TestClusterSlotHygiene(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster: skipped in -short")
	}
	cl := redistest.StartCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), MaxRetries: -1})
	defer rdb.Close()
	hook := &slotErrors{}
	rdb.AddHook(hook)
	s, err := redisstore.Open(ctx, redisstore.Options{Client: rdb, Prefix: "dq", Partitions: 8})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	topics := []string{"a", "a:b:c", "x.y-z_1", "0", strings.Repeat("t", 200), strings.Repeat("Z9", 100)}
	ids := []string{"m", "a:b:c", "x@y+z=", "0", strings.Repeat("=", 200), "dq:{x}"[0:3]}
	for i := range 20 {
		ids = append(ids, fmt.Sprintf("id-%d", i))
	}
	for _, topic := range topics {
		exerciseAll(t, s, topic, ids)
	}
	if _, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: time.Now().UnixMilli() + 10*3600_000, Max: 1000}); err != nil {
		t.Fatalf("LeaseExpire: %v", err)
	}
	if _, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Window: -3600_000, Max: 100000}); err != nil {
		t.Fatalf("DedupPurge: %v", err)
	}
	if _, err := s.TopicList(ctx); err != nil {
		t.Fatalf("TopicList: %v", err)
	}
	if n := hook.n.Load(); n != 0 {
		t.Fatalf("%d CROSSSLOT replies", n)
	}
}

// exerciseAll runs each store operation (so each script) on topic.
func exerciseAll(t *testing.T, s *redisstore.Store, topic string, ids []string) {
	t.Helper()
	must := func(what string, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s %s: %v", topic, what, err)
		}
	}
	now := time.Now().UnixMilli()
	var msgs []store.InsertMessage
	for _, id := range ids {
		msgs = append(msgs, store.InsertMessage{ID: id, Payload: []byte(id), Headers: map[string]string{"k": id}, DueAt: now - 1, MaxAttempts: 1})
	}
	_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs})
	must("insert", err)
	_, err = s.MessageGet(ctx, topic, ids[0])
	must("get", err)
	_, err = s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: topic, ID: ids[1], DueAt: now - 5, Now: now})
	must("reschedule", err)
	_, err = s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: now, Max: 100})
	must("promote", err)
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: len(ids), LeaseFor: 60_000, Token: "tok"})
	must("lease", err)
	if len(recs) != len(ids) {
		t.Fatalf("%s: leased %d of %d", topic, len(recs), len(ids))
	}
	_, err = s.MessageExtend(ctx, &store.MessageExtendParams{Topic: topic, ID: recs[0].ID, Receipt: recs[0].Receipt, Now: now, LeaseFor: 120_000})
	must("extend", err)
	must("ack", s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: recs[0].ID, Receipt: recs[0].Receipt, Now: now}))
	var items []store.AckItem
	for _, r := range recs[1:5] {
		items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
	}
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Items: items, Now: now})
	must("ack many", err)
	must("ack many item", errors.Join(errs...))
	for _, r := range recs[5:10] { // MaxAttempts 1: dead
		_, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: now, Error: "boom"})
		must("nack", err)
	}
	_, _, err = s.DeadList(ctx, &store.DeadListParams{Topic: topic, Limit: 2})
	must("dead list", err)
	_, err = s.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, ID: recs[5].ID, Now: now})
	must("dead replay one", err)
	_, err = s.DeadReplay(ctx, &store.DeadReplayParams{Topic: topic, Now: now, Max: 2})
	must("dead replay", err)
	_, err = s.DeadDelete(ctx, &store.DeadDeleteParams{Topic: topic, ID: recs[8].ID})
	must("dead delete one", err)
	_, err = s.DeadDelete(ctx, &store.DeadDeleteParams{Topic: topic, Max: 10})
	must("dead delete", err)
	_, err = s.MessageCancel(ctx, &store.MessageCancelParams{Topic: topic, ID: recs[10].ID, Now: now})
	must("cancel", err)
	must("settings", s.TopicSettingsPut(ctx, topic, []byte(`{}`)))
	_, err = s.TopicGet(ctx, topic)
	must("topic get", err)
}

// TestMultiServerRace: three stores (three clients, as three servers
// would have) lease concurrently from one topic on one Redis with Redis
// TIME. No message is leased twice while its lease is valid (leases here
// outlast the test), and every message is acked exactly once.
func TestMultiServerRace(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	const servers, total, consumersPer = 3, 3000, 3
	var stores []*redisstore.Store
	for range servers {
		s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		stores = append(stores, s)
	}
	now := time.Now().UnixMilli()
	var (
		mu     sync.Mutex
		leased = map[string]int{}
		acked  atomic.Int64
		wg     sync.WaitGroup
	)
	// Producers and consumers run together.
	for p := range servers {
		wg.Go(func() {
			for b := 0; b < total/servers; b += 50 {
				var msgs []store.InsertMessage
				for i := b; i < b+50; i++ {
					msgs = append(msgs, store.InsertMessage{ID: fmt.Sprintf("p%d-%d", p, i), Payload: []byte("x"), DueAt: now - 1, MaxAttempts: 3})
				}
				if _, err := stores[p].MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "hot", Now: now, Messages: msgs}); err != nil {
					t.Errorf("insert: %v", err)
					return
				}
			}
		})
	}
	deadline := time.Now().Add(60 * time.Second)
	for i := range servers * consumersPer {
		s := stores[i%servers]
		wg.Go(func() {
			for acked.Load() < total && time.Now().Before(deadline) {
				recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "hot", Max: 16, LeaseFor: 3600_000, Token: fmt.Sprintf("c%d-%d", i, time.Now().UnixNano())})
				if err != nil {
					t.Errorf("lease: %v", err)
					return
				}
				mu.Lock()
				for _, r := range recs {
					leased[r.ID]++
					if leased[r.ID] > 1 {
						t.Errorf("%s leased twice while its lease is valid", r.ID)
					}
				}
				mu.Unlock()
				var items []store.AckItem
				for _, r := range recs {
					items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
				}
				if len(items) == 0 {
					time.Sleep(time.Millisecond)
					continue
				}
				errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "hot", Items: items})
				if err != nil {
					t.Errorf("ack: %v", err)
					return
				}
				for j, e := range errs {
					if e != nil {
						t.Errorf("ack %s: %v", items[j].ID, e)
					} else {
						acked.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	if acked.Load() != total || len(leased) != total {
		t.Fatalf("acked %d, leased %d distinct, want %d", acked.Load(), len(leased), total)
	}
	tr, err := stores[0].TopicGet(ctx, "hot")
	if err != nil {
		t.Fatal(err)
	}
	if want := (store.Counts{Acked: total}); tr.Counts != want {
		t.Fatalf("counts %+v, want %+v", tr.Counts, want)
	}
}

// TestKillRestartUnderLoad kills Redis (SIGKILL) under a send load with
// appendfsync always: every send answered nil survives the restart; calls
// while Redis is down fail with ErrUnavailable within the timeout; the
// same store works again after the restart.
func TestKillRestartUnderLoad(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	s := openAt(t, srv.URL())
	var (
		mu   sync.Mutex
		okID []string
		stop atomic.Bool
		wg   sync.WaitGroup
		seq  atomic.Int64
	)
	now := time.Now().UnixMilli()
	for w := range 4 {
		wg.Go(func() {
			for !stop.Load() {
				id := fmt.Sprintf("w%d-%d", w, seq.Add(1))
				_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "load", Now: now, Messages: []store.InsertMessage{{ID: id, Payload: []byte(id), DueAt: now + 60_000, MaxAttempts: 1}}})
				if err == nil {
					mu.Lock()
					okID = append(okID, id)
					mu.Unlock()
				} else if !errors.Is(err, store.ErrUnavailable) {
					t.Errorf("insert during fault: %v, want ErrUnavailable", err)
				}
			}
		})
	}
	for range 3 {
		time.Sleep(300 * time.Millisecond)
		srv.Kill()
		start := time.Now()
		_, err := s.MessageGet(ctx, "load", "x")
		if !errors.Is(err, store.ErrUnavailable) {
			t.Errorf("get while down: %v, want ErrUnavailable", err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("get while down took %v", d)
		}
		time.Sleep(200 * time.Millisecond)
		srv.Restart()
	}
	time.Sleep(300 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	// Works again without reopening (a pooled connection broken by the
	// restart may fail once).
	var tr *store.TopicRecord
	var err error
	for range 10 {
		if tr, err = s.TopicGet(ctx, "load"); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("store did not recover: %v", err)
	}
	lost := 0
	for _, id := range okID {
		if _, err := s.MessageGet(ctx, "load", id); err != nil {
			lost++
			t.Errorf("acknowledged send %s: %v", id, err)
		}
	}
	t.Logf("%d acknowledged sends, %d lost, %d stored", len(okID), lost, tr.Counts.Scheduled)
	if len(okID) == 0 {
		t.Fatal("no send succeeded")
	}
}

// TestFirstCallAfterRestart: after PoolSize dials in a row fail, a
// go-redis pool stops dialing and answers every call with the last dial
// error until a probe, made once a second, gets through. The store must
// not inherit that: once Redis is back, the first call succeeds, on both
// of the client's pools (single commands, and pipelines, which go-redis
// serves from a pool of their own).
func TestFirstCallAfterRestart(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	const poolSize = 2
	s := openAt(t, fmt.Sprintf("%s?pool_size=%d&pipeline_pool_size=%d", srv.URL(), poolSize, poolSize))
	now := time.Now().UnixMilli()
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now,
		Messages: []store.InsertMessage{{ID: "m", Payload: []byte("x"), DueAt: now + 60_000, MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	srv.Kill()
	// More failed calls than either pool holds connections: enough to
	// open go-redis's dial breaker on both. They take well under a second,
	// so without the fix its next probe is still to come when the calls
	// below run.
	for i := range 3 * poolSize {
		if _, err := s.MessageGet(ctx, "t", "m"); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("get %d while down: %v, want ErrUnavailable", i, err)
		}
		if _, err := s.TopicGet(ctx, "t"); !errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("topic %d while down: %v, want ErrUnavailable", i, err)
		}
	}
	srv.Restart()
	if m, err := s.MessageGet(ctx, "t", "m"); err != nil || m.ID != "m" {
		t.Fatalf("first get after the restart: %+v, %v; want message m", m, err)
	}
	if tr, err := s.TopicGet(ctx, "t"); err != nil || tr.Counts.Scheduled != 1 {
		t.Fatalf("first topic read after the restart: %+v, %v; want 1 scheduled", tr, err)
	}
}

// TestUnavailableFast: Open against a port nobody listens on fails fast
// with ErrUnavailable; a blackholed address is bounded by the timeout.
func TestUnavailableFast(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	// Accept and never answer: reads time out.
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	defer l.Close()
	start := time.Now()
	_, err = redisstore.Open(ctx, redisstore.Options{URL: "redis://" + addr + "/0", Timeout: 300 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Open on a silent server: %v, want ErrUnavailable", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("Open on a silent server took %v", d)
	}
}

// TestPreflightEviction: a server that may evict is refused, naming the
// setting.
func TestPreflightEviction(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	_, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL()})
	if err == nil || !strings.Contains(err.Error(), "maxmemory-policy") || !strings.Contains(err.Error(), "allkeys-lru") || !redisstore.EvictionRefused(err) {
		t.Fatalf("Open: %v, want a refusal naming maxmemory-policy allkeys-lru", err)
	}
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), AllowEviction: true, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatalf("Open with AllowEviction: %v", err)
	}
	s.Close()
}

// TestPreflightWarnings: AOF off, and appendfsync everysec, open with a
// warning in the log.
func TestPreflightWarnings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--appendonly", "no"}, "AOF is off"},
		{[]string{"--appendfsync", "everysec"}, "appendfsync is not always"},
	} {
		srv := redistest.Start(t, c.args...)
		var buf bytes.Buffer
		s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatalf("Open %v: %v", c.args, err)
		}
		s.Close()
		if !strings.Contains(buf.String(), c.want) || !strings.Contains(buf.String(), "level=WARN") {
			t.Errorf("Open %v: log %q, want a warning %q", c.args, buf.String(), c.want)
		}
	}
}

// TestRedisTimeSource: with the default TimeRedis, "now" is Redis TIME,
// whatever the caller's Now says, and PromoteResult.Now reports it.
func TestRedisTimeSource(t *testing.T) {
	srv := standalone(t)
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: uniquePrefix()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	real := time.Now().UnixMilli()
	farFuture := real + 24*3600_000
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: farFuture, Messages: []store.InsertMessage{
		{ID: "later", DueAt: real + 3600_000, MaxAttempts: 1},
		{ID: "due", DueAt: real - 1, MaxAttempts: 1},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Record.State != store.StateScheduled || res[1].Record.State != store.StateReady {
		t.Fatalf("states %v %v: want scheduled (by Redis time, not the caller's far-future Now), ready", res[0].Record.State, res[1].Record.State)
	}
	if c := res[0].Record.CreatedAt; c < real-5000 || c > real+5000 {
		t.Fatalf("CreatedAt %d is not Redis time (~%d)", c, real)
	}
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: farFuture, Max: 10})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Promoted != 0 || pr.NextDue != real+3600_000 || pr.Now < real-5000 || pr.Now > real+5000 {
		t.Fatalf("promote with a far-future caller Now: %+v; want nothing promoted early, Now = Redis time", *pr)
	}
}

// TestNotifier: a send through one store is announced to a subscriber of
// another.
func TestNotifier(t *testing.T) {
	srv := standalone(t)
	prefix := uniquePrefix()
	a, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 10)
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error)
	live := make(chan struct{})
	go func() {
		done <- b.Subscribe(sctx, func() { close(live) }, func(topic string, due int64) { got <- fmt.Sprintf("%s@%d", topic, due) })
	}()
	select {
	case <-live:
	case <-time.After(5 * time.Second):
		t.Fatal("subscription never live")
	}
	// Live means live: one send is heard, with the earliest due of the call.
	due := time.Now().UnixMilli() + 5000
	if _, err := a.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "n", Messages: []store.InsertMessage{
		{ID: fmt.Sprint(time.Now().UnixNano()), DueAt: due, MaxAttempts: 1},
		{ID: fmt.Sprint(time.Now().UnixNano() + 1), DueAt: due + 10, MaxAttempts: 1},
	}}); err != nil {
		t.Fatal(err)
	}
	select {
	case n := <-got:
		if n != fmt.Sprintf("n@%d", due) {
			t.Fatalf("notification %q", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification")
	}
	// Closing the store ends Subscribe.
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, store.ErrClosed) {
			t.Fatalf("Subscribe after Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Subscribe did not return after Close")
	}
	cancel()
}

// TestPartitionsDefault: a new keyspace gets one partition per topic on
// one Redis server, where more would only cost its scripts time, and four
// on a Cluster; a keyspace keeps the count stored by its first Open, so
// one made with four before the one-server default keeps them.
func TestPartitionsDefault(t *testing.T) {
	stored := func(t *testing.T, rdb redis.UniversalClient, prefix string) string {
		t.Helper()
		v, err := rdb.HGet(ctx, prefix+":config", "partitions").Result()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	open := func(t *testing.T, url, prefix string, parts int) {
		t.Helper()
		s, err := redisstore.Open(ctx, redisstore.Options{URL: url, Prefix: prefix, Partitions: parts})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("one server", func(t *testing.T) {
		srv := standalone(t)
		rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer rdb.Close()
		fresh, old := uniquePrefix(), uniquePrefix()
		open(t, srv.URL(), fresh, 0)
		if got := stored(t, rdb, fresh); got != "1" {
			t.Errorf("a new keyspace on one server has %s partitions, want 1", got)
		}
		open(t, srv.URL(), old, 4)
		open(t, srv.URL(), old, 0)
		if got := stored(t, rdb, old); got != "4" {
			t.Errorf("a keyspace made with 4 partitions has %s after an Open with the default, want 4", got)
		}
	})
	t.Run("cluster", func(t *testing.T) {
		if testing.Short() {
			t.Skip("cluster: skipped in -short")
		}
		cl := redistest.StartCluster(t, 3)
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs()})
		defer rdb.Close()
		prefix := uniquePrefix()
		open(t, cl.URL(), prefix, 0)
		if got := stored(t, rdb, prefix); got != "4" {
			t.Errorf("a new keyspace on a Cluster has %s partitions, want 4", got)
		}
	})
}

// TestPartitionsFixed: the partition count is fixed at the first Open of
// a prefix.
func TestPartitionsFixed(t *testing.T) {
	srv := standalone(t)
	prefix := uniquePrefix()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix, Partitions: 2})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{{ID: "a", MaxAttempts: 1}, {ID: "b", MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if _, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix, Partitions: 8}); err == nil {
		t.Fatal("Open with another partition count succeeded")
	}
	s, err = redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []string{"a", "b"} {
		if _, err := s.MessageGet(ctx, "t", id); err != nil {
			t.Fatalf("get %s after reopen with the default count: %v", id, err)
		}
	}
}

// TestConcurrentExpiry: a server leases and dies; two others sweep
// expired leases at once. Each message is expired exactly once
// (Failures 1) and comes back ready for redelivery.
func TestConcurrentExpiry(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	open := func() *redisstore.Store {
		s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	dying := open()
	const n = 500
	var msgs []store.InsertMessage
	for i := range n {
		msgs = append(msgs, store.InsertMessage{ID: fmt.Sprint("m", i), DueAt: 0, MaxAttempts: 5})
	}
	if _, err := dying.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	recs, err := dying.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: n, LeaseFor: 300, Token: "dead-server"})
	if err != nil || len(recs) != n {
		t.Fatalf("lease: %d, %v", len(recs), err)
	}
	dying.Close()
	sweepers := []*redisstore.Store{open(), open()}
	var expired atomic.Int64
	var wg sync.WaitGroup
	for _, s := range sweepers {
		defer s.Close()
		wg.Go(func() {
			deadline := time.Now().Add(10 * time.Second)
			for expired.Load() < n && time.Now().Before(deadline) {
				got, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Max: 7})
				if err != nil {
					t.Errorf("expire: %v", err)
					return
				}
				expired.Add(int64(len(got)))
			}
		})
	}
	wg.Wait()
	if expired.Load() != n {
		t.Fatalf("expired %d records, want %d", expired.Load(), n)
	}
	for _, r := range recs {
		got, err := sweepers[0].MessageGet(ctx, "t", r.ID)
		if err != nil || got.State != store.StateReady || got.Failures != 1 || got.LastError != "lease expired" {
			t.Fatalf("%s after expiry: %+v, %v", r.ID, got, err)
		}
	}
}

// TestMaxmemory: with noeviction at maxmemory, sends fail with
// ErrUnavailable, nothing stored disappears, and consumers can still
// lease and ack (so memory drains).
func TestMaxmemory(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t, "--maxmemory", "3mb")
	s := openAt(t, srv.URL())
	payload := bytes.Repeat([]byte("x"), 2000)
	var ok []string
	for i := 0; ; i++ {
		if i > 100000 {
			t.Fatal("maxmemory never reached")
		}
		id := fmt.Sprint("m", i)
		_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 1, Messages: []store.InsertMessage{{ID: id, Payload: payload, DueAt: 0, MaxAttempts: 1}}})
		if err != nil {
			if !errors.Is(err, store.ErrUnavailable) || !strings.Contains(err.Error(), "OOM") {
				t.Fatalf("insert at maxmemory: %v, want ErrUnavailable (OOM)", err)
			}
			break
		}
		ok = append(ok, id)
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.Counts.Ready != int64(len(ok)) {
		t.Fatalf("after OOM: %+v, %v; want %d ready", tr, err, len(ok))
	}
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: 1, Max: 100, LeaseFor: 999, Token: "c"})
	if err != nil || len(recs) != 100 {
		t.Fatalf("lease at maxmemory: %d, %v", len(recs), err)
	}
	// The function library lost (FUNCTION FLUSH) while Redis is over
	// maxmemory: FUNCTION LOAD is refused there, so the calls go as
	// scripts, which allow OOM.
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer admin.Close()
	if err := admin.FunctionFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "maxmemory", "1mb").Err(); err != nil {
		t.Fatal(err)
	}
	var items []store.AckItem
	for _, r := range recs {
		items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
	}
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: items, Now: 1})
	if err != nil || errors.Join(errs...) != nil {
		t.Fatalf("ack at maxmemory: %v %v", err, errors.Join(errs...))
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: ok[len(ok)-1], Now: 1}); err != nil {
		t.Fatalf("cancel at maxmemory: %v", err)
	}
	if info := admin.Info(ctx, "commandstats").Val(); !strings.Contains(info, "cmdstat_function|load:") || strings.Contains(info, "cmdstat_function|load:calls=0,usec=0,usec_per_call=0.00,rejected_calls=0") {
		t.Errorf("no FUNCTION LOAD tried at maxmemory:\n%s", info)
	}
}

// TestPreflightClusterFullCoverage: a Cluster whose masters have no
// replica and require full coverage stops serving every key when one
// master fails, however well the store isolates that master's partitions:
// Open says so. With full coverage off, it does not.
func TestPreflightClusterFullCoverage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		args []string
		warn bool
	}{
		{nil, true},
		{[]string{"--cluster-require-full-coverage", "no"}, false},
	} {
		cl := redistest.StartCluster(t, 3, c.args...)
		var buf bytes.Buffer
		s, err := redisstore.Open(ctx, redisstore.Options{URL: cl.URL(), Prefix: uniquePrefix(), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
		if err != nil {
			t.Fatalf("Open %v: %v", c.args, err)
		}
		s.Close()
		if got := strings.Contains(buf.String(), "cluster-require-full-coverage is yes"); got != c.warn {
			t.Errorf("Open %v: warned %v, want %v; log %q", c.args, got, c.warn, buf.String())
		}
	}
}
