package mysqlstore

import (
	"context"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
)

// TxMessage is a message sent by SendTx.
type TxMessage struct {
	// ID is the message's id; "" has the database generate one (a UUID).
	ID      string
	Payload []byte
	// Delay, rounded up to a millisecond; 0: due at once.
	Delay time.Duration
	// MaxAttempts 0: 25.
	MaxAttempts int
	// Priority orders the message among the topic's due messages: lower
	// first, 0 (the default) first of all. Other than 0 it calls
	// <prefix>send_priority (schema version 3), which needs its own
	// EXECUTE grant.
	Priority uint8
}

// TxResult is what SendTx answers for one message.
type TxResult struct {
	ID        string
	Duplicate bool      // the topic already holds this id; nothing was sent
	DueAt     time.Time // the message's due time (the existing one's, for a duplicate)
}

// SendTx sends messages to topic inside the application's transaction tx,
// through the stored procedure <prefix>send (prefix "" for DefaultPrefix):
// they exist if and only if tx commits. Errors (a bad argument, a
// concurrent send of the same id) leave tx to the caller, who should roll
// it back.
func SendTx(ctx context.Context, tx *sql.Tx, prefix, topic string, msgs ...TxMessage) ([]TxResult, error) {
	prefix, err := txPrefix(prefix)
	if err != nil {
		return nil, err
	}
	out := make([]TxResult, len(msgs))
	for i, m := range msgs {
		idLit := "NULL"
		if m.ID != "" {
			idLit = hexLit([]byte(m.ID))
		}
		delay := (m.Delay + time.Millisecond - 1).Milliseconds()
		if m.Delay < 0 {
			return nil, fmt.Errorf("mysqlstore: send message %d: negative delay", i)
		}
		payload := m.Payload
		if payload == nil {
			payload = []byte{}
		}
		// The values are written into the statement as hex literals and
		// integers, so that it is one round trip whatever the
		// application's driver settings: with parameters and without
		// interpolateParams, go-sql-driver makes three (prepare, execute,
		// close), which made most of a transactional send's time.
		args := hexLit([]byte(topic)) + ", " + idLit + ", " + hexLit(payload) + ", " + strconv.FormatInt(delay, 10) + ", " + strconv.Itoa(m.MaxAttempts)
		call := "CALL `" + prefix + "send`(" + args + ", @delayq_id, @delayq_dup, @delayq_due)" // #nosec G202 -- txPrefix checked the prefix against prefixRE; values are hex literals and integers formatted here
		if m.Priority != 0 {
			call = "CALL `" + prefix + "send_priority`(" + args + ", " + strconv.Itoa(int(m.Priority)) + ", @delayq_id, @delayq_dup, @delayq_due)" // #nosec G202 -- as above
		}
		if _, err := tx.ExecContext(ctx, call); err != nil {
			return nil, fmt.Errorf("mysqlstore: send message %d: %w", i, err)
		}
		var gotID []byte
		var dup int
		var due int64
		if err := tx.QueryRowContext(ctx, "SELECT @delayq_id, @delayq_dup, @delayq_due").Scan(&gotID, &dup, &due); err != nil {
			return nil, fmt.Errorf("mysqlstore: send message %d: %w", i, err)
		}
		out[i] = TxResult{ID: string(gotID), Duplicate: dup != 0, DueAt: time.UnixMilli(due)}
	}
	return out, nil
}

// txPrefix is the table prefix an application's send names: DefaultPrefix
// for "", checked because it is written into the statement.
func txPrefix(prefix string) (string, error) {
	if prefix == "" {
		return DefaultPrefix, nil
	}
	if !prefixRE.MatchString(prefix) {
		return "", fmt.Errorf("mysqlstore: invalid table prefix %q", prefix)
	}
	return prefix, nil
}

// hexLit is b as an SQL hex literal (X'…'): a binary string, whatever the
// connection's character set (an empty one for no bytes).
func hexLit(b []byte) string { return "X'" + hex.EncodeToString(b) + "'" }

// SendManyTx is SendTx in one call: it calls the procedure
// <prefix>send_many (schema version 8) once with every message, as JSON,
// and reads its results with one more statement — two round trips for the
// batch instead of two per message, and one count row. The application's
// user needs EXECUTE on <prefix>send_many. The procedure takes ids as JSON
// strings, so an id that is not valid UTF-8 is refused here (SendTx sends
// any bytes).
func SendManyTx(ctx context.Context, tx *sql.Tx, prefix, topic string, msgs ...TxMessage) ([]TxResult, error) {
	prefix, err := txPrefix(prefix)
	if err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	batch := make([]sendManyMessage, len(msgs))
	for i, m := range msgs {
		if m.Delay < 0 {
			return nil, fmt.Errorf("mysqlstore: send message %d: negative delay", i)
		}
		if m.ID != "" && !utf8.ValidString(m.ID) {
			return nil, fmt.Errorf("mysqlstore: send message %d: id is not valid UTF-8 (send it with SendTx)", i)
		}
		batch[i] = sendManyMessage{
			Payload:     base64.StdEncoding.EncodeToString(m.Payload),
			DelayMS:     (m.Delay + time.Millisecond - 1).Milliseconds(),
			MaxAttempts: m.MaxAttempts,
			Priority:    int(m.Priority),
		}
		if m.ID != "" {
			batch[i].ID = &msgs[i].ID
		}
	}
	doc, err := json.Marshal(batch)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: send: %w", err)
	}
	// Hex literals, as in SendTx: one round trip whatever the driver's
	// settings.
	call := "CALL `" + prefix + "send_many`(" + hexLit([]byte(topic)) + ", CONVERT(" + hexLit(doc) + " USING utf8mb4), @delayq_results)" // #nosec G202 -- txPrefix checked the prefix against prefixRE; values are hex literals
	if _, err := tx.ExecContext(ctx, call); err != nil {
		return nil, fmt.Errorf("mysqlstore: send: %w", err)
	}
	var results []byte
	if err := tx.QueryRowContext(ctx, "SELECT @delayq_results").Scan(&results); err != nil {
		return nil, fmt.Errorf("mysqlstore: send: %w", err)
	}
	var rows []sendManyResult
	if err := json.Unmarshal(results, &rows); err != nil {
		return nil, fmt.Errorf("mysqlstore: send: results of %ssend_many: %w", prefix, err)
	}
	if len(rows) != len(msgs) {
		return nil, fmt.Errorf("mysqlstore: send: %ssend_many answered %d results for %d messages", prefix, len(rows), len(msgs))
	}
	out := make([]TxResult, len(rows))
	for i, r := range rows {
		out[i] = TxResult{ID: r.ID, Duplicate: r.Duplicate != 0, DueAt: time.UnixMilli(r.Due)}
	}
	return out, nil
}

// sendManyMessage is one element of send_many's JSON array.
type sendManyMessage struct {
	ID          *string `json:"id,omitempty"`
	Payload     string  `json:"payload"`
	DelayMS     int64   `json:"delay_ms"`
	MaxAttempts int     `json:"max_attempts"`
	Priority    int     `json:"priority"`
}

// UnmarshalJSON reads a [id, duplicate, due] triple of send_many's results.
func (r *sendManyResult) UnmarshalJSON(b []byte) error {
	return json.Unmarshal(b, &[]any{&r.ID, &r.Duplicate, &r.Due})
}

type sendManyResult struct {
	ID        string
	Duplicate int
	Due       int64
}
