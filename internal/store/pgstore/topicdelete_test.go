package pgstore_test

import (
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// A send whose transaction passed the topic row before a TopicDelete and
// committed after it leaves messages in a topic without a row. The state
// is made here directly: reads put the row back, and a delete is refused.
func TestRowlessTopicHoldingMessageIsShown(t *testing.T) {
	srv := pgtest.Shared(t)
	var schema string
	s := openAt(t, srv, func(o *pgstore.Options) { schema = o.Schema })
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "orders", Now: 1000,
		Messages: []store.InsertMessage{{ID: "a", DueAt: 5000, MaxAttempts: 3}}}); err != nil {
		t.Fatal(err)
	}
	rowless := func() {
		t.Helper()
		conn, err := pgx.Connect(ctx, srv.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close(ctx) }()
		if tag, err := conn.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, "topic"}.Sanitize()+" WHERE name = 'orders'"); err != nil || tag.RowsAffected() != 1 {
			t.Fatalf("delete the row: %v %v", tag, err)
		}
	}
	rowless()
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil || tr.Counts.Live() != 1 || tr.Settings != nil {
		t.Fatalf("TopicGet of a rowless topic holding a message: %+v %v", tr, err)
	}
	rowless()
	list, err := s.TopicList(ctx)
	if err != nil || len(list) != 1 || list[0].Name != "orders" {
		t.Fatalf("TopicList: %d topics, %v", len(list), err)
	}
	rowless()
	if err := s.TopicDelete(ctx, "orders"); !errors.Is(err, store.ErrConflict) {
		t.Fatalf("TopicDelete: %v, want ErrConflict", err)
	}
	if _, err := s.TopicGet(ctx, "orders"); err != nil {
		t.Fatalf("TopicGet after the refused delete: %v", err)
	}
}
