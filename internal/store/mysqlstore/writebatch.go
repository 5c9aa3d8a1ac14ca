package mysqlstore

import (
	"context"
	"database/sql"
)

// execer runs a write: a *conntx, or a writeBatch that queues it.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// writeBatch queues a transaction's writes whose results nothing reads
// (a lease's queue-row moves and message-row update, an ack's deletes and
// tombstones, a count row): they go to the server with the transaction's
// next statement or its COMMIT, in one query of several statements (see
// conntx). Every statement was a round trip of its own, and at a paced
// flow the server's CPU is round trips (socket syscalls and the scheduler
// waking the goroutines that wait on them); a due lease made nine.
//
// The statements still run in order and in the transaction: the first
// that fails stops the rest, and its error is the query's, so the
// caller's transaction is rolled back as before. Without Store.multi each
// write runs at once.
type writeBatch struct{ tx *conntx }

func (s *Store) writes(tx *conntx) *writeBatch { return &writeBatch{tx: tx} }

// ExecContext queues a write. The Result is always nil: only for writes
// whose result nothing reads.
func (w *writeBatch) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if !w.tx.multi {
		_, err := w.tx.ExecContext(ctx, query, args...)
		return nil, err
	}
	w.tx.queue(query, args)
	return nil, nil
}

// QueryRowContext runs the queued writes and then query, in one round
// trip: the driver passes over the writes' results (OK packets) to the
// query's rows, and a write's error is the row's.
func (w *writeBatch) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	return w.tx.QueryRowContext(ctx, query, args...)
}
