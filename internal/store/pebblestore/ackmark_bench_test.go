package pebblestore

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// BenchmarkAckMarkAB measures the marker's cost side by side in one
// process (the machine's load is shared): the same fsync'd inserts of
// 100 × 256 B from 1 and 8 producers, with the marker and with it turned
// off after Open.
func BenchmarkAckMarkAB(b *testing.B) {
	for _, producers := range []int{1, 8} {
		for _, marker := range []bool{true, false} {
			b.Run(fmt.Sprintf("producers=%d/marker=%v", producers, marker), func(b *testing.B) {
				s := openDisk(b, false)
				if !marker {
					_ = s.ack.close(false)
					s.ack = nil
				}
				var n atomic.Int64
				insert := func() {
					base := n.Add(1)
					ms := make([]store.InsertMessage, 100)
					for i := range ms {
						ms[i] = store.InsertMessage{ID: fmt.Sprintf("m%d-%d", base, i), Payload: payload256, DueAt: 1e12, MaxAttempts: 3}
					}
					if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "bench", Now: 1, Messages: ms}); err != nil {
						b.Error(err)
					}
				}
				var wg sync.WaitGroup
				per := b.N / producers
				b.ResetTimer()
				for range producers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range max(per, 1) {
							insert()
						}
					}()
				}
				wg.Wait()
				b.ReportMetric(float64(max(per, 1)*producers*100)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
