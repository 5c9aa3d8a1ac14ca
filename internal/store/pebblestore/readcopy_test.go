package pebblestore

import (
	"context"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// TestRecordReadCopiesPayloadOnce: every lease and ack reads its record;
// the read copied the whole value out of Pebble and then decoded it into
// a second copy of the payload. One copy is enough.
func TestRecordReadCopiesPayloadOnce(t *testing.T) {
	s := openMem(t, vfs.NewMem())
	defer s.Close()
	const size = 64 << 10
	payload := make([]byte, size)
	if _, err := s.MessageInsertMany(context.Background(), &store.MessageInsertManyParams{Topic: "q", Now: 1,
		Messages: []store.InsertMessage{{ID: "big", Payload: payload, DueAt: 1e12, MaxAttempts: 1}}}); err != nil {
		t.Fatal(err)
	}
	const reads = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range reads {
		r, err := s.getRecord("q", "big")
		if err != nil || len(r.Payload) != size {
			t.Fatalf("getRecord: %v, payload %d bytes", err, len(r.Payload))
		}
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / reads; per > size*3/2 {
		t.Errorf("a read of a record with a %d B payload allocates %d B: the payload is copied more than once", size, per)
	}
}
