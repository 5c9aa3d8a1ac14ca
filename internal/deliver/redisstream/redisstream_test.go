package redisstream_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/redisstream"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

func msgs(n int) []deliver.Message {
	out := make([]deliver.Message, n)
	for i := range out {
		id := "m-" + strconv.Itoa(i)
		out[i] = deliver.Message{Topic: "dq", ID: id, Payload: []byte("payload " + id), Attempt: 1, Priority: i % 3, Headers: map[string]string{"k": id}}
	}
	return out
}

func newTarget(t *testing.T, r domain.RedisTarget) *redisstream.Target {
	t.Helper()
	tg, err := redisstream.New(context.Background(), redisstream.Config{Target: r})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tg.Close() })
	return tg
}

func client(t *testing.T, addr string) *redis.Client {
	rdb := redis.NewClient(&redis.Options{Addr: addr, DisableIdentity: true})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}

func TestXAddFields(t *testing.T) {
	srv := redistest.Start(t)
	tg := newTarget(t, domain.RedisTarget{Addr: srv.Addr(), Stream: "orders"})
	ctx := context.Background()
	in := msgs(10)
	for i, err := range tg.Publish(ctx, in) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	entries, err := client(t, srv.Addr()).XRange(ctx, "orders", "-", "+").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != len(in) {
		t.Fatalf("%d entries, want %d", len(entries), len(in))
	}
	for i, e := range entries {
		id := in[i].ID // one pipeline: in order
		var h map[string]string
		if err := json.Unmarshal([]byte(e.Values["headers"].(string)), &h); err != nil || h["k"] != id {
			t.Errorf("entry %d headers %v (%v)", i, e.Values["headers"], err)
		}
		if e.Values["id"] != id || e.Values["topic"] != "dq" || e.Values["attempt"] != "1" || e.Values["priority"] != strconv.Itoa(in[i].Priority) || e.Values["payload"] != "payload "+id {
			t.Errorf("entry %d: %v", i, e.Values)
		}
	}
}

func TestMaxLenTrims(t *testing.T) {
	srv := redistest.Start(t)
	tg := newTarget(t, domain.RedisTarget{Addr: srv.Addr(), Stream: "orders", MaxLen: 10})
	ctx := context.Background()
	for range 20 {
		for _, err := range tg.Publish(ctx, msgs(100)) {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	n, err := client(t, srv.Addr()).XLen(ctx, "orders").Result()
	if err != nil {
		t.Fatal(err)
	}
	// "~" trims whole radix-tree nodes (100 entries by default).
	if n >= 2000 || n < 10 {
		t.Fatalf("XLEN %d after 2000 adds with MAXLEN ~ 10", n)
	}
}

func TestAuthAndDB(t *testing.T) {
	srv := redistest.Start(t)
	if err := client(t, srv.Addr()).ConfigSet(context.Background(), "requirepass", "s3cret").Err(); err != nil {
		t.Fatal(err)
	}
	ok := newTarget(t, domain.RedisTarget{Addr: srv.Addr(), Stream: "orders", Password: "s3cret", DB: 3})
	if err := ok.Publish(context.Background(), msgs(1))[0]; err != nil {
		t.Fatal(err)
	}
	bad := newTarget(t, domain.RedisTarget{Addr: srv.Addr(), Stream: "orders", Password: "wrong"})
	if err := bad.Publish(context.Background(), msgs(1))[0]; err == nil {
		t.Fatal("a wrong password was confirmed")
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), Password: "s3cret", DB: 3, DisableIdentity: true})
	defer rdb.Close()
	if n, err := rdb.XLen(context.Background(), "orders").Result(); err != nil || n != 1 {
		t.Fatalf("XLEN in db 3: %d, %v", n, err)
	}
}

// TestUnconfirmedAndDown: a Redis busy in DEBUG SLEEP answers nothing
// before the deadline; a killed one refuses. Each message fails, and
// Publish returns by its deadline.
func TestUnconfirmedAndDown(t *testing.T) {
	srv := redistest.Start(t, "--enable-debug-command", "yes")
	tg := newTarget(t, domain.RedisTarget{Addr: srv.Addr(), Stream: "orders"})
	ctx := context.Background()
	if err := tg.Publish(ctx, msgs(1))[0]; err != nil {
		t.Fatal(err)
	}
	sleeper := client(t, srv.Addr())
	go func() { _ = sleeper.Do(context.Background(), "DEBUG", "SLEEP", "3").Err() }()
	time.Sleep(200 * time.Millisecond)
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	start := time.Now()
	errs := tg.Publish(pctx, msgs(5))
	cancel()
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("Publish took %s past its 500ms deadline", d)
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("message %d confirmed by a sleeping Redis", i)
		}
	}
	srv.Kill()
	for i, err := range tg.Publish(ctx, msgs(2)) {
		if err == nil {
			t.Errorf("message %d confirmed by a killed Redis", i)
		}
	}
}
