// Package mysqltx sends delayq messages inside an application's own
// MySQL/MariaDB transaction, for deployments that run `delayq serve
// --mysql`: the message exists if and only if the transaction commits.
// Close an unpaid order in 30 minutes with the same commit that created
// the order.
//
// Send calls the stored procedure <prefix>send that the server's schema
// migration installs, or <prefix>send_priority for a message with a
// Priority (docs/mysql.md documents both for other languages).
// The servers notice a committed send within their poll interval (50 ms).
package mysqltx

import (
	"context"
	"database/sql"

	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// DefaultPrefix is the table prefix `delayq serve --mysql` uses unless
// told otherwise (--mysql-prefix).
const DefaultPrefix = mysqlstore.DefaultPrefix

// Message is one message to send: an ID ("" for a generated one), the
// payload, and a Delay (0: due at once); MaxAttempts 0 means 25; Priority
// orders it among the topic's due messages (lower first; 0, the default,
// first of all).
type Message = mysqlstore.TxMessage

// Result says what was sent: the message's id, whether the topic already
// held it (Duplicate: nothing new was sent), and its due time.
type Result = mysqlstore.TxResult

// Send sends msgs to topic inside tx. prefix is the server's
// --mysql-prefix ("" for DefaultPrefix). On an error, roll tx back.
func Send(ctx context.Context, tx *sql.Tx, prefix, topic string, msgs ...Message) ([]Result, error) {
	return mysqlstore.SendTx(ctx, tx, prefix, topic, msgs...)
}

// SendMany is Send in one call of the procedure <prefix>send_many (schema
// version 8): two round trips for the whole batch instead of two per
// message. The user needs EXECUTE on <prefix>send_many; ids must be valid
// UTF-8 (Send takes any bytes).
func SendMany(ctx context.Context, tx *sql.Tx, prefix, topic string, msgs ...Message) ([]Result, error) {
	return mysqlstore.SendManyTx(ctx, tx, prefix, topic, msgs...)
}
