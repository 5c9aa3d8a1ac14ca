package engine_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
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

func batch(prefix string, n, payload int, delay time.Duration) []delayq.SendRequest {
	p := make([]byte, payload)
	reqs := make([]delayq.SendRequest, n)
	for i := range reqs {
		reqs[i] = delayq.SendRequest{ID: fmt.Sprintf("%s-%d", prefix, i), Payload: p, When: delayq.When{Delay: delay}}
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
						ms, err := e.Lease(ctx, "t", delayq.LeaseRequest{Max: 100})
						if err != nil {
							b.Error(err)
							return
						}
						if len(ms) == 0 {
							return
						}
						acks := make([]delayq.AckRequest, len(ms))
						for i, m := range ms {
							acks[i] = delayq.AckRequest{ID: m.ID, Receipt: m.Receipt}
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
