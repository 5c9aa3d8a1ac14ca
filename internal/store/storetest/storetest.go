// Package storetest is the conformance suite of store.Store. Every backend
// (memstore, pebblestore, redisstore, pgstore, mysqlstore) runs the same
// tests from its own _test.go:
//
//	func TestConformance(t *testing.T) { storetest.Run(t, open) }
//	func TestModel(t *testing.T)       { storetest.RunModel(t, open) }
//
// Run checks each clause of the contract with hand-written cases; RunModel
// applies random operation sequences to the backend and to memstore (the
// reference) and compares every answer.
//
// The open function must return a fresh, empty store on every call. The
// suite never closes the stores it is given except in the Close subtest and
// after each RunModel case, so a cleanup that open registers must accept a
// store that is already closed (Close answering nil or ErrClosed).
//
// # How the suite reads the contract
//
// The rules are package store's (its doc, "Rules every backend
// follows", and the method docs). Where they leave a choice to the
// backend, the suite compares only what is fixed: Seq values by their
// order, receipts by identity (a receipt must be new for its message at
// each lease), nil and empty Headers or Payload as equal (Diff). Ties when
// Max cuts LeaseExpire or DedupPurge short are avoided (the model test
// always takes everything eligible), and Max or Limit <= 0 is not tested.
package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// T0 is the base time of the suite's cases (Unix ms, 2023-11-14).
const T0 int64 = 1_700_000_000_000

// LeaseExpiredError is the LastError the contract gives expired leases.
const LeaseExpiredError = "lease expired"

// Diff describes how got differs from want, field by field, or returns ""
// when they are equal. Nil and empty Payload, and nil and empty Headers,
// are equal.
func Diff(want, got *store.Record) string {
	if want == nil || got == nil {
		if want == got {
			return ""
		}
		return fmt.Sprintf("want %v, got %v", fmtRec(want), fmtRec(got))
	}
	var d []string
	add := func(name string, w, g any) {
		d = append(d, fmt.Sprintf("%s: want %v, got %v", name, w, g))
	}
	if want.Topic != got.Topic {
		add("Topic", want.Topic, got.Topic)
	}
	if want.ID != got.ID {
		add("ID", want.ID, got.ID)
	}
	if want.Seq != got.Seq {
		add("Seq", want.Seq, got.Seq)
	}
	if want.State != got.State {
		add("State", want.State, got.State)
	}
	if !bytes.Equal(want.Payload, got.Payload) {
		add("Payload", abbrev(want.Payload), abbrev(got.Payload))
	}
	if !maps.Equal(want.Headers, got.Headers) {
		add("Headers", want.Headers, got.Headers)
	}
	if want.DueAt != got.DueAt {
		add("DueAt", want.DueAt, got.DueAt)
	}
	if want.CreatedAt != got.CreatedAt {
		add("CreatedAt", want.CreatedAt, got.CreatedAt)
	}
	if want.UpdatedAt != got.UpdatedAt {
		add("UpdatedAt", want.UpdatedAt, got.UpdatedAt)
	}
	if want.Deliveries != got.Deliveries {
		add("Deliveries", want.Deliveries, got.Deliveries)
	}
	if want.Failures != got.Failures {
		add("Failures", want.Failures, got.Failures)
	}
	if want.MaxAttempts != got.MaxAttempts {
		add("MaxAttempts", want.MaxAttempts, got.MaxAttempts)
	}
	if want.LastError != got.LastError {
		add("LastError", fmt.Sprintf("%q", want.LastError), fmt.Sprintf("%q", got.LastError))
	}
	if want.Receipt != got.Receipt {
		add("Receipt", fmt.Sprintf("%q", want.Receipt), fmt.Sprintf("%q", got.Receipt))
	}
	if want.LeaseUntil != got.LeaseUntil {
		add("LeaseUntil", want.LeaseUntil, got.LeaseUntil)
	}
	if want.DeadAt != got.DeadAt {
		add("DeadAt", want.DeadAt, got.DeadAt)
	}
	if want.AckedAt != got.AckedAt {
		add("AckedAt", want.AckedAt, got.AckedAt)
	}
	if len(d) == 0 {
		return ""
	}
	return fmt.Sprintf("record %s/%s: %s", want.Topic, want.ID, strings.Join(d, "; "))
}

// Equal fails t (without stopping it) when got differs from want; see Diff.
func Equal(t testing.TB, want, got *store.Record) {
	t.Helper()
	if d := Diff(want, got); d != "" {
		t.Error(d)
	}
}

// EqualCounts fails t when the topic's counts differ from want.
func EqualCounts(t testing.TB, s store.Store, topic string, want store.Counts) {
	t.Helper()
	tr, err := s.TopicGet(context.Background(), topic)
	if err != nil {
		t.Errorf("TopicGet(%q): %v", topic, err)
		return
	}
	if tr.Counts != want {
		t.Errorf("topic %q counts: want %+v, got %+v", topic, want, tr.Counts)
	}
}

// ErrClass names the class of a store error: "nil", "not found",
// "conflict", "closed", "unavailable", "corrupt", or "other: ..." — the
// granularity at which backends must agree.
func ErrClass(err error) string {
	switch {
	case err == nil:
		return "nil"
	case errors.Is(err, store.ErrNotFound):
		return "not found"
	case errors.Is(err, store.ErrConflict):
		return "conflict"
	case errors.Is(err, store.ErrClosed):
		return "closed"
	case errors.Is(err, store.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, store.ErrCorrupt):
		return "corrupt"
	default:
		return "other: " + err.Error()
	}
}

func fmtRec(r *store.Record) string {
	if r == nil {
		return "<nil>"
	}
	c := *r
	c.Payload = nil
	return fmt.Sprintf("%+v (payload %s)", c, abbrev(r.Payload))
}

func abbrev(b []byte) string {
	if len(b) > 32 {
		return fmt.Sprintf("%q…(%d bytes)", b[:32], len(b))
	}
	return fmt.Sprintf("%q", b)
}
