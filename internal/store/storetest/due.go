package storetest

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// DueCounter is the optional method behind the dashboard's Upcoming chart.
type DueCounter interface {
	DueCounts(ctx context.Context, topic string, fromMS, bucketMS int64, n int) ([]int64, error)
}

// RunDueCounts checks DueCounts: only scheduled messages of the topic
// count, each in the bucket [from+i·b, from+(i+1)·b) holding its due time,
// and nothing outside the range.
func RunDueCounts(t *testing.T, open func(t *testing.T) store.Store) {
	s := open(t)
	dc, ok := s.(DueCounter)
	if !ok {
		t.Fatalf("%T does not implement DueCounts", s)
	}
	ctx := context.Background()
	now := T0
	var msgs []store.InsertMessage
	dues := []int64{-5, 0, 9, 10, 10, 29, 30, 35, 1000} // relative to now+100
	for i, d := range dues {
		msgs = append(msgs, store.InsertMessage{ID: fmt.Sprint("m", i), DueAt: now + 100 + d, MaxAttempts: 3})
	}
	msgs = append(msgs, store.InsertMessage{ID: "ready", DueAt: now - 1, MaxAttempts: 3})
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: msgs}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "other", Now: now,
		Messages: []store.InsertMessage{{ID: "o", DueAt: now + 100, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	got, err := dc.DueCounts(ctx, "t", now+100, 10, 3)
	if err != nil {
		t.Fatal(err)
	}
	// [100,110): 0, 9   [110,120): 10, 10   [120,130): 29; -5, 30, 35, 1000 and the ready one are out.
	if want := []int64{2, 2, 1}; !slices.Equal(got, want) {
		t.Fatalf("DueCounts = %v, want %v", got, want)
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: "m1", Now: now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := dc.DueCounts(ctx, "t", now+100, 10, 1); !slices.Equal(got, []int64{1}) {
		t.Fatalf("after cancel: %v, want [1]", got)
	}
	if got, err := dc.DueCounts(ctx, "nope", now, 10, 2); err != nil || !slices.Equal(got, []int64{0, 0}) {
		t.Fatalf("unknown topic: %v %v", got, err)
	}
}
