package pgstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// TxMessage is a message sent by SendTx or SendSQLTx.
type TxMessage struct {
	// ID is the message's id; "" has the database generate one (a UUID).
	ID      string
	Payload []byte
	// Headers go through JSON (delayq_send takes jsonb): values must be
	// valid UTF-8 without NUL bytes.
	Headers map[string]string
	// Delay (rounded up to a millisecond) or DeliverAt, not both; neither:
	// due at once.
	Delay     time.Duration
	DeliverAt time.Time
	// MaxAttempts 0 takes the topic's setting, else 25.
	MaxAttempts int
	// Priority orders the message among the topic's due messages: lower
	// first, 0 (the default) first of all. Other than 0 it needs schema
	// version 3 and EXECUTE on delayq_send's 8-argument form
	// (docs/postgres.md).
	Priority uint8
}

// TxResult is what SendTx and SendSQLTx answer for one message.
type TxResult struct {
	ID        string
	Duplicate bool      // the topic already holds this id; nothing was sent
	DueAt     time.Time // the message's due time (the existing one's, for a duplicate)
}

// SendTx sends messages to topic inside the application's transaction tx,
// through the SQL function delayq_send of schema ("" for DefaultSchema):
// they exist if and only if tx commits, and running delayq servers hear of
// them at commit. All messages go in one round trip. Bad arguments fail
// with the database's error (SQLSTATE 22023), which, like any error in a
// transaction, aborts tx.
func SendTx(ctx context.Context, tx pgx.Tx, schema, topic string, msgs ...TxMessage) ([]TxResult, error) {
	if _, err := sendQuery(schema, false); err != nil {
		return nil, err
	}
	b := &pgx.Batch{}
	for i, m := range msgs {
		query, args, err := sendCall(schema, topic, m)
		if err != nil {
			return nil, fmt.Errorf("pgstore: send message %d: %w", i, err)
		}
		b.Queue(query, args...)
	}
	br := tx.SendBatch(ctx, b)
	out := make([]TxResult, len(msgs))
	for i := range msgs {
		if err := br.QueryRow().Scan(&out[i].ID, &out[i].Duplicate, &out[i].DueAt); err != nil {
			_ = br.Close()
			return nil, fmt.Errorf("pgstore: send message %d: %w", i, err)
		}
	}
	if err := br.Close(); err != nil {
		return nil, fmt.Errorf("pgstore: send: %w", err)
	}
	return out, nil
}

// SendManyTx is SendTx in one statement: it calls delayq_send_many
// (schema version 6) once with every message, which the database inserts
// together instead of one delayq_send call each — several times the rate
// for batches. The application's role needs EXECUTE on delayq_send_many
// (docs/postgres.md).
func SendManyTx(ctx context.Context, tx pgx.Tx, schema, topic string, msgs ...TxMessage) ([]TxResult, error) {
	schema = cmp.Or(schema, DefaultSchema)
	if err := checkSchema(schema); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return []TxResult{}, nil
	}
	n := len(msgs)
	ids, headers := make([]*string, n), make([]*string, n)
	payloads := make([][]byte, n)
	delays := make([]int64, n)
	attempts := make([]*int32, n)
	deliverAt := make([]*time.Time, n)
	priorities := make([]int32, n)
	for i, m := range msgs {
		args, err := sendArgs(m)
		if err != nil {
			return nil, fmt.Errorf("pgstore: send message %d: %w", i, err)
		}
		if m.ID != "" {
			ids[i] = &msgs[i].ID
		}
		payloads[i] = args[1].([]byte)
		delays[i] = args[2].(int64)
		if h, ok := args[3].(string); ok {
			headers[i] = &h
		}
		if m.MaxAttempts != 0 {
			a := int32(m.MaxAttempts) // #nosec G115 -- out of range values are refused by the database, which checks 1..1000
			if int(a) != m.MaxAttempts {
				return nil, fmt.Errorf("pgstore: send message %d: max attempts %d: want 1 to 1000", i, m.MaxAttempts)
			}
			attempts[i] = &a
		}
		if !m.DeliverAt.IsZero() {
			deliverAt[i] = &msgs[i].DeliverAt
		}
		priorities[i] = int32(m.Priority)
	}
	query := "SELECT message_id, duplicate, due_at FROM " + pgx.Identifier{schema}.Sanitize() +
		".delayq_send_many($1, $2::text[], $3::bytea[], $4::bigint[], $5::text[]::jsonb[], $6::integer[], $7::timestamptz[], $8::integer[])"
	rows, err := tx.Query(ctx, query, topic, ids, payloads, delays, headers, attempts, deliverAt, priorities)
	if err != nil {
		return nil, fmt.Errorf("pgstore: send: %w", err)
	}
	out := make([]TxResult, 0, n)
	for rows.Next() {
		var r TxResult
		if err := rows.Scan(&r.ID, &r.Duplicate, &r.DueAt); err != nil {
			rows.Close()
			return nil, fmt.Errorf("pgstore: send: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgstore: send: %w", err)
	}
	if len(out) != n {
		return nil, fmt.Errorf("pgstore: send: %d answers for %d messages", len(out), n)
	}
	return out, nil
}

// SendSQLTx is SendTx for database/sql, with any PostgreSQL driver (pgx's
// stdlib, lib/pq): one statement per message.
func SendSQLTx(ctx context.Context, tx *sql.Tx, schema, topic string, msgs ...TxMessage) ([]TxResult, error) {
	if _, err := sendQuery(schema, false); err != nil {
		return nil, err
	}
	out := make([]TxResult, len(msgs))
	for i, m := range msgs {
		query, args, err := sendCall(schema, topic, m)
		if err != nil {
			return nil, fmt.Errorf("pgstore: send message %d: %w", i, err)
		}
		if err := tx.QueryRowContext(ctx, query, args...).Scan(&out[i].ID, &out[i].Duplicate, &out[i].DueAt); err != nil {
			return nil, fmt.Errorf("pgstore: send message %d: %w", i, err)
		}
	}
	return out, nil
}

// sendQuery calls delayq_send: the 7-argument form (priority 0, every
// schema version, the grant applications had before priorities), or with
// priority the 8-argument one (schema version 3).
func sendQuery(schema string, priority bool) (string, error) {
	schema = cmp.Or(schema, DefaultSchema)
	if err := checkSchema(schema); err != nil {
		return "", err
	}
	q := "SELECT message_id, duplicate, due_at FROM " + pgx.Identifier{schema}.Sanitize() + ".delayq_send($1, $2, $3, $4, $5::jsonb, $6, $7"
	if priority {
		return q + ", $8)", nil
	}
	return q + ")", nil
}

// sendCall is the query and arguments that send m.
func sendCall(schema, topic string, m TxMessage) (string, []any, error) {
	args, err := sendArgs(m)
	if err != nil {
		return "", nil, err
	}
	query, err := sendQuery(schema, m.Priority != 0)
	if err != nil {
		return "", nil, err
	}
	args = append([]any{topic}, args...)
	if m.Priority != 0 {
		args = append(args, int64(m.Priority))
	}
	return query, args, nil
}

// sendArgs are delayq_send's arguments after the topic, as plain driver
// values (string, []byte, int64, time.Time, nil) that every driver
// encodes.
func sendArgs(m TxMessage) ([]any, error) {
	if m.Delay < 0 {
		return nil, errors.New("negative delay")
	}
	if m.Delay != 0 && !m.DeliverAt.IsZero() {
		return nil, errors.New("give either Delay or DeliverAt, not both")
	}
	var id, headers, attempts, deliverAt any
	if m.ID != "" {
		id = m.ID
	}
	if len(m.Headers) > 0 {
		for k, v := range m.Headers {
			if !utf8.ValidString(v) || strings.IndexByte(v, 0) >= 0 {
				return nil, fmt.Errorf("header %q: the value must be valid UTF-8 without NUL bytes to go through JSON", k)
			}
		}
		b, err := json.Marshal(m.Headers)
		if err != nil {
			return nil, err
		}
		headers = string(b)
	}
	if m.MaxAttempts != 0 {
		attempts = int64(m.MaxAttempts)
	}
	if !m.DeliverAt.IsZero() {
		deliverAt = m.DeliverAt
	}
	payload := m.Payload
	if payload == nil {
		payload = []byte{}
	}
	delay := int64((m.Delay + time.Millisecond - 1) / time.Millisecond) // rounded up: never early
	return []any{id, payload, delay, headers, attempts, deliverAt}, nil
}
