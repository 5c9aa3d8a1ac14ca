package redisstore_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// usedMemory reads INFO memory's used_memory.
func usedMemory(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	info, err := rdb.InfoMap(ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	if _, err := fmt.Sscan(info["Memory"]["used_memory"], &n); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestMemoryPerPendingMessage guards the layout's purpose: a pending
// message of 256 B with a 26-byte id (as `delayq bench send` makes) costs
// less Redis memory than asynq's ~845 B (used_memory per pending task,
// docs/benchmarks.md). The layout measured ~600 B at 100k; 700 B leaves
// room for the hash tables' growth steps at this smaller count.
func TestMemoryPerPendingMessage(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL()})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const n, batch, limit = 10_000, 500, 700
	topic := "bench-1796042521941069460-r1"
	payload := []byte(strings.Repeat("p", 256))
	due := time.Now().Add(24 * time.Hour).UnixMilli()
	before := usedMemory(t, rdb)
	for b := 0; b < n; b += batch {
		msgs := make([]store.InsertMessage, batch)
		for i := range msgs {
			msgs[i] = store.InsertMessage{ID: fmt.Sprintf("01M8P7M3B8GYKPC1%010d", b+i), Payload: payload, DueAt: due, MaxAttempts: 25}
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: msgs}); err != nil {
			t.Fatal(err)
		}
	}
	per := (usedMemory(t, rdb) - before) / n
	t.Logf("%d B of Redis memory per pending message", per)
	if per > limit {
		t.Fatalf("%d B per pending message, want <= %d", per, limit)
	}
	keys, err := rdb.Keys(ctx, "dq:{"+topic+"#0}:m:*").Result()
	if err != nil || len(keys) == 0 {
		t.Fatalf("no message keys: %v", err)
	}
	if typ := rdb.Type(ctx, keys[0]).Val(); typ != "string" {
		t.Fatalf("message key is a %s", typ)
	}
}

// TestSeqAcrossServers: servers sending to one new topic at once agree on
// its topic number, and every Seq they assign is unique and above those
// of each server's earlier sends; a second topic gets other Seqs.
func TestSeqAcrossServers(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	prefix := uniquePrefix()
	const servers, calls = 4, 20
	var (
		mu   sync.Mutex
		seqs = map[uint64]string{}
		tns  = map[uint64]bool{}
		wg   sync.WaitGroup
	)
	for w := range servers {
		s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: prefix})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		wg.Go(func() {
			var last uint64
			for c := range calls {
				topic := "t"
				if c%5 == 4 {
					topic = "u"
				}
				msgs := []store.InsertMessage{{ID: fmt.Sprintf("w%d-%d-a", w, c), DueAt: 1, MaxAttempts: 1}, {ID: fmt.Sprintf("w%d-%d-b", w, c), DueAt: 1, MaxAttempts: 1}}
				res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Messages: msgs})
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, r := range res {
					if prev, dup := seqs[r.Record.Seq]; dup {
						t.Errorf("Seq %d of %s also went to %s", r.Record.Seq, r.Record.ID, prev)
					}
					seqs[r.Record.Seq] = r.Record.ID
					if topic == "t" {
						tns[r.Record.Seq>>44] = true
						if r.Record.Seq <= last {
							t.Errorf("Seq %d after %d on one server", r.Record.Seq, last)
						}
						last = r.Record.Seq
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if len(tns) != 1 {
		t.Fatalf("topic t got %d topic numbers", len(tns))
	}
}

// TestPriorityKeysLeaveNoTrace: ready messages of a priority other than 0
// live in ready:<p>, listed in ready:prios while there are any; once they
// are leased (or go back to scheduled) neither key is left behind, and
// priority-0 messages use only the ready key of the layout before
// priorities.
func TestPriorityKeysLeaveNoTrace(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer rdb.Close()
	s, err := redisstore.Open(ctx, redisstore.Options{URL: srv.URL(), Prefix: "dq", Partitions: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	past := time.Now().Add(-time.Minute).UnixMilli()
	msgs := []store.InsertMessage{
		{ID: "p0", DueAt: past, MaxAttempts: 3},
		{ID: "p7", DueAt: past, MaxAttempts: 3, Priority: 7},
		{ID: "p7b", DueAt: past, MaxAttempts: 3, Priority: 7},
		{ID: "p255", DueAt: past, MaxAttempts: 3, Priority: 255},
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	base := "dq:{t#0}:ready"
	if got := rdb.ZRange(ctx, base+":prios", 0, -1).Val(); strings.Join(got, " ") != "7 255" {
		t.Fatalf("ready:prios = %v, want [7 255]", got)
	}
	for key, want := range map[string]int64{base: 1, base + ":7": 2, base + ":255": 1} {
		if n := rdb.ZCard(ctx, key).Val(); n != want {
			t.Fatalf("%s holds %d, want %d", key, n, want)
		}
	}
	// p255 back to scheduled: its index and its registry entry go.
	if _, err := s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "t", ID: "p255", DueAt: time.Now().Add(time.Hour).UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if got := rdb.ZRange(ctx, base+":prios", 0, -1).Val(); strings.Join(got, " ") != "7" {
		t.Fatalf("after the reschedule ready:prios = %v, want [7]", got)
	}
	got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 10, LeaseFor: 30_000, Token: "x"})
	if err != nil || len(got) != 3 || got[0].ID != "p0" || got[1].ID != "p7" || got[2].ID != "p7b" {
		t.Fatalf("lease: %v %v", got, err)
	}
	if n := rdb.Exists(ctx, base, base+":7", base+":255", base+":prios").Val(); n != 0 {
		keys := rdb.Keys(ctx, base+"*").Val()
		t.Fatalf("%d ready keys left after leasing every ready message: %v", n, keys)
	}
}
