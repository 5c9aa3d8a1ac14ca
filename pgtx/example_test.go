package pgtx_test

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/pgtx"
)

// Create an order and schedule its "close if unpaid" check in one
// transaction: both happen, or neither.
func Example() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return
	}
	defer tx.Rollback(ctx) // no-op after Commit
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total) VALUES ($1, $2)`, 42, 99.50); err != nil {
		return
	}
	if _, err := pgtx.Send(ctx, tx, "", "orders.close", pgtx.Message{
		ID: "order-42", Payload: []byte(`{"order":42}`), Delay: 30 * time.Minute,
	}); err != nil {
		return
	}
	_ = tx.Commit(ctx) // the message exists from here on
}

// Schedule a reminder per line of an order in one call (delayq_send_many):
// the database inserts them together.
func ExampleSendMany() {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, "postgres://app@127.0.0.1:5432/shop")
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	_ = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		msgs := []pgtx.Message{
			{ID: "order-42-line-1", Payload: []byte(`{"line":1}`), Delay: 24 * time.Hour},
			{ID: "order-42-line-2", Payload: []byte(`{"line":2}`), Delay: 48 * time.Hour},
		}
		_, err := pgtx.SendMany(ctx, tx, "", "orders.remind", msgs...)
		return err
	})
}
