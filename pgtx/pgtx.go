// Package pgtx sends delayq messages inside an application's own
// PostgreSQL transaction, for deployments that run `delayq serve
// --postgres`: the message exists if and only if the transaction commits,
// and the running servers hear of it at commit. Close an unpaid order in
// 30 minutes with the same commit that created the order — never a
// message for a rolled-back order, never an order without its message.
//
// Send and SendSQL call the SQL function delayq_send, SendMany its batch
// form delayq_send_many, that the server's schema migration installs
// (docs/postgres.md documents them for other languages).
package pgtx

import (
	"context"
	"database/sql"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store/pgstore"
)

// DefaultSchema is the schema `delayq serve --postgres` uses unless told
// otherwise (--postgres-schema).
const DefaultSchema = pgstore.DefaultSchema

// Message is one message to send: an ID ("" for a generated one), the
// payload, optional headers, and a Delay or a DeliverAt (neither: due at
// once). MaxAttempts 0 takes the topic's setting. Priority orders it among
// the topic's due messages (lower first; 0, the default, first of all;
// other than 0 it calls delayq_send's 8-argument form, schema version 3).
type Message = pgstore.TxMessage

// Result says what was sent: the message's id, whether the topic already
// held it (Duplicate: nothing new was sent), and its due time.
type Result = pgstore.TxResult

// Send sends msgs to topic inside tx (one round trip). schema is the
// server's --postgres-schema ("" for DefaultSchema). An error aborts tx,
// as any error inside a PostgreSQL transaction does.
func Send(ctx context.Context, tx pgx.Tx, schema, topic string, msgs ...Message) ([]Result, error) {
	return pgstore.SendTx(ctx, tx, schema, topic, msgs...)
}

// SendMany is Send in one SQL call (delayq_send_many, schema version 6):
// the database inserts the messages together, several times faster than
// Send for batches. The application's role needs EXECUTE on
// delayq_send_many besides delayq_send (docs/postgres.md).
func SendMany(ctx context.Context, tx pgx.Tx, schema, topic string, msgs ...Message) ([]Result, error) {
	return pgstore.SendManyTx(ctx, tx, schema, topic, msgs...)
}

// SendSQL is Send for database/sql with any PostgreSQL driver (pgx's
// stdlib, lib/pq): one statement per message.
func SendSQL(ctx context.Context, tx *sql.Tx, schema, topic string, msgs ...Message) ([]Result, error) {
	return pgstore.SendSQLTx(ctx, tx, schema, topic, msgs...)
}
