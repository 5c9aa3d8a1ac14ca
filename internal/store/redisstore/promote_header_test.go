package redisstore

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestPromoteRewritesHeaderOnly: a promotion changes a record's fixed
// header and nothing else, on one server (promoteAllScript) and on a
// Cluster (promoteScript per partition). Redis counts the commands scripts
// run (INFO commandstats): promoting n messages runs n SETRANGE and no
// GET or SET, which would copy the 64 KiB payloads into Lua and back (and
// into the AOF). Each record's bytes afterwards are those before with
// only the state (priority bit kept) and UpdatedAt changed — the bytes a
// whole-record rewrite would store, so servers of either version read
// them — and the store reads every record back ready, payload intact.
func TestPromoteRewritesHeaderOnly(t *testing.T) {
	onStandaloneAndCluster(t, checkPromoteHeaderOnly)
}

// onStandaloneAndCluster runs check in parallel on a redis-server of its
// own (oneServer: the single-server scripts) and on a 3-master Cluster
// (skipped in -short), with the URL and every node's address.
func onStandaloneAndCluster(t *testing.T, check func(t *testing.T, url string, addrs []string, oneServer bool)) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := redistest.Start(t)
		check(t, srv.URL(), []string{srv.Addr()}, true)
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("cluster: skipped in -short")
		}
		c := redistest.StartCluster(t, 3)
		check(t, c.URL(), c.Addrs(), false)
	})
}

func checkPromoteHeaderOnly(t *testing.T, url string, addrs []string, oneServer bool) {
	ctx := context.Background()
	const topic, n, now = "hdr", 12, int64(1_000_000)
	s, err := Open(ctx, Options{URL: url, Prefix: "hdr", TimeSource: TimeCaller, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.oneServer != oneServer {
		t.Fatalf("oneServer %v; want %v (the path under test)", s.oneServer, oneServer)
	}
	payload := func(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 64<<10) }
	var msgs []store.InsertMessage
	for i := range n {
		msgs = append(msgs, store.InsertMessage{ID: fmt.Sprint("m", i), DueAt: now + 10 + int64(i), MaxAttempts: 3,
			Priority: uint8(i % 3 * 4), Payload: payload(i), Headers: map[string]string{"h": fmt.Sprint(i)}})
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	clients := make([]*redis.Client, len(addrs))
	for i, a := range addrs {
		clients[i] = redis.NewClient(&redis.Options{Addr: a})
		defer clients[i].Close()
	}
	// record reads message i's bytes from whichever node holds them.
	record := func(i int) []byte {
		k := s.keys.part(topic, s.keys.partitionOf(msgs[i].ID)).msg(msgs[i].ID)
		for _, c := range clients {
			if b, err := c.Get(ctx, k).Bytes(); err == nil {
				return b
			}
		}
		t.Fatalf("record %s not found on any node", k)
		return nil
	}
	before := make([][]byte, n)
	for i := range n {
		before[i] = record(i)
	}
	for _, c := range clients {
		if err := c.ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	const at = now + 100
	pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: at, Max: 100})
	if err != nil {
		t.Fatal(err)
	}
	if pr.Promoted != n {
		t.Fatalf("promoted %d; want %d", pr.Promoted, n)
	}
	calls := map[string]int64{}
	for _, c := range clients {
		info, err := c.Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.SplitSeq(info, "\n") {
			name, rest, ok := strings.Cut(strings.TrimPrefix(line, "cmdstat_"), ":calls=")
			if ok && name != line {
				var v int64
				fmt.Sscanf(rest, "%d", &v)
				calls[name] += v
			}
		}
	}
	if calls["setrange"] != n || calls["get"] != 0 || calls["set"] != 0 {
		t.Errorf("the promotion of %d records ran setrange %d, get %d, set %d times; want %d, 0, 0 (commandstats %v)",
			n, calls["setrange"], calls["get"], calls["set"], n, calls)
	}
	for i := range n {
		want := bytes.Clone(before[i])
		want[0] = want[0]&(recPriority|recArea) | byte(store.StateReady)
		var uat [8]byte
		binary.BigEndian.PutUint64(uat[:], uint64(at))
		copy(want[22:28], uat[2:])
		if got := record(i); !bytes.Equal(got, want) {
			t.Errorf("record %d after promotion: header %x, %d bytes; want header %x, %d bytes (only state and UpdatedAt changed)",
				i, got[:min(len(got), recHeader+1)], len(got), want[:recHeader+1], len(want))
		}
		r, err := s.MessageGet(ctx, topic, msgs[i].ID)
		if err != nil {
			t.Fatal(err)
		}
		if r.State != store.StateReady || r.UpdatedAt != at || r.Priority != msgs[i].Priority ||
			!bytes.Equal(r.Payload, msgs[i].Payload) || r.Headers["h"] != fmt.Sprint(i) || r.DueAt != msgs[i].DueAt {
			t.Errorf("record %d reads back %v/updated %d/priority %d/due %d/%d-byte payload; want ready/%d/%d/%d/the %d bytes sent",
				i, r.State, r.UpdatedAt, r.Priority, r.DueAt, len(r.Payload), at, msgs[i].Priority, msgs[i].DueAt, len(msgs[i].Payload))
		}
	}
	// They are in their priorities' ready indexes: a lease takes them in
	// (priority, due) order.
	recs, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: at, Max: 100, LeaseFor: 1000, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range recs {
		got = append(got, r.ID)
	}
	for p := 0; p < 3; p++ {
		for i := range n {
			if i%3 == p {
				want = append(want, msgs[i].ID)
			}
		}
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("leased %v; want %v", got, want)
	}
}

// BenchmarkPromoteRedisCPU reports the Redis time spent in promotion
// scripts per promoted message (commandstats usec of FCALL, EVALSHA and EVAL), for
// 1 KiB and 64 KiB payloads: what rewriting only the header saves, by a
// measure the client side and the machine's load disturb little.
//
//	go test -run XXX -bench PromoteRedisCPU -benchtime 5x ./internal/store/redisstore
func BenchmarkPromoteRedisCPU(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			srv := redistest.Start(b)
			ctx := context.Background()
			s, err := Open(ctx, Options{URL: srv.URL(), Prefix: "bp", TimeSource: TimeCaller, Timeout: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			usec := func() (n int64) {
				info := admin.Info(ctx, "commandstats").Val()
				for line := range strings.SplitSeq(info, "\n") {
					for _, c := range []string{"cmdstat_fcall:", "cmdstat_evalsha:", "cmdstat_eval:"} {
						if rest, ok := strings.CutPrefix(line, c); ok {
							_, u, _ := strings.Cut(rest, ",usec=")
							var v int64
							fmt.Sscanf(u, "%d", &v)
							n += v
						}
					}
				}
				return n
			}
			const per = 2000
			payload := bytes.Repeat([]byte("x"), size)
			var spent, promoted int64
			for i := 0; b.Loop(); i++ {
				topic := fmt.Sprint("t", i)
				for j := 0; j < per; j += 100 {
					var msgs []store.InsertMessage
					for k := j; k < j+100; k++ {
						msgs = append(msgs, store.InsertMessage{ID: fmt.Sprint("m", k), DueAt: 1000, MaxAttempts: 3, Payload: payload})
					}
					if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 500, Messages: msgs}); err != nil {
						b.Fatal(err)
					}
				}
				// Load the promotion script first: its EVAL is not measured.
				if _, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: 999, Max: 1}); err != nil {
					b.Fatal(err)
				}
				u0 := usec()
				for n := 0; n < per; {
					pr, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: topic, Now: 2000, Max: 200})
					if err != nil {
						b.Fatal(err)
					}
					n += pr.Promoted
				}
				spent += usec() - u0
				promoted += per
				if err := admin.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(spent)/float64(promoted), "redis-µs/msg")
		})
	}
}
