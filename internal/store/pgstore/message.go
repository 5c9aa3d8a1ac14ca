package pgstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/sqlcodec"
)

// Statuses of the rec rows the SQL operations answer (migrations/0001).
const (
	statusOK        = 0 // or new, for inserts
	statusDuplicate = 1
	statusNotFound  = 2
	statusConflict  = 3
)

// recCols are the columns of the rec type, in order; scanRec reads them.
const recCols = "status, topic, id, seq, state, due_at, created_at, updated_at, deliveries, failures, max_attempts, last_error, receipt, lease_until, dead_at, acked_at, headers, payload, priority"

// recColsOf is recCols qualified by alias a: a query names rec's columns
// rather than a.*, so that a later schema may add some.
func recColsOf(a string) string { return a + "." + strings.ReplaceAll(recCols, ", ", ", "+a+".") }

// scanRec reads one rec row.
func scanRec(row pgx.Row) (int32, *store.Record, error) {
	var (
		status           int32
		r                store.Record
		state            int16
		seq              int64
		lastErr, headers []byte
		receipt          pgtype.Text
		topic, id        pgtype.Text
		priority         pgtype.Int2
	)
	err := row.Scan(&status, &topic, &id, &seq, &state, &r.DueAt, &r.CreatedAt, &r.UpdatedAt,
		&r.Deliveries, &r.Failures, &r.MaxAttempts, &lastErr, &receipt, &r.LeaseUntil, &r.DeadAt, &r.AckedAt,
		&headers, &r.Payload, &priority)
	if err != nil {
		return 0, nil, err
	}
	r.Topic, r.ID, r.Receipt = topic.String, id.String, receipt.String
	r.Seq = uint64(seq)          // #nosec G115 -- a sequence starting at 1
	r.State = store.State(state) // #nosec G115 -- 0..5, written by the SQL operations
	r.LastError = string(lastErr)
	r.Priority = uint8(priority.Int16) // #nosec G115 -- 0..255: op_insert stores a uint8, delayq_send checks the range
	if len(r.Payload) == 0 {
		r.Payload = nil
	}
	if r.Headers, err = sqlcodec.DecodeHeaders(headers); err != nil {
		return 0, nil, fmt.Errorf("message %s/%s: %w", r.Topic, r.ID, err)
	}
	return status, &r, nil
}

// recs runs a query answering rec rows and reads them all.
func (s *Store) recs(ctx context.Context, op, sql string, args ...any) ([]int32, []*store.Record, error) {
	rows, err := s.pool.Query(ctx, sql, args...)
	return s.readRecs(op, rows, err)
}

// recsRelaxed is recs for an operation a crash may undo (see queryRelaxed).
func (s *Store) recsRelaxed(ctx context.Context, op, sql string, args ...any) ([]int32, []*store.Record, error) {
	rows, err := s.queryRelaxed(ctx, sql, args...)
	return s.readRecs(op, rows, err)
}

// readRecs reads the rec rows of a query and closes them.
func (s *Store) readRecs(op string, rows pgx.Rows, err error) ([]int32, []*store.Record, error) {
	if err != nil {
		return nil, nil, s.fail(op, err)
	}
	defer rows.Close()
	var sts []int32
	var out []*store.Record
	for rows.Next() {
		st, r, err := scanRec(rows)
		if err != nil {
			return nil, nil, s.readErr(op, err)
		}
		sts = append(sts, st)
		out = append(out, r)
	}
	rows.Close() // a batch's commit reports its error here
	if err := rows.Err(); err != nil {
		return nil, nil, s.fail(op, err)
	}
	return sts, out, nil
}

// readErr classifies a failure to read an answer: a bad header blob is
// corruption, anything else the connection's.
func (s *Store) readErr(op string, err error) error {
	if errors.Is(err, store.ErrCorrupt) {
		return fmt.Errorf("pgstore: %s: %w", op, err)
	}
	return s.fail(op, err)
}

// one runs an operation on one message and maps its status to an error.
func (s *Store) one(ctx context.Context, op, topic, id, sql string, args ...any) (*store.Record, error) {
	sts, recs, err := s.recs(ctx, op, sql, args...)
	return onlyRec(op, topic, id, sts, recs, err)
}

// onlyRec is the one answer of an operation on one message, its status
// mapped to an error.
func onlyRec(op, topic, id string, sts []int32, recs []*store.Record, err error) (*store.Record, error) {
	if err != nil {
		return nil, err
	}
	if len(recs) != 1 {
		return nil, fmt.Errorf("pgstore: %s: %d answers, want 1: %w", op, len(recs), store.ErrCorrupt)
	}
	if err := statusErr(op, topic, id, sts[0], recs[0]); err != nil {
		return nil, err
	}
	return recs[0], nil
}

func statusErr(op, topic, id string, st int32, r *store.Record) error {
	switch st {
	case statusOK:
		return nil
	case statusNotFound:
		return fmt.Errorf("pgstore: %s: message %q in topic %q: %w", op, id, topic, store.ErrNotFound)
	case statusConflict:
		return fmt.Errorf("pgstore: %s: message %q in topic %q is %s: %w", op, id, topic, r.State, store.ErrConflict)
	}
	return fmt.Errorf("pgstore: %s: status %d: %w", op, st, store.ErrCorrupt)
}

// maxSendTries bounds how often a send that PostgreSQL rolled back for a
// deadlock or a serialization failure is run again.
const maxSendTries = 3

// retryable reports a failure that PostgreSQL resolved by rolling the
// transaction back, so that running it again may succeed.
func retryable(err error) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && (pe.Code == "40P01" || pe.Code == "40001")
}

// fn is the qualified name of an SQL function of the schema.
func (s *Store) fn(name string) string { return s.q + "." + name }

// MessageInsertMany implements store.Store.
func (s *Store) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) (_ []store.InsertResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(p.Messages) == 0 {
		return []store.InsertResult{}, nil
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	n := len(p.Messages)
	args := insertArgs(s.nowArg(p.Now), p)
	var sts []int32
	var recs []*store.Record
	for try := 1; ; try++ {
		// p_echo false: a new message is answered without its headers and
		// payload, taken from p below instead of read back (schema 12).
		sts, recs, err = s.recsEncoded(ctx, "send", "SELECT "+recCols+" FROM "+s.fn("op_insert")+"($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, false, $11, false)", args)
		// The call is its own transaction, rolled back whole on a deadlock
		// (40P01: the narrow race of concurrent batches sharing ids, see
		// the package doc) or a serialization failure (40001: an id kept
		// changing under concurrent sends and acks): run it again.
		if err == nil || try == maxSendTries || !retryable(err) || ctx.Err() != nil {
			break
		}
	}
	if err != nil {
		return nil, err
	}
	if len(recs) != n {
		return nil, fmt.Errorf("pgstore: send: %d answers for %d messages: %w", len(recs), n, store.ErrCorrupt)
	}
	out := make([]store.InsertResult, n)
	earliest, now := int64(-1), int64(0)
	for i, r := range recs {
		out[i] = store.InsertResult{Record: r, Duplicate: sts[i] == statusDuplicate}
		if sts[i] == statusOK {
			if !p.SenderKeepsBodies {
				r.Payload, r.Headers = sentPayload(p.Messages[i].Payload), sentHeaders(p.Messages[i].Headers)
			}
			if d := store.NotifyDue(r); earliest < 0 || d < earliest {
				earliest, now = d, r.CreatedAt
			}
		}
	}
	if earliest >= 0 {
		s.notifySoon(ctx, p.Topic, earliest, now)
	}
	return out, nil
}

// insertArgs are op_insert's parameters for a batch, but for its
// p_notify and p_echo: p_now, p_topic, then an array per message field.
func insertArgs(now *int64, p *store.MessageInsertManyParams) []any {
	n := len(p.Messages)
	ids, payloads, headers := make([]string, n), make([][]byte, n), make([][]byte, n)
	dues, delays, attempts := make([]int64, n), make([]int64, n), make([]int32, n)
	relative, generated := make([]bool, n), make([]bool, n)
	priorities := make([]int16, n)
	for i, m := range p.Messages {
		priorities[i] = int16(m.Priority)
		ids[i], payloads[i], headers[i] = m.ID, m.Payload, sqlcodec.EncodeHeaders(m.Headers)
		dues[i], relative[i], delays[i], attempts[i], generated[i] = m.DueAt, m.Relative, m.Delay, m.MaxAttempts, m.Generated
	}
	return []any{now, p.Topic, ids, payloads, headers, dues, relative, delays, attempts, generated, priorities}
}

// sentPayload is a new message's payload as the store answers it: a copy
// of what was sent (the caller may reuse its buffer), nil when empty,
// as read back from the payload column (NULL when empty).
func sentPayload(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	return bytes.Clone(p)
}

// sentHeaders is sentPayload for headers (NULL when empty).
func sentHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	return maps.Clone(h)
}

// MessageGet implements store.Store.
func (s *Store) MessageGet(ctx context.Context, topic, id string) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	// One statement, one snapshot: an ack moves the message to tombstone
	// atomically, so it is found in exactly one of them.
	_, recs, err := s.recs(ctx, "get", "SELECT "+recColsOf("r")+" FROM "+s.fn("message")+" m, LATERAL "+s.fn("rec_msg")+"(m, 0) r WHERE m.topic = $1 AND m.id = $2"+
		" UNION ALL SELECT "+recColsOf("r")+" FROM "+s.fn("tombstone")+" t, LATERAL "+s.fn("rec_tomb")+"(t, 0) r WHERE t.topic = $1 AND t.id = $2 LIMIT 1", topic, id)
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, fmt.Errorf("pgstore: message %q in topic %q: %w", id, topic, store.ErrNotFound)
	}
	return recs[0], nil
}

// MessageCancel implements store.Store.
func (s *Store) MessageCancel(ctx context.Context, p *store.MessageCancelParams) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	return s.one(ctx, "cancel", p.Topic, p.ID, "SELECT "+recCols+" FROM "+s.fn("op_cancel")+"($1, $2)", p.Topic, p.ID)
}

// MessageReschedule implements store.Store.
func (s *Store) MessageReschedule(ctx context.Context, p *store.MessageRescheduleParams) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	r, err := s.one(ctx, "reschedule", p.Topic, p.ID, "SELECT "+recCols+" FROM "+s.fn("op_reschedule")+"($1, $2, $3, $4, $5, $6)",
		s.nowArg(p.Now), p.Topic, p.ID, p.DueAt, p.Relative, p.Delay)
	if err != nil {
		return nil, err
	}
	s.notifySoon(ctx, p.Topic, store.NotifyDue(r), r.UpdatedAt)
	return r, nil
}

// MessagePromote implements store.Store.
func (s *Store) MessagePromote(ctx context.Context, p *store.MessagePromoteParams) (_ *store.PromoteResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	// op_promote_grace without a grace: op_promote changing its rows by
	// key (migrations/0007_lease_due.sql); its NextDue is then the earliest
	// scheduled message, due or not.
	res, err := s.promoteGrace(ctx, p, 0)
	if err != nil {
		return nil, err
	}
	if res.HeldDue != 0 {
		res.NextDue = res.HeldDue
	}
	res.HeldDue = 0
	return res, nil
}

// MessagePromoteGrace implements store.DueLeaser.
func (s *Store) MessagePromoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (_ *store.PromoteResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	return s.promoteGrace(ctx, p, grace)
}

// promoteGrace runs op_promote_grace.
func (s *Store) promoteGrace(ctx context.Context, p *store.MessagePromoteParams, grace int64) (*store.PromoteResult, error) {
	var res store.PromoteResult
	var promoted int32
	rows, err := s.queryRelaxed(ctx, "SELECT promoted, next_due, held_due, now_ms FROM "+s.fn("op_promote_grace")+"($1, $2, $3, $4)",
		s.nowArg(p.Now), p.Topic, p.Max, grace)
	if err == nil {
		// pgx.CollectExactlyOneRow: no row is pgx.ErrNoRows, as QueryRow's.
		_, err = pgx.CollectExactlyOneRow(rows, func(row pgx.CollectableRow) (struct{}, error) {
			return struct{}{}, row.Scan(&promoted, &res.NextDue, &res.HeldDue, &res.Now)
		})
		if err == nil {
			err = rows.Err() // closed: the commit's error, if any
		}
	}
	if err != nil {
		return nil, s.fail("promote", err)
	}
	res.Promoted = int(promoted)
	if s.callerNow {
		res.Now = 0 // "judged by Params.Now"
	}
	if res.Promoted > 0 {
		// Other servers armed the same due time; whichever promotes first
		// must wake their long-polls too, or they sleep until the sweep.
		s.notify(ctx, map[string]int64{p.Topic: 0})
	}
	return &res, nil
}

// MessageLeaseDue implements store.DueLeaser: MessageLeaseDueNext's
// records.
func (s *Store) MessageLeaseDue(ctx context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	res, err := s.MessageLeaseDueNext(ctx, p)
	if err != nil {
		return nil, err
	}
	return res.Records, nil
}

// MessageLeaseDueNext implements store.NextDueLeaser: op_lease_due, and
// in the same batch (one round trip, one implicit transaction) the
// first due time left in q_scheduled. READ COMMITTED takes a snapshot per
// statement, so that read sees what the lease left (and any send
// committed since): at most the first due time after the lease.
func (s *Store) MessageLeaseDueNext(ctx context.Context, p *store.MessageLeaseParams) (_ *store.LeaseDueResult, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	b := &pgx.Batch{}
	b.Queue(setRelaxedCommit)
	b.Queue("SELECT "+recCols+" FROM "+s.fn("op_lease_due")+"($1, $2, $3, $4, $5)",
		s.nowArg(p.Now), p.Topic, p.Max, p.LeaseFor, p.Token)
	b.Queue("SELECT coalesce((SELECT q.due_at FROM "+s.fn("q_scheduled")+" q WHERE q.topic = $1 ORDER BY q.due_at, q.seq LIMIT 1), 0), "+
		s.fn("now_ms")+"()", p.Topic)
	br := s.pool.SendBatch(ctx, b)
	res, err := s.readLeaseDueNext(br)
	if cerr := br.Close(); err == nil && cerr != nil { // the commit's error
		err = s.fail("lease", cerr)
	}
	if err != nil {
		return nil, err
	}
	if s.callerNow {
		res.Now = 0 // "judged by Params.Now"
	}
	return res, nil
}

// readLeaseDueNext reads MessageLeaseDueNext's batch up to its commit.
func (s *Store) readLeaseDueNext(br pgx.BatchResults) (*store.LeaseDueResult, error) {
	if _, err := br.Exec(); err != nil {
		return nil, s.fail("lease", err)
	}
	rows, err := br.Query()
	if err != nil {
		return nil, s.fail("lease", err)
	}
	_, recs, err := s.readRecs("lease", rows, nil)
	if err != nil {
		return nil, err
	}
	res := &store.LeaseDueResult{Records: recs}
	if err := br.QueryRow().Scan(&res.NextDue, &res.Now); err != nil {
		return nil, s.fail("lease", err)
	}
	return res, nil
}

// ReportsNextDue implements store.NextDueLeaser.
func (s *Store) ReportsNextDue() bool { return true }

// MessageLease implements store.Store.
func (s *Store) MessageLease(ctx context.Context, p *store.MessageLeaseParams) (_ []*store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	_, recs, err := s.recsRelaxed(ctx, "lease", "SELECT "+recCols+" FROM "+s.fn("op_lease")+"($1, $2, $3, $4, $5)",
		s.nowArg(p.Now), p.Topic, p.Max, p.LeaseFor, p.Token)
	return recs, err
}

// MessageAck implements store.Store.
func (s *Store) MessageAck(ctx context.Context, p *store.MessageAckParams) error {
	errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: p.Topic, Now: p.Now, Items: []store.AckItem{{ID: p.ID, Receipt: p.Receipt}}})
	if err != nil {
		return err
	}
	return errs[0]
}

// MessageAckMany implements store.Store.
func (s *Store) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) (_ []error, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	if len(p.Items) == 0 {
		return []error{}, nil
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	ids, receipts := make([]string, len(p.Items)), make([]string, len(p.Items))
	for i, it := range p.Items {
		ids[i], receipts[i] = it.ID, it.Receipt
	}
	rows, err := s.pool.Query(ctx, "SELECT * FROM "+s.fn("op_ack_many")+"($1, $2, $3, $4)", s.nowArg(p.Now), p.Topic, ids, receipts)
	if err != nil {
		return nil, s.fail("ack", err)
	}
	sts, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil, s.fail("ack", err)
	}
	if len(sts) != len(p.Items) {
		return nil, fmt.Errorf("pgstore: ack: %d answers for %d items: %w", len(sts), len(p.Items), store.ErrCorrupt)
	}
	out := make([]error, len(sts))
	for i, st := range sts {
		switch st {
		case statusOK:
		case statusNotFound:
			out[i] = fmt.Errorf("pgstore: ack: message %q in topic %q: %w", ids[i], p.Topic, store.ErrNotFound)
		case statusConflict:
			out[i] = fmt.Errorf("pgstore: ack: message %q in topic %q is not leased with this receipt: %w", ids[i], p.Topic, store.ErrConflict)
		default:
			return nil, fmt.Errorf("pgstore: ack: status %d: %w", st, store.ErrCorrupt)
		}
	}
	return out, nil
}

// MessageNack implements store.Store.
func (s *Store) MessageNack(ctx context.Context, p *store.MessageNackParams) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	var r *store.Record
	if p.Final {
		r, err = s.one(ctx, "nack", p.Topic, p.ID, "SELECT "+recCols+" FROM "+s.fn("op_nack_final")+"($1, $2, $3, $4, $5)",
			s.nowArg(p.Now), p.Topic, p.ID, p.Receipt, []byte(p.Error))
	} else {
		r, err = s.one(ctx, "nack", p.Topic, p.ID, "SELECT "+recCols+" FROM "+s.fn("op_nack")+"($1, $2, $3, $4, $5, $6)",
			s.nowArg(p.Now), p.Topic, p.ID, p.Receipt, p.RetryDelay, []byte(p.Error))
	}
	if err != nil {
		return nil, err
	}
	if r.State == store.StateScheduled || r.State == store.StateReady {
		s.notifySoon(ctx, p.Topic, store.NotifyDue(r), r.UpdatedAt)
	}
	return r, nil
}

// MessageExtend implements store.Store.
func (s *Store) MessageExtend(ctx context.Context, p *store.MessageExtendParams) (_ *store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	sts, recs, err := s.recsRelaxed(ctx, "extend", "SELECT "+recCols+" FROM "+s.fn("op_extend")+"($1, $2, $3, $4, $5)",
		s.nowArg(p.Now), p.Topic, p.ID, p.Receipt, p.LeaseFor)
	return onlyRec("extend", p.Topic, p.ID, sts, recs, err)
}

// LeaseExpire implements store.Store.
func (s *Store) LeaseExpire(ctx context.Context, p *store.LeaseExpireParams) (_ []*store.Record, err error) {
	if err := s.check(); err != nil {
		return nil, err
	}
	ctx, end := s.bound(ctx)
	defer end(&err)
	_, recs, err := s.recsRelaxed(ctx, "expire leases", "SELECT "+recCols+" FROM "+s.fn("op_expire")+"($1, $2)", s.nowArg(p.Now), p.Max)
	if err != nil {
		return nil, err
	}
	ready := map[string]int64{}
	for _, r := range recs {
		if r.State == store.StateReady {
			ready[r.Topic] = 0
		}
	}
	s.notify(ctx, ready)
	return recs, nil
}
