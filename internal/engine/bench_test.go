package engine_test

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

func benchStores(b *testing.B) map[string]func() store.Store {
	return map[string]func() store.Store{
		"memory": func() store.Store { return memstore.New() },
		"pebble": func() store.Store {
			st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{})
			if err != nil {
				b.Fatal(err)
			}
			return st
		},
	}
}

func openBench(b *testing.B, st store.Store) *engine.Engine {
	e, err := engine.Open(context.Background(), engine.Config{Store: st})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = e.Close(context.Background()); _ = st.Close() })
	return e
}

func batch(prefix string, n, payload int, delay time.Duration) []domain.SendRequest {
	p := make([]byte, payload)
	reqs := make([]domain.SendRequest, n)
	for i := range reqs {
		reqs[i] = domain.SendRequest{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: p, When: domain.When{Delay: delay}}
	}
	return reqs
}

// BenchmarkSendBatch100 reports durable sends/s in batches of 100 (256 B).
func BenchmarkSendBatch100(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			e := openBench(b, open())
			ctx := context.Background()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				if _, err := e.SendBatch(ctx, "t", batch(fmt.Sprint("b", i), 100, 256, time.Hour)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkDrain reports how fast a due backlog is consumed by 4
// consumers with lease(100) + batch ack.
func BenchmarkDrain(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			e := openBench(b, open())
			ctx := context.Background()
			n := b.N * 100
			for i := 0; i < n; i += 1000 {
				if _, err := e.SendBatch(ctx, "t", batch(fmt.Sprint("d", i), min(1000, n-i), 256, 0)); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			var wg sync.WaitGroup
			var mu sync.Mutex
			left := n
			for range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 100})
						if err != nil {
							b.Error(err)
							return
						}
						if len(ms) == 0 {
							return
						}
						acks := make([]domain.AckRequest, len(ms))
						for i, m := range ms {
							acks[i] = domain.AckRequest{ID: m.ID, Receipt: m.Receipt}
						}
						if _, err := e.AckBatch(ctx, "t", acks); err != nil {
							b.Error(err)
							return
						}
						mu.Lock()
						left -= len(ms)
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			if left != 0 {
				b.Fatalf("%d messages not drained", left)
			}
			b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkSendBatch100Senders8 is what `delayq bench send` does: 8
// concurrent senders, batches of 100 (256 B, engine-made ids), one topic.
func BenchmarkSendBatch100Senders8(b *testing.B) {
	for name, open := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			e := openBench(b, open())
			ctx := context.Background()
			p := make([]byte, 256)
			b.SetParallelism(max(1, 8/runtime.GOMAXPROCS(0)))
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					reqs := make([]domain.SendRequest, 100)
					for i := range reqs {
						reqs[i] = domain.SendRequest{Payload: p, When: domain.When{Delay: time.Hour}}
					}
					if _, err := e.SendBatch(ctx, "t", reqs); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkLateness is `delayq bench lateness` in-process on Pebble: 8
// senders schedule 100k messages due evenly over 10 s (10k/s) from 12 s on (the tool's lead), 4
// consumers lease(100) + batch ack; it reports release lateness
// (lease time - due) percentiles. One op is one whole run.
func BenchmarkLateness(b *testing.B) {
	const n, window, senders, consumers = 100_000, 10 * time.Second, 8, 4
	for b.Loop() {
		latenessRun(b, n, window, senders, consumers)
	}
}

func latenessRun(b *testing.B, n int, window time.Duration, senders, consumers int) {
	st, err := pebblestore.Open(b.TempDir(), pebblestore.Options{})
	if err != nil {
		b.Fatal(err)
	}
	e := openBench(b, st)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t0 := time.Now().Add(12 * time.Second).Truncate(time.Millisecond)
	dueOf := func(i int) time.Time {
		return t0.Add(time.Duration(i) * window / time.Duration(n)).Truncate(time.Millisecond)
	}
	late := make([]time.Duration, n)
	var got atomic.Int64
	var wg sync.WaitGroup
	for range consumers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				ms, err := e.Lease(ctx, "t", domain.LeaseRequest{Max: 100, Lease: time.Minute, Wait: time.Second})
				if err != nil {
					return
				}
				now := time.Now()
				acks := make([]domain.AckRequest, len(ms))
				for i, m := range ms {
					seq, _ := strconv.Atoi(string(m.Payload[:8]))
					late[seq] = now.Sub(dueOf(seq))
					acks[i] = domain.AckRequest{ID: m.ID, Receipt: m.Receipt}
				}
				if len(ms) > 0 {
					if _, err := e.AckBatch(ctx, "t", acks); err != nil {
						return
					}
				}
				if got.Add(int64(len(ms))) >= int64(n) {
					cancel()
				}
			}
		}()
	}
	var next atomic.Int64
	var sw sync.WaitGroup
	for range senders {
		sw.Add(1)
		go func() {
			defer sw.Done()
			for {
				lo := int(next.Add(100)) - 100
				if lo >= n {
					return
				}
				reqs := make([]domain.SendRequest, 100)
				for i := range reqs {
					p := make([]byte, 256)
					copy(p, fmt.Sprintf("%08d", lo+i))
					reqs[i] = domain.SendRequest{Payload: p, When: domain.When{DeliverAt: dueOf(lo + i)}}
				}
				if _, err := e.SendBatch(ctx, "t", reqs); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	sw.Wait()
	wg.Wait()
	slices.Sort(late)
	q := func(f float64) float64 { return float64(late[int(f*float64(n-1))].Microseconds()) / 1000 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.ReportMetric(float64(late[0].Microseconds())/1000, "min-ms")
}
