package mysqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"time"
)

// conntx is one of the store's transactions, run on a connection of the
// pool by hand rather than by database/sql's Tx, so that its BEGIN and
// the writes whose results nothing reads need no round trips of their
// own: with several statements per query (Store.multi) the BEGIN goes
// with the transaction's first statement, and queued writes (writeBatch)
// go with the next statement or with the COMMIT. An ack batch is then two
// round trips (its lookup; its writes and the COMMIT) where database/sql's
// BEGIN and COMMIT alone were two.
//
// Statements run in the order they were given; the first that fails
// stops the query it is in, and its error is that query's, so a write's
// failure surfaces at the next statement or the commit, which fails the
// transaction as before. Without Store.multi every statement is sent at
// once, BEGIN and COMMIT included, as database/sql's Tx did.
//
// A conntx is not safe for concurrent use.
type conntx struct {
	conn  *sql.Conn
	multi bool
	// pending are the statements not sent yet, ";\n"-separated, and
	// their arguments: the BEGIN until the first statement, then queued
	// writes.
	pending strings.Builder
	args    []any
	// begun: a statement reached the server, so a transaction may be
	// open on this connection; queued: a write waits in pending; ended:
	// the transaction committed or rolled back. A connection begun and
	// not ended (a failed rollback, a panic in the transaction's
	// function) must not go back to the pool.
	begun, queued, ended bool
}

// beginStatements start a READ COMMITTED transaction; with sessionRC the
// sessions already run at that level (see Open).
func beginStatements(sessionRC bool) []string {
	if sessionRC {
		return []string{"START TRANSACTION"}
	}
	return []string{"SET TRANSACTION ISOLATION LEVEL READ COMMITTED", "START TRANSACTION"}
}

// beginTx takes a connection from the pool and begins a transaction on
// it (queued with Store.multi).
func (s *Store) beginTx(ctx context.Context) (*conntx, error) {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	tx := &conntx{conn: conn, multi: s.multi}
	if s.multi {
		tx.pending.WriteString(strings.Join(beginStatements(s.sessionRC), ";\n"))
		return tx, nil
	}
	for _, q := range beginStatements(s.sessionRC) {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			tx.rollback(ctx)
			tx.close()
			return nil, err
		}
	}
	return tx, nil
}

// queue adds a write to be sent with the next statement (Store.multi).
func (t *conntx) queue(query string, args []any) {
	t.queued = true
	if t.pending.Len() > 0 {
		t.pending.WriteString(";\n")
	}
	t.pending.WriteString(query)
	t.args = append(t.args, args...)
}

// take returns query preceded by the pending statements, and empties
// them.
func (t *conntx) take(query string, args []any) (string, []any) {
	t.begun = true
	if t.pending.Len() == 0 {
		return query, args
	}
	t.queue(query, args)
	q, a := t.pending.String(), t.args
	t.pending.Reset()
	t.args, t.queued = nil, false
	return q, a
}

// ExecContext runs a statement (after the pending ones).
func (t *conntx) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	q, a := t.take(query, args)
	return t.conn.ExecContext(ctx, q, a...)
}

// QueryContext runs a query (after the pending statements, whose results
// the driver passes over to the query's rows).
func (t *conntx) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	q, a := t.take(query, args)
	return t.conn.QueryContext(ctx, q, a...)
}

// QueryRowContext runs a query of one row (after the pending statements).
func (t *conntx) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	q, a := t.take(query, args)
	return t.conn.QueryRowContext(ctx, q, a...)
}

// commit sends the pending statements and COMMIT; a transaction that ran
// no statement has nothing to commit. On an error the transaction may
// still be open: roll it back.
func (t *conntx) commit(ctx context.Context) error {
	if !t.begun && !t.queued {
		t.ended = true
		return nil
	}
	if _, err := t.ExecContext(ctx, "COMMIT"); err != nil {
		return err
	}
	t.ended = true
	return nil
}

// rollbackTimeout bounds a rollback whose call's time has run out.
const rollbackTimeout = 5 * time.Second

// rollback ends the transaction without its changes. If it cannot (the
// connection broke, or the ROLLBACK failed), the connection is not
// reused: a transaction may be left open on it.
func (t *conntx) rollback(ctx context.Context) {
	t.pending.Reset()
	t.args = nil
	if !t.begun {
		t.ended = true // nothing reached the server
		return
	}
	if ctx.Err() != nil {
		// The call's time ran out: the driver may have given up on the
		// connection mid-answer. Try on a time of the rollback's own.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
	}
	if _, err := t.conn.ExecContext(ctx, "ROLLBACK"); err == nil {
		t.ended = true
	}
}

// close returns the connection to the pool, or closes it when a
// transaction may be left open on it.
func (t *conntx) close() {
	if t.begun && !t.ended {
		// Raw's function answering driver.ErrBadConn makes database/sql
		// close the connection instead of pooling it.
		_ = t.conn.Raw(func(any) error { return driver.ErrBadConn })
	}
	_ = t.conn.Close() // an error: closed already, nothing left to do
}
