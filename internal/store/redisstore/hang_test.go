package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// hangTimeout is Options.Timeout in the hang tests. A call that makes
// several round trips used to take one Timeout per round trip (a send:
// 3); now each call is bounded as a whole.
const hangTimeout = 500 * time.Millisecond

// failsWithin runs fn and wants an error wrapping store.ErrUnavailable
// (and no context error: the caller's ctx did not end) within limit.
func failsWithin(t *testing.T, what string, limit time.Duration, fn func() error) {
	t.Helper()
	start := time.Now()
	err := fn()
	d := time.Since(start)
	if !errors.Is(err, store.ErrUnavailable) {
		t.Errorf("%s while Redis hangs: %v, want ErrUnavailable", what, err)
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		t.Errorf("%s while Redis hangs: %v: a context error, but the caller's ctx did not end", what, err)
	}
	if d > limit {
		t.Errorf("%s while Redis hangs took %v, want < %v", what, d, limit)
	}
	t.Logf("%s: %v after %v", what, err, d.Round(time.Millisecond))
}

func hangSend(s *redisstore.Store, topic, id string) error {
	now := time.Now().UnixMilli()
	_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: []store.InsertMessage{
		{ID: id, Payload: []byte(id), DueAt: now, MaxAttempts: 3},
	}})
	return err
}

// recovers retries fn until it succeeds: the first calls after SIGCONT
// may still meet connections that were given up during the hang.
func recovers(t *testing.T, what string, fn func() error) {
	t.Helper()
	var err error
	for range 20 {
		if err = fn(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s after Redis resumed: %v", what, err)
}

// TestHangFailsFast: while Redis hangs (SIGSTOP: connections accepted,
// nothing answered) a send — for a new topic or an existing one — and
// every other call fails with ErrUnavailable within about one
// Options.Timeout, not one per round trip; the sweeps over all topics
// within their larger bound. After SIGCONT the same store works again.
func TestHangFailsFast(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := openAt(t, srv.URL()+"?pool_size=4", func(o *redisstore.Options) {
		o.Timeout = hangTimeout
		o.TimeSource = redisstore.TimeRedis
	})
	// An existing topic with a message in each state the calls below touch.
	for i := range 8 {
		if err := hangSend(s, "old", fmt.Sprintf("m%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "old", Max: 2, LeaseFor: time.Minute.Milliseconds(), Token: "tok"})
	if err != nil || len(leased) != 2 {
		t.Fatalf("lease: %v, %d records", err, len(leased))
	}

	srv.Pause()
	paused := true
	defer func() {
		if paused {
			srv.Resume()
		}
	}()
	limit := 2 * hangTimeout
	failsWithin(t, "send (existing topic)", limit, func() error { return hangSend(s, "old", "h1") })
	failsWithin(t, "send (new topic)", limit, func() error { return hangSend(s, "fresh", "h2") })
	// More sends at once than the pool has connections: the wait for a
	// connection counts against the same bound.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			failsWithin(t, fmt.Sprintf("concurrent send %d", i), limit, func() error {
				return hangSend(s, fmt.Sprintf("c%d", i%2), fmt.Sprintf("c%d", i))
			})
		})
	}
	wg.Wait()
	failsWithin(t, "lease", limit, func() error {
		_, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "old", Max: 5, LeaseFor: time.Minute.Milliseconds(), Token: "t2"})
		return err
	})
	failsWithin(t, "promote", limit, func() error {
		_, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "old", Max: 5})
		return err
	})
	failsWithin(t, "ack many", limit, func() error {
		_, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "old", Items: []store.AckItem{
			{ID: leased[0].ID, Receipt: leased[0].Receipt}, {ID: leased[1].ID, Receipt: leased[1].Receipt},
		}})
		return err
	})
	failsWithin(t, "topic get", limit, func() error { _, err := s.TopicGet(ctx, "old"); return err })
	failsWithin(t, "dead replay", limit, func() error {
		_, err := s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "old", Max: 5})
		return err
	})
	// The sweeps over every topic have one Timeout per round trip (3).
	sweep := 4 * hangTimeout
	failsWithin(t, "lease expire", sweep, func() error {
		_, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Max: 10})
		return err
	})
	failsWithin(t, "dedup purge", sweep, func() error {
		_, err := s.DedupPurge(ctx, &store.DedupPurgeParams{Max: 10})
		return err
	})
	failsWithin(t, "topic list", sweep, func() error { _, err := s.TopicList(ctx); return err })

	// A caller's own, shorter deadline still wins, and its error stays a
	// context error.
	cctx, cancel := context.WithTimeout(ctx, hangTimeout/5)
	start := time.Now()
	_, err = s.TopicGet(cctx, "old")
	cancel()
	if d := time.Since(start); !errors.Is(err, store.ErrUnavailable) || d > hangTimeout {
		t.Errorf("topic get with a %v ctx: %v after %v", hangTimeout/5, err, d)
	}

	srv.Resume()
	paused = false
	// Works again without reopening. The sends given up during the hang
	// may or may not have been applied (Redis runs what it had buffered):
	// a resend with the same id succeeds either way.
	recovers(t, "send (existing topic)", func() error { return hangSend(s, "old", "h1") })
	recovers(t, "send (new topic)", func() error { return hangSend(s, "fresh", "h2") })
	recovers(t, "lease", func() error {
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "fresh", Max: 1, LeaseFor: time.Minute.Milliseconds(), Token: "t3"})
		if err == nil && len(recs) != 1 {
			err = fmt.Errorf("leased %d, want 1", len(recs))
		}
		return err
	})
	if _, err := s.TopicList(ctx); err != nil {
		t.Fatalf("topic list after Redis resumed: %v", err)
	}
}

// TestHangFailsFastOwnClient: a client passed in Options.Client. Its
// ReadTimeout stands in for Options.Timeout. With ContextTimeoutEnabled
// the bound is the same as with a client Open makes. Without it the
// deadline only keeps a further round trip from starting: the one in
// flight — a new connection's handshake, then the command — runs to the
// client's own timeouts, as before; Open warns about that.
func TestHangFailsFastOwnClient(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	for _, cte := range []bool{true, false} {
		t.Run(fmt.Sprintf("ContextTimeoutEnabled=%v", cte), func(t *testing.T) {
			rdb := redis.NewClient(&redis.Options{
				Addr: srv.Addr(), MaxRetries: -1, ContextTimeoutEnabled: cte,
				DialTimeout: hangTimeout, ReadTimeout: hangTimeout, WriteTimeout: hangTimeout, PoolTimeout: hangTimeout,
			})
			defer rdb.Close()
			var logs syncBuffer
			s := openAt(t, "", func(o *redisstore.Options) {
				o.Client = rdb
				o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
			})
			if warned := strings.Contains(logs.String(), "ContextTimeoutEnabled off"); warned == cte {
				t.Errorf("Open logged %q; want a ContextTimeoutEnabled warning: %v", logs.String(), !cte)
			}
			if err := hangSend(s, "old", "m"); err != nil {
				t.Fatal(err)
			}
			// About one timeout for the call plus scheduling slack on a
			// loaded machine (1.0025 s was seen for a 1 s limit); the
			// failure this guards against costs a timeout per round trip.
			limit := 2*hangTimeout + hangTimeout/2
			if !cte {
				limit = 3*hangTimeout + hangTimeout/2 // handshake + command, each its own ReadTimeout
			}
			srv.Pause()
			failsWithin(t, "send (existing topic)", limit, func() error { return hangSend(s, "old", "h1") })
			failsWithin(t, "send (new topic)", limit, func() error { return hangSend(s, fmt.Sprintf("fresh%v", cte), "h2") })
			srv.Resume()
			recovers(t, "send", func() error { return hangSend(s, "old", "h1") })
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a logger and a test goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// TestLuaFlushed: after Redis lost delayq's Lua (a restarted server
// without persistence: FUNCTION FLUSH, or SCRIPT FLUSH where functions are
// refused), the pipelined calls re-run what answered that it was missing
// in pipelines, loading the library once per server (or each script with
// one EVAL per server) rather than re-running every call on its own, and
// answer as usual.
func TestLuaFlushed(t *testing.T) {
	t.Parallel()
	for _, scripts := range []bool{false, true} {
		name := "functions"
		if scripts {
			name = "scripts"
		}
		t.Run(name+"/standalone", func(t *testing.T) {
			t.Parallel()
			srv := redistest.Start(t)
			luaFlushed(t, srv.URL(), []string{srv.Addr()}, scripts)
		})
		t.Run(name+"/cluster", func(t *testing.T) {
			t.Parallel()
			if testing.Short() {
				t.Skip("cluster: skipped in -short")
			}
			cl := redistest.StartCluster(t, 3)
			luaFlushed(t, cl.URL(), cl.Addrs(), scripts)
		})
	}
}

// refuseFunctions adds a user that may run anything but FUNCTION and
// FCALL on each of addrs, and returns url with that user.
func refuseFunctions(t *testing.T, url string, addrs []string) string {
	t.Helper()
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		err := c.Do(ctx, "acl", "setuser", "scripts", "on", ">pw", "~*", "&*", "+@all", "-fcall", "-fcall_ro", "-function").Err()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	scheme, rest, _ := strings.Cut(url, "://")
	return scheme + "://scripts:pw@" + rest
}

func luaFlushed(t *testing.T, url string, addrs []string, scripts bool) {
	// How the Lua is lost, and what reloads it: FUNCTION LOAD once per
	// server, or EVAL once per script and server.
	flushCmd, loadStat, perScript := "function", "function|load", false
	if scripts {
		url = refuseFunctions(t, url, addrs)
		flushCmd, loadStat, perScript = "script", "eval", true
	}
	s := openAt(t, url, func(o *redisstore.Options) { o.Partitions = 8 })
	now := time.Now().UnixMilli()
	topics := []string{"a", "b", "c"}
	for _, topic := range topics {
		var msgs []store.InsertMessage
		for i := range 16 {
			msgs = append(msgs, store.InsertMessage{ID: fmt.Sprintf("%s%d", topic, i), DueAt: now, MaxAttempts: 5})
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
		recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: 10, LeaseFor: 1000, Token: "tok"})
		if err != nil || len(recs) != 10 {
			t.Fatalf("lease %s: %v, %d records", topic, err, len(recs))
		}
	}
	loads := func() (n int64) {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			info, err := c.Info(ctx, "commandstats").Result()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
			for _, line := range strings.Split(info, "\n") {
				if rest, ok := strings.CutPrefix(line, "cmdstat_"+loadStat+":calls="); ok {
					var calls int64
					fmt.Sscanf(rest, "%d", &calls)
					n += calls
				}
			}
		}
		return n
	}
	flush := func() {
		for _, a := range addrs {
			c := redis.NewClient(&redis.Options{Addr: a})
			err := c.Do(ctx, flushCmd, "flush").Err()
			c.Close()
			if err != nil {
				t.Fatal(err)
			}
		}
	}

	flush()
	before := loads()
	list, err := s.TopicList(ctx) // info script × 3 topics × 8 partitions
	if err != nil || len(list) != 3 {
		t.Fatalf("topic list after %s flush: %v, %d topics", flushCmd, err, len(list))
	}
	for _, tr := range list {
		if want := (store.Counts{Ready: 6, Inflight: 10}); tr.Counts != want {
			t.Errorf("topic %s: counts %+v, want %+v", tr.Name, tr.Counts, want)
		}
	}
	if n := loads() - before; n < 1 || n > int64(len(addrs)) {
		t.Errorf("topic list after %s flush sent %d %s, want 1-%d (one per server at most)", flushCmd, n, loadStat, len(addrs))
	}

	flush()
	before = loads()
	recs, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now + 2000, Max: 100}) // peek, then expire scripts
	if err != nil || len(recs) != 30 {
		t.Fatalf("lease expire after %s flush: %v, %d records, want 30", flushCmd, err, len(recs))
	}
	lo, hi := int64(1), int64(len(addrs)) // the library, once per server
	if perScript {
		lo, hi = 2, 2*int64(len(addrs))
	}
	if n := loads() - before; n < lo || n > hi {
		t.Errorf("lease expire after %s flush sent %d %s, want %d-%d (once per server, and per script when scripts)", flushCmd, n, loadStat, lo, hi)
	}
	for _, topic := range topics {
		tr, err := s.TopicGet(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		if want := (store.Counts{Ready: 16}); tr.Counts != want {
			t.Errorf("topic %s after expiry: counts %+v, want %+v", topic, tr.Counts, want)
		}
	}
}

// TestLibraryKeptAcrossRestart: Redis keeps functions in its AOF, so a
// server killed and restarted still has delayq's library: the first
// calls after the restart run their functions without loading it again.
func TestLibraryKeptAcrossRestart(t *testing.T) {
	t.Parallel()
	srv := redistest.Start(t)
	s := openAt(t, srv.URL())
	now := time.Now().UnixMilli()
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: []store.InsertMessage{{ID: "a", DueAt: now, MaxAttempts: 5}}}); err != nil {
		t.Fatal(err)
	}
	srv.Restart() // SIGKILL, then the AOF replayed
	var recs []*store.Record
	var err error
	for range 50 { // the client's pooled connections died with the server
		if recs, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: now, Max: 10, LeaseFor: 1000, Token: "tok"}); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err != nil || len(recs) != 1 {
		t.Fatalf("lease after restart: %v, %d records, want 1", err, len(recs))
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer c.Close()
	info, err := c.Info(ctx, "commandstats").Result() // counted since the restart
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "cmdstat_fcall:calls=") || strings.Contains(info, "cmdstat_function|load:calls=") && !strings.Contains(info, "cmdstat_function|load:calls=0,") {
		t.Errorf("after a restart from the AOF: want functions called and the library not loaded again, commandstats:\n%s", info)
	}
}
