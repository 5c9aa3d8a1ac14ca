package pgstore

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// setRelaxedCommit turns synchronous_commit off for the rest of the
// transaction it runs in (set_config's is_local), nothing longer: the
// pooled connection keeps the database's setting for the next call.
const setRelaxedCommit = "SELECT set_config('synchronous_commit', 'off', true)"

// queryRelaxed runs sql as a transaction of its own whose commit does not
// wait for its WAL flush. Only for operations a crash may undo — leases,
// promotions, extends and lease expiries: undone, the message is promoted,
// delivered or expired again, which at-least-once allows (the embedded
// engine writes these without an fsync too). Durable calls (sends, acks,
// nacks, cancels) keep the database's setting.
//
// Why: a lease's commit used to wait for the WAL flush, and on a database
// busy with durable sends and acks that is the flush itself plus the
// flushes queued ahead of it — time between a message's due instant and
// its delivery. Nothing durable is weakened: WAL is flushed in order, so
// the ack of a message flushes its lease with it, and an answer is only
// given for what committed.
//
// The setting and the query go in one batch, one round trip; a batch
// outside an explicit transaction runs as one implicit transaction.
func (s *Store) queryRelaxed(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	b := &pgx.Batch{}
	b.Queue(setRelaxedCommit)
	b.Queue(sql, args...)
	br := s.pool.SendBatch(ctx, b)
	if _, err := br.Exec(); err != nil {
		_ = br.Close()
		return nil, err
	}
	rows, err := br.Query()
	if err != nil {
		_ = br.Close()
		return nil, err
	}
	return &batchRows{Rows: rows, br: br}, nil
}

// batchRows closes the batch with its rows, which returns the connection
// to the pool.
type batchRows struct {
	pgx.Rows
	br     pgx.BatchResults
	err    error
	closed bool
}

func (r *batchRows) Close() {
	if r.closed {
		return
	}
	r.closed = true
	r.Rows.Close()
	r.err = r.br.Close()
}

// Err is the rows' error, or else the batch's: a commit that failed is
// reported when the batch closes.
func (r *batchRows) Err() error {
	if err := r.Rows.Err(); err != nil {
		return err
	}
	return r.err
}
