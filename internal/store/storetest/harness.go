package storetest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// harness wraps a store with calls that fail the test on unexpected errors,
// so cases read as the contract does.
type harness struct {
	t      *testing.T
	s      store.Store
	ctx    context.Context
	tokens int
}

func newHarness(t *testing.T, s store.Store) *harness {
	return &harness{t: t, s: s, ctx: context.Background()}
}

// msg is a message with a payload derived from its id and MaxAttempts 3.
func msg(id string, due int64) store.InsertMessage {
	return store.InsertMessage{ID: id, Payload: []byte("payload of " + id), DueAt: due, MaxAttempts: 3}
}

func withPriority(m store.InsertMessage, prio uint8) store.InsertMessage {
	m.Priority = prio
	return m
}

func withMax(m store.InsertMessage, max int32) store.InsertMessage {
	m.MaxAttempts = max
	return m
}

// fresh is the record a new message should be stored as.
func fresh(topic string, m store.InsertMessage, seq uint64, now int64) *store.Record {
	st := store.StateScheduled
	if m.DueAt <= now {
		st = store.StateReady
	}
	return &store.Record{
		Topic: topic, ID: m.ID, Seq: seq, State: st,
		Payload: m.Payload, Headers: m.Headers,
		DueAt: m.DueAt, CreatedAt: now, UpdatedAt: now, MaxAttempts: m.MaxAttempts,
		Priority: m.Priority,
	}
}

func (h *harness) insert(topic string, now int64, msgs ...store.InsertMessage) []store.InsertResult {
	h.t.Helper()
	res, err := h.s.MessageInsertMany(h.ctx, &store.MessageInsertManyParams{Topic: topic, Now: now, Messages: msgs})
	if err != nil {
		h.t.Fatalf("MessageInsertMany(%s): %v", topic, err)
	}
	if len(res) != len(msgs) {
		h.t.Fatalf("MessageInsertMany(%s): %d results for %d messages", topic, len(res), len(msgs))
	}
	for i, r := range res {
		if r.Record == nil {
			h.t.Fatalf("MessageInsertMany(%s): result %d has no record", topic, i)
		}
	}
	return res
}

// insertNew inserts messages that must all be new and checks the records.
func (h *harness) insertNew(topic string, now int64, msgs ...store.InsertMessage) []*store.Record {
	h.t.Helper()
	res := h.insert(topic, now, msgs...)
	out := make([]*store.Record, len(res))
	for i, r := range res {
		if r.Duplicate {
			h.t.Fatalf("insert %s/%s: unexpected Duplicate", topic, msgs[i].ID) // #nosec G602 -- h.insert fails the test unless len(res) == len(msgs)
		}
		Equal(h.t, fresh(topic, msgs[i], r.Record.Seq, now), r.Record) // #nosec G602 -- h.insert fails the test unless len(res) == len(msgs)
		out[i] = r.Record
	}
	return out
}

func (h *harness) get(topic, id string) *store.Record {
	h.t.Helper()
	r, err := h.s.MessageGet(h.ctx, topic, id)
	if err != nil {
		h.t.Fatalf("MessageGet(%s, %s): %v", topic, id, err)
	}
	return r
}

func (h *harness) gone(topic, id string) {
	h.t.Helper()
	r, err := h.s.MessageGet(h.ctx, topic, id)
	if !errors.Is(err, store.ErrNotFound) {
		h.t.Errorf("MessageGet(%s, %s): want ErrNotFound, got %v (record %s)", topic, id, err, fmtRec(r))
	}
}

func (h *harness) counts(topic string, want store.Counts) {
	h.t.Helper()
	EqualCounts(h.t, h.s, topic, want)
}

func (h *harness) topic(name string) *store.TopicRecord {
	h.t.Helper()
	tr, err := h.s.TopicGet(h.ctx, name)
	if err != nil {
		h.t.Fatalf("TopicGet(%s): %v", name, err)
	}
	return tr
}

func (h *harness) promote(topic string, now int64, max int) *store.PromoteResult {
	h.t.Helper()
	r, err := h.s.MessagePromote(h.ctx, &store.MessagePromoteParams{Topic: topic, Now: now, Max: max})
	if err != nil {
		h.t.Fatalf("MessagePromote(%s): %v", topic, err)
	}
	return r
}

// wantPromote promotes and checks the answer.
func (h *harness) wantPromote(topic string, now int64, max, promoted int, nextDue int64) {
	h.t.Helper()
	r := h.promote(topic, now, max)
	if r.Promoted != promoted || r.NextDue != nextDue {
		h.t.Errorf("MessagePromote(%s, now=%d, max=%d): want {Promoted:%d NextDue:%d}, got %+v", topic, now, max, promoted, nextDue, *r)
	}
}

func (h *harness) token() string {
	h.tokens++
	return fmt.Sprintf("tok%d", h.tokens)
}

func (h *harness) lease(topic string, now int64, max int, until int64) []*store.Record {
	h.t.Helper()
	token := h.token()
	recs, err := h.s.MessageLease(h.ctx, &store.MessageLeaseParams{Topic: topic, Now: now, Max: max, LeaseFor: until - now, Token: token})
	if err != nil {
		h.t.Fatalf("MessageLease(%s): %v", topic, err)
	}
	if len(recs) > max {
		h.t.Fatalf("MessageLease(%s, max=%d): %d records", topic, max, len(recs))
	}
	for _, r := range recs {
		if r.State != store.StateInflight || r.LeaseUntil != until || r.UpdatedAt != now {
			h.t.Errorf("leased record not inflight with LeaseUntil %d, UpdatedAt %d: %s", until, now, fmtRec(r))
		}
		// The engine reads the delivery back from the receipt (a retried ack).
		if want := token + "-" + strconv.Itoa(int(r.Deliveries)); r.Receipt != want {
			h.t.Errorf("leased record's receipt %q, want the token and its delivery %q: %s", r.Receipt, want, fmtRec(r))
		}
	}
	return recs
}

// leaseOne leases exactly the message id (it must be first in line).
func (h *harness) leaseOne(topic, id string, now, until int64) *store.Record {
	h.t.Helper()
	recs := h.lease(topic, now, 1, until)
	if len(recs) != 1 || recs[0].ID != id {
		h.t.Fatalf("lease %s: want %s, got %v", topic, id, ids(recs))
	}
	return recs[0]
}

func (h *harness) ack(topic, id, receipt string, now int64) error {
	return h.s.MessageAck(h.ctx, &store.MessageAckParams{Topic: topic, ID: id, Receipt: receipt, Now: now})
}

func (h *harness) nack(topic, id, receipt string, now, retryAt int64, reason string) (*store.Record, error) {
	return h.s.MessageNack(h.ctx, &store.MessageNackParams{Topic: topic, ID: id, Receipt: receipt, Now: now, RetryDelay: retryAt - now, Error: reason})
}

func (h *harness) extend(topic, id, receipt string, now, until int64) (*store.Record, error) {
	return h.s.MessageExtend(h.ctx, &store.MessageExtendParams{Topic: topic, ID: id, Receipt: receipt, Now: now, LeaseFor: until - now})
}

func (h *harness) expire(now int64, max int) []*store.Record {
	h.t.Helper()
	recs, err := h.s.LeaseExpire(h.ctx, &store.LeaseExpireParams{Now: now, Max: max})
	if err != nil {
		h.t.Fatalf("LeaseExpire: %v", err)
	}
	return recs
}

// kill leases id and nacks it until it is dead; id must be the only ready
// message of the topic.
func (h *harness) kill(topic, id string, now int64) *store.Record {
	h.t.Helper()
	for range 100 {
		r := h.leaseOne(topic, id, now, now+1000)
		got, err := h.nack(topic, id, r.Receipt, now, now, "boom")
		if err != nil {
			h.t.Fatalf("nack %s: %v", id, err)
		}
		if got.State == store.StateDead {
			return got
		}
	}
	h.t.Fatalf("%s never died", id)
	return nil
}

func (h *harness) deadAll(topic string, limit int) []*store.Record {
	h.t.Helper()
	var all []*store.Record
	cursor := ""
	for page := 0; ; page++ {
		if page > 10000 {
			h.t.Fatalf("DeadList(%s): no end after %d pages", topic, page)
		}
		recs, next, err := h.s.DeadList(h.ctx, &store.DeadListParams{Topic: topic, Limit: limit, Cursor: cursor})
		if err != nil {
			h.t.Fatalf("DeadList(%s): %v", topic, err)
		}
		if len(recs) > limit {
			h.t.Fatalf("DeadList(%s, limit=%d): page of %d", topic, limit, len(recs))
		}
		if len(recs) == 0 && next != "" {
			h.t.Fatalf("DeadList(%s): empty page with cursor %q", topic, next)
		}
		all = append(all, recs...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func wantErr(t testing.TB, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: want %v, got %v", what, target, err)
	}
}

func noErr(t testing.TB, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func ids(recs []*store.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func wantIDs(t testing.TB, what string, recs []*store.Record, want ...string) {
	t.Helper()
	got := ids(recs)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("%s: want %v, got %v", what, want, got)
	}
}
