package mysqlstore

import (
	"context"
	"database/sql"
	"strings"
)

// execer runs a write: a *sql.Tx, or a writeBatch that queues it.
type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// writeBatch holds a transaction's writes whose results nothing reads (a
// lease's queue-row moves and message-row update, an ack's deletes and
// tombstones, a count row) and sends them to the server together, in one
// query of several statements, with the read that follows them or on
// flush. Every statement was a round trip of its own, and at a paced flow
// the server's CPU is round trips (socket syscalls and the scheduler
// waking the goroutines that wait on them); a due lease made nine.
//
// The statements still run in order and in the transaction: the first
// that fails stops the rest, and its error is the query's, so the
// caller's transaction is rolled back as before. Reads through tx
// directly do not see queued writes: use QueryRowContext, or flush first.
// Without Store.multi each write runs at once.
type writeBatch struct {
	tx    *sql.Tx
	multi bool
	sql   strings.Builder
	args  []any
}

func (s *Store) writes(tx *sql.Tx) *writeBatch { return &writeBatch{tx: tx, multi: s.multi} }

// ExecContext queues a write. The Result is always nil: only for writes
// whose result nothing reads.
func (w *writeBatch) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	if !w.multi {
		_, err := w.tx.ExecContext(ctx, query, args...)
		return nil, err
	}
	if w.sql.Len() > 0 {
		w.sql.WriteString(";\n")
	}
	w.sql.WriteString(query)
	w.args = append(w.args, args...)
	return nil, nil
}

// take returns the queued statements and their arguments, and empties w.
func (w *writeBatch) take() (string, []any) {
	q, a := w.sql.String(), w.args
	w.sql.Reset()
	w.args = nil
	return q, a
}

// flush runs the queued writes.
func (w *writeBatch) flush(ctx context.Context) error {
	if w.sql.Len() == 0 {
		return nil
	}
	q, a := w.take()
	_, err := w.tx.ExecContext(ctx, q, a...)
	return err
}

// QueryRowContext runs the queued writes and then query, in one round
// trip: the driver passes over the writes' results (OK packets) to the
// query's rows, and a write's error is the row's.
func (w *writeBatch) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if w.sql.Len() == 0 {
		return w.tx.QueryRowContext(ctx, query, args...)
	}
	q, a := w.take()
	return w.tx.QueryRowContext(ctx, q+";\n"+query, append(a, args...)...)
}
