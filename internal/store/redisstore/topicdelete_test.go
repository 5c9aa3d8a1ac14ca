package redisstore_test

import (
	"context"
	"errors"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
)

// A send that reserved its Seq before a TopicDelete and inserted after it
// leaves a deleted topic (no meta hash) holding a message. The state is
// made here directly; the topic must stay shown, and a delete refused.
func TestDeletedTopicHoldingMessageIsShown(t *testing.T) {
	srv := standalone(t)
	var prefix string
	s := openAt(t, srv.URL(), func(o *redisstore.Options) { prefix = o.Prefix })
	ctx := context.Background()
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "orders", Now: 1000,
		Messages: []store.InsertMessage{{ID: "a", DueAt: 5000, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr()})
	defer func() { _ = rdb.Close() }()
	if n, err := rdb.Del(ctx, prefix+":{orders}:meta").Result(); err != nil || n != 1 {
		t.Fatalf("DEL meta: %d %v (key layout changed?)", n, err)
	}
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil || tr.Counts.Scheduled != 1 {
		t.Fatalf("TopicGet of a topic without meta holding a message: %+v %v", tr, err)
	}
	list, err := s.TopicList(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "orders" {
		t.Fatalf("TopicList: %d topics, %v", len(list), err)
	}
	if err := s.TopicDelete(ctx, "orders"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("TopicDelete: %v, want ErrConflict", err)
	}
}
