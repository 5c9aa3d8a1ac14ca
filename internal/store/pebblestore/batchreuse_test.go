package pebblestore

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestLargeBatchBufferReused: a send of 1,000 1 KiB messages writes a
// 1.4 MB Pebble batch, over Pebble's default limit for keeping a batch's
// buffer for the next batch (1 MB); with batchRetained the buffer goes
// back to Pebble's batch pool, so the next batch taken from it has that
// room (with the default, none ever does).
func TestLargeBatchBufferReused(t *testing.T) {
	if raceOn {
		t.Skip("sync.Pool drops puts at random under the race detector")
	}
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	payload := bytes.Repeat([]byte{0xa5}, 1024)
	largest := 0
	for call := range 10 {
		ms := make([]store.InsertMessage, 1000)
		for i := range ms {
			ms[i] = store.InsertMessage{ID: fmt.Sprintf("m%03d-%04d", call, i), Payload: payload, MaxAttempts: 3}
		}
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: 1, Messages: ms})
		if err != nil || len(res) != len(ms) || res[0].Duplicate {
			t.Fatal(err)
		}
		// Pebble's pool is a sync.Pool: the batch just released is
		// usually the next one handed out on this P.
		b := s.db.NewBatch()
		largest = max(largest, cap(b.Repr()))
		_ = b.Close()
	}
	if largest < 1<<20 {
		t.Fatalf("after sends of 1,000 1 KiB messages the largest pooled batch buffer was %d B: the 1.4 MB send batches were not kept", largest)
	}
}
