package redisstore

import (
	"bytes"
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// scriptUsec reads the Redis time spent in scripts so far (commandstats
// usec of FCALL, EVALSHA and EVAL).
func scriptUsec(ctx context.Context, admin *redis.Client) (n int64) {
	_, n = scriptStats(ctx, admin)
	return n
}

// scriptCommands reads how many commands Redis has run inside scripts
// so far: every command commandstats counts but the scripts themselves
// and the INFO that reads it (all a benchmark sends while it measures).
func scriptCommands(ctx context.Context, admin *redis.Client) (n int64) {
	for name, st := range commandStats(ctx, admin) {
		if name != "fcall" && name != "evalsha" && name != "eval" && name != "info" && name != "function|load" {
			n += st.calls
		}
	}
	return n
}

// scriptStats reads the scripts run so far and the Redis time spent in
// them (commandstats calls and usec of FCALL, EVALSHA and EVAL).
func scriptStats(ctx context.Context, admin *redis.Client) (calls, usec int64) {
	for _, name := range []string{"fcall", "evalsha", "eval"} {
		k, u := commandStat(ctx, admin, name)
		calls, usec = calls+k, usec+u
	}
	return calls, usec
}

// BenchmarkLeaseRedisCPU reports the Redis time spent in scripts per
// message for a lease, an ack, a nack and a lease expiry, with 1 KiB and
// 64 KiB payloads (commandstats usec of FCALL, EVALSHA and EVAL): what rewriting
// only a record's prefix saves, by a measure the client side and the
// machine's load disturb little. The lease time includes its reply,
// which carries the payload either way.
//
//	go test -run XXX -bench LeaseRedisCPU -benchtime 2x ./internal/store/redisstore
func BenchmarkLeaseRedisCPU(b *testing.B) {
	for _, size := range []int{1 << 10, 64 << 10} {
		b.Run(fmt.Sprint(size), func(b *testing.B) {
			srv := redistest.Start(b)
			ctx := context.Background()
			s, err := Open(ctx, Options{URL: srv.URL(), Prefix: "bl", TimeSource: TimeCaller, Timeout: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			const per = 1000
			payload := bytes.Repeat([]byte("x"), size)
			insert := func(topic string) {
				for j := 0; j < per; j += 100 {
					var msgs []store.InsertMessage
					for k := j; k < j+100; k++ {
						msgs = append(msgs, store.InsertMessage{ID: fmt.Sprint("m", k), DueAt: 1000, MaxAttempts: 3, Payload: payload})
					}
					if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 1000, Messages: msgs}); err != nil {
						b.Fatal(err)
					}
				}
			}
			// leaseAll leases the topic's per messages (the first
			// message alone, so that the script's EVAL is not measured)
			// and returns them and the Redis time of the rest.
			leaseAll := func(topic string, leaseFor int64) ([]*store.Record, int64) {
				var recs []*store.Record
				var u int64
				for len(recs) < per {
					max := 100
					if len(recs) == 0 {
						max = 1
					}
					u0 := scriptUsec(ctx, admin)
					got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: 2000, Max: max, LeaseFor: leaseFor, Token: "0123456789abcdef"})
					if err != nil || len(got) == 0 {
						b.Fatal(len(got), err)
					}
					if len(recs) > 0 {
						u += scriptUsec(ctx, admin) - u0
					}
					recs = append(recs, got...)
				}
				return recs, u
			}
			var lease, ack, nack, expire, leased int64
			for i := 0; b.Loop(); i++ {
				// Lease, then ack in batches of 100.
				topic := fmt.Sprint("a", i)
				insert(topic)
				recs, u := leaseAll(topic, 1_000_000)
				lease += u
				leased += per - 1
				u0 := scriptUsec(ctx, admin)
				for j := 0; j < per; j += 100 {
					var items []store.AckItem
					for _, r := range recs[j : j+100] {
						items = append(items, store.AckItem{ID: r.ID, Receipt: r.Receipt})
					}
					errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Now: 2001, Items: items})
					if err != nil || errs[0] != nil {
						b.Fatal(err, errs)
					}
				}
				ack += scriptUsec(ctx, admin) - u0
				// Lease, then nack each (to a retry in the future).
				topic = fmt.Sprint("n", i)
				insert(topic)
				recs, _ = leaseAll(topic, 1_000_000)
				u0 = scriptUsec(ctx, admin)
				for _, r := range recs {
					if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: 2001, RetryDelay: 1_000_000, Error: "boom"}); err != nil {
						b.Fatal(err)
					}
				}
				nack += scriptUsec(ctx, admin) - u0
				// Lease for 10 ms, then expire them (back to ready).
				topic = fmt.Sprint("e", i)
				insert(topic)
				leaseAll(topic, 10)
				u0 = scriptUsec(ctx, admin)
				for n := 0; n < per; {
					got, err := s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: 3000, Max: 200})
					if err != nil || len(got) == 0 {
						b.Fatal(len(got), err)
					}
					n += len(got)
				}
				expire += scriptUsec(ctx, admin) - u0
				if err := admin.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N * per)
			b.ReportMetric(float64(lease)/float64(leased), "lease-µs/msg")
			b.ReportMetric(float64(ack)/n, "ack-µs/msg")
			b.ReportMetric(float64(nack)/n, "nack-µs/msg")
			b.ReportMetric(float64(expire)/n, "expire-µs/msg")
		})
	}
}

// BenchmarkLeaseDueOneRedisCPU reports the Redis time of a due lease as a
// release to one waiting consumer makes it: one message per script (the
// shape of paced and burst loads, where a woken long-poll finds one or
// two), of a ready message and of a scheduled one come due that no
// promotion moved (as a release finds it), against a lease that finds
// nothing and one of 100. With and without the AOF (appendfsync always),
// on a Redis of its own; 1 KiB payloads, one topic, the server's clock;
// the Lua called as the store calls it (lua=functions) and as scripts,
// as where functions are refused (lua=scripts). -count 3 alternates them.
//
//	go test -run XXX -bench LeaseDueOneRedisCPU -benchtime 2x -count 3 ./internal/store/redisstore
func BenchmarkLeaseDueOneRedisCPU(b *testing.B) {
	for _, aof := range []string{"yes", "no"} {
		for _, lua := range []string{"functions", "scripts"} {
			b.Run("aof="+aof+"/lua="+lua, func(b *testing.B) { benchLeaseDueOne(b, aof, lua == "scripts") })
		}
	}
}

func benchLeaseDueOne(b *testing.B, aof string, scriptsOnly bool) {
	{
		{
			srv := redistest.Start(b, "--appendonly", aof)
			ctx := context.Background()
			s, err := Open(ctx, Options{URL: srv.URL(), Prefix: "bo", Timeout: 30 * time.Second})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.scriptsOnly.Store(scriptsOnly)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
			defer admin.Close()
			payload := bytes.Repeat([]byte("x"), 1<<10)
			const per = 2000
			// lease runs leases of up to n messages until per are taken
			// or per calls were made (an empty topic's case) and returns
			// the Redis time per call and per message.
			var scripts, leases int64
			lease := func(topic string, n int) (perCall, perMsg, redisCalls float64) {
				k0, u0 := scriptStats(ctx, admin)
				r0 := scriptCommands(ctx, admin)
				calls, got := 0, 0
				for got < per && calls < per {
					cctx, cancel := context.WithTimeout(ctx, 10*time.Second) // a deadline, as a long-poll has: no peek first
					recs, err := s.MessageLeaseDue(cctx, &store.MessageLeaseParams{Topic: topic, Max: n, LeaseFor: 60_000, Token: "0123456789abcdef"})
					cancel()
					if err != nil {
						b.Fatal(err)
					}
					calls, got = calls+1, got+len(recs)
				}
				r := scriptCommands(ctx, admin)
				k, u := scriptStats(ctx, admin)
				scripts, leases = scripts+k-k0, leases+int64(calls)
				return float64(u-u0) / float64(calls), float64(u-u0) / float64(max(got, 1)), float64(r-r0) / float64(calls)
			}
			// fill sends n messages to topic, due at dueAt.
			fill := func(topic string, n int, now, dueAt int64) {
				for j := 0; j < n; j += 100 {
					var msgs []store.InsertMessage
					for k := j; k < j+100; k++ {
						msgs = append(msgs, store.InsertMessage{ID: fmt.Sprintf("m%05d", k), DueAt: dueAt, MaxAttempts: 3, Payload: payload})
					}
					if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs}); err != nil {
						b.Fatal(err)
					}
				}
			}
			var one, oneSched, none, hundred, oneCalls, oneSchedCalls, noneCalls float64
			for i := 0; b.Loop(); i++ {
				topic, sched := fmt.Sprint("t", i), fmt.Sprint("s", i)
				now := time.Now().UnixMilli()
				// sched's messages are due in a second: still scheduled
				// when they are leased, as a release finds them
				fill(sched, per, now, now+1000)
				fill(topic, 2*per, now, now-1)
				time.Sleep(time.Until(time.UnixMilli(now + 1100)))
				c, _, r := lease(sched, 1)
				oneSched, oneSchedCalls = oneSched+c, oneSchedCalls+r
				c, _, r = lease(topic, 1)
				one, oneCalls = one+c, oneCalls+r
				_, m, _ := lease(topic, 100)
				hundred += m
				c, _, r = lease(fmt.Sprint("empty", i), 1)
				none, noneCalls = none+c, noneCalls+r
				if err := admin.FlushAll(ctx).Err(); err != nil {
					b.Fatal(err)
				}
			}
			n := float64(b.N)
			b.ReportMetric(one/n, "one-µs/lease")
			b.ReportMetric(oneSched/n, "one-sched-µs/lease")
			b.ReportMetric(oneCalls/n, "one-calls/lease")
			b.ReportMetric(oneSchedCalls/n, "one-sched-calls/lease")
			b.ReportMetric(noneCalls/n, "none-calls/lease")
			b.ReportMetric(none/n, "none-µs/lease")
			b.ReportMetric(hundred/n, "of100-µs/msg")
			b.ReportMetric(float64(scripts)/float64(leases), "scripts/lease")
		}
	}
}
