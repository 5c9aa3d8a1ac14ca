package mysqlstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestPromoteSkipsTopicRow: moving a live message (a promote, a nack)
// reads no topic row once the server has seen it, since a topic with
// live messages is never deleted; only sends look for a deletion mark.
// The topic table is renamed away for the moves, so a read of it fails
// them.
func TestPromoteSkipsTopicRow(t *testing.T) {
	s := open(t, mysqlstore.TimeCaller)
	const now = int64(1_000_000)
	// The first send makes the topic's row, the second sees it.
	for _, id := range []string{"a", "b"} {
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "tr", Now: now, Messages: []store.InsertMessage{{ID: id, DueAt: now + 10, MaxAttempts: 3}}}); err != nil {
			t.Fatal(err)
		}
	}
	topic := "`" + mysqlstore.Prefix(s) + "topic`"
	away := "`" + mysqlstore.Prefix(s) + "topic_away`"
	if _, err := adminDB.Exec("RENAME TABLE " + topic + " TO " + away); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := adminDB.Exec("RENAME TABLE " + away + " TO " + topic); err != nil {
			t.Error(err)
		}
	})
	res, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "tr", Now: now + 10, Max: 10})
	if err != nil {
		t.Fatalf("promote read the topic row: %v", err)
	}
	if res.Promoted != 2 {
		t.Fatalf("promoted %d, want 2", res.Promoted)
	}
	got, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "tr", Now: now + 10, Max: 10, LeaseFor: 1000, Token: "k"})
	if err != nil || len(got) != 2 {
		t.Fatalf("lease: %d, %v", len(got), err)
	}
	if _, err := s.MessageNack(ctx, &store.MessageNackParams{Topic: "tr", ID: got[0].ID, Receipt: got[0].Receipt, Now: now + 11}); err != nil {
		t.Fatalf("nack read the topic row: %v", err)
	}
}
