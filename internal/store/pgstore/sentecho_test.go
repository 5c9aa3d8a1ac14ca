package pgstore_test

import (
	"bytes"
	"fmt"
	"maps"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// TestSendAnswerFromRequest: since schema 12 the database answers a new
// message without its headers and payload, and the store fills them in
// from the request — equal to what was sent, copies of it, nil when
// empty — while a duplicate is answered with what is stored, whether the
// batch took the one-message, the set-based or the per-id path.
func TestSendAnswerFromRequest(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
		{ID: "old", Payload: []byte("stored"), Headers: map[string]string{"k": "stored"}, Relative: true, Delay: 3_600_000, MaxAttempts: 3},
	}}); err != nil {
		t.Fatal(err)
	}
	hdr := map[string]string{"content-type": "application/json", "ünï": "cödé", "empty": ""}
	msgs := []store.InsertMessage{
		{ID: "a", Payload: []byte{0, 1, 2, 255}, Headers: hdr, Relative: true, MaxAttempts: 3},
		{ID: "b", Payload: bytes.Repeat([]byte("x"), 64<<10), Relative: true, Delay: 60_000, MaxAttempts: 3},
		{ID: "c", Payload: []byte{}, Headers: map[string]string{}, Relative: true, MaxAttempts: 3},
		{ID: "old", Payload: []byte("sent"), Relative: true, MaxAttempts: 3},
		{ID: "a", Payload: []byte("again"), Relative: true, MaxAttempts: 3}, // the batch's own duplicate: the per-id path
		{ID: "gen", Payload: []byte("generated"), Generated: true, Relative: true, MaxAttempts: 3},
	}
	res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: msgs})
	if err != nil || len(res) != len(msgs) {
		t.Fatalf("batch: %d results, %v", len(res), err)
	}
	wantDup := []bool{false, false, false, true, true, false}
	for i, r := range res {
		if r.Duplicate != wantDup[i] {
			t.Fatalf("result %d (%s): duplicate %v, want %v", i, msgs[i].ID, r.Duplicate, wantDup[i])
		}
	}
	for _, i := range []int{0, 1, 2, 5} {
		r := res[i].Record
		if !bytes.Equal(r.Payload, msgs[i].Payload) || !maps.Equal(r.Headers, msgs[i].Headers) || r.ID != msgs[i].ID || r.Seq == 0 {
			t.Errorf("new %s: payload %d bytes, headers %v, want the request's (%d bytes, %v)", msgs[i].ID, len(r.Payload), r.Headers, len(msgs[i].Payload), msgs[i].Headers)
		}
	}
	if r := res[2].Record; r.Payload != nil || r.Headers != nil {
		t.Errorf("empty payload and headers: %q %v, want nil as read back from the database", r.Payload, r.Headers)
	}
	if r := res[3].Record; string(r.Payload) != "stored" || r.Headers["k"] != "stored" {
		t.Errorf("duplicate of a stored message: %q %v, want the stored payload and headers", r.Payload, r.Headers)
	}
	if r := res[4].Record; !bytes.Equal(r.Payload, msgs[0].Payload) || r.Seq != res[0].Record.Seq {
		t.Errorf("repeated id in the batch: %q seq %d, want the first occurrence's", r.Payload, r.Seq)
	}
	// The answers are copies: a caller reusing its buffers changes nothing.
	msgs[0].Payload[0], hdr["content-type"] = 9, "changed"
	if r := res[0].Record; !bytes.Equal(r.Payload, []byte{0, 1, 2, 255}) || r.Headers["content-type"] != "application/json" {
		t.Errorf("the answer shares the request's memory: %v %v", r.Payload, r.Headers)
	}
	// What was stored is what was sent.
	for _, i := range []int{0, 1, 5} {
		got, err := s.MessageGet(ctx, "t", res[i].Record.ID)
		want := res[i].Record
		if err != nil || !bytes.Equal(got.Payload, want.Payload) || !maps.Equal(got.Headers, want.Headers) || got.DueAt != want.DueAt || got.Seq != want.Seq {
			t.Errorf("get %s: %+v %v, want %+v", want.ID, got, err, want)
		}
	}
	// One message alone takes the one-message path.
	one, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Messages: []store.InsertMessage{
		{ID: "one", Payload: []byte("p1"), Headers: map[string]string{"h": "1"}, Relative: true, MaxAttempts: 3},
	}})
	if err != nil || one[0].Duplicate || string(one[0].Record.Payload) != "p1" || one[0].Record.Headers["h"] != "1" {
		t.Fatalf("one message: %+v %v", one, err)
	}
}

// TestOpInsertEcho: on the database, the 13-argument op_insert with
// p_echo false answers a new message with NULL headers and payload and a
// duplicate whole; the 12-argument form, which servers of version 11,
// delayq_send and delayq_send_many call, still answers both whole.
func TestOpInsertEcho(t *testing.T) {
	srv := pgtest.Shared(t)
	s := openAt(t, srv)
	adm := adminPool(t, srv)
	q := pgx.Identifier{s.Schema()}.Sanitize()
	call := func(id, payload, echo string) (status int, p []byte) {
		t.Helper()
		sql := fmt.Sprintf("SELECT status, payload FROM %s.op_insert(NULL, 't', ARRAY['%s', 'pad-%s'], ARRAY['%s'::bytea, 'x'::bytea], ARRAY['\\x0000000168000000017a'::bytea, NULL], ARRAY[0::bigint, 0], ARRAY[true, true], ARRAY[0::bigint, 0], ARRAY[3, 3], ARRAY[false, false], false, NULL%s)",
			q, id, id, payload, echo)
		if err := adm.QueryRow(ctx, sql).Scan(&status, &p); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		return status, p
	}
	if st, p := call("n13", "new13", ", false"); st != 0 || p != nil {
		t.Errorf("13 arguments, echo false, new: status %d payload %q, want 0 and NULL", st, p)
	}
	if st, p := call("n13", "other", ", false"); st != 1 || string(p) != "new13" {
		t.Errorf("13 arguments, echo false, duplicate: status %d payload %q, want 1 and the stored one", st, p)
	}
	if st, p := call("n12", "new12", ""); st != 0 || string(p) != "new12" {
		t.Errorf("12 arguments, new: status %d payload %q, want 0 and the payload", st, p)
	}
	if st, p := call("n13e", "echoed", ", true"); st != 0 || string(p) != "echoed" {
		t.Errorf("13 arguments, echo true, new: status %d payload %q, want 0 and the payload", st, p)
	}
	// The 12-argument form's new messages are stored whole too.
	got, err := s.MessageGet(ctx, "t", "n12")
	if err != nil || string(got.Payload) != "new12" || got.Headers["h"] != "z" {
		t.Errorf("get n12: %+v %v, want payload new12, header h=z", got, err)
	}
}
