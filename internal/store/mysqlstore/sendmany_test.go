package mysqlstore_test

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// send_many sends a batch as send_priority sends each message: it exists
// iff the application's transaction commits, duplicates (already a
// message, acked, or repeated within the batch) answer the first one's due
// time, and the counts grow by one row for the whole batch.
func TestSendManyTx(t *testing.T) {
	s, db, prefix := storeAndApp(t)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlstore.SendManyTx(ctx, tx, prefix, "orders", mysqlstore.TxMessage{ID: "rolled-back"}, mysqlstore.TxMessage{ID: "rolled-back-2"}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MessageGet(ctx, "orders", "rolled-back"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("rolled-back send: MessageGet = %v, want ErrNotFound", err)
	}

	// One message sent and acked before: a resend of its id is a duplicate.
	if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "orders", Messages: []store.InsertMessage{{ID: "acked", Relative: true}}}); err != nil {
		t.Fatal(err)
	}
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "orders", Max: 1, LeaseFor: 30_000, Token: "t"})
	if err != nil || len(leased) != 1 {
		t.Fatalf("lease: %d, %v", len(leased), err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "orders", ID: "acked", Receipt: leased[0].Receipt}); err != nil {
		t.Fatal(err)
	}

	payload := make([]byte, 256)
	for i := range payload {
		payload[i] = byte(i)
	}
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := mysqlstore.SendManyTx(ctx, tx, prefix, "orders",
		mysqlstore.TxMessage{ID: "now", Payload: payload},
		mysqlstore.TxMessage{ID: "later", Delay: time.Hour, MaxAttempts: 3, Priority: 7},
		mysqlstore.TxMessage{Payload: []byte("generated id")},
		mysqlstore.TxMessage{ID: "now", Delay: time.Hour},
		mysqlstore.TxMessage{ID: "acked"},
		mysqlstore.TxMessage{ID: "ünïcode ✓"})
	if err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(res) != 6 {
		t.Fatalf("%d results for 6 messages", len(res))
	}
	for i, dup := range []bool{false, false, false, true, true, false} {
		if res[i].Duplicate != dup {
			t.Errorf("result %d %+v: duplicate %v, want %v", i, res[i], res[i].Duplicate, dup)
		}
	}
	if res[0].ID != "now" || res[2].ID == "" || res[5].ID != "ünïcode ✓" || !res[3].DueAt.Equal(res[0].DueAt) {
		t.Fatalf("results %+v", res)
	}
	if d := res[1].DueAt.Sub(res[0].DueAt); d < time.Hour-time.Second || d > time.Hour+time.Second {
		t.Fatalf("delayed message due %v after the immediate one, want 1h", d)
	}
	r, err := s.MessageGet(ctx, "orders", "now")
	if err != nil || r.State != store.StateReady || !bytes.Equal(r.Payload, payload) || r.MaxAttempts != 25 {
		t.Fatalf("MessageGet now: %+v %v", r, err)
	}
	later, err := s.MessageGet(ctx, "orders", "later")
	if err != nil || later.State != store.StateScheduled || later.MaxAttempts != 3 || later.Priority != 7 || len(later.Payload) != 0 {
		t.Fatalf("MessageGet later: %+v %v", later, err)
	}
	generated := res[2].ID
	if r, err := s.MessageGet(ctx, "orders", generated); err != nil || string(r.Payload) != "generated id" {
		t.Fatalf("MessageGet generated: %+v %v", r, err)
	}
	tr, err := s.TopicGet(ctx, "orders")
	if err != nil || tr.Counts.Ready != 3 || tr.Counts.Scheduled != 1 || tr.NextDue != later.DueAt {
		t.Fatalf("TopicGet: %+v %v; want 3 ready, 1 scheduled", tr, err)
	}
	var own int
	if err := db.QueryRowContext(ctx, "SELECT COUNT(*) FROM `"+prefix+"topic_count` WHERE topic = 'orders' AND stripe >= 64").Scan(&own); err != nil { // #nosec G202 -- the test's prefix
		t.Fatal(err)
	}
	if own != 1 {
		t.Fatalf("%d count rows of the procedure's own, want 1 for the batch", own)
	}

	// A batch with an id that is already a message is sent one message at
	// a time: the live one answers its due time, the others are sent, in
	// batch order.
	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err = mysqlstore.SendManyTx(ctx, tx, prefix, "orders",
		mysqlstore.TxMessage{ID: "after-1"},
		mysqlstore.TxMessage{ID: "later", Delay: time.Minute},
		mysqlstore.TxMessage{ID: "after-2"},
		mysqlstore.TxMessage{ID: "after-1"})
	if err != nil {
		_ = tx.Rollback()
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if res[0].Duplicate || !res[1].Duplicate || res[2].Duplicate || !res[3].Duplicate ||
		res[1].DueAt.UnixMilli() != later.DueAt || !res[3].DueAt.Equal(res[0].DueAt) {
		t.Fatalf("results with a live id %+v", res)
	}
	leased, err = s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "orders", Max: 10, LeaseFor: 30_000, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	var order []string
	for _, r := range leased {
		order = append(order, r.ID)
	}
	if want := []string{"now", generated, "ünïcode ✓", "after-1", "after-2"}; !slices.Equal(order, want) {
		t.Fatalf("leased %q, want the ready ones in send order %q", order, want)
	}
	if tr, err := s.TopicGet(ctx, "orders"); err != nil || tr.Counts.Inflight != 5 || tr.Counts.Scheduled != 1 {
		t.Fatalf("TopicGet: %+v %v; want 5 inflight, 1 scheduled", tr, err)
	}
}

// Bad input fails the call with an error naming what is wrong, and the
// caller's rollback leaves nothing behind.
func TestSendManyTxRefuses(t *testing.T) {
	s, db, prefix := storeAndApp(t)
	call := func(topic, doc string) error {
		t.Helper()
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback()                                                              //nolint:errcheck // the transaction is only for the call
		_, err = tx.ExecContext(ctx, "CALL `"+prefix+"send_many`(?, ?, @r)", topic, doc) // #nosec G202 -- the test's prefix
		return err
	}
	for _, tc := range []struct{ topic, doc, want string }{
		{"", `[{}]`, "topic is required"},
		{"orders", `{"id": "x"}`, "JSON array"},
		{"orders", `not json`, "JSON array"},
		{"orders", `[{"id": "a"}, 5]`, "message 1 is not a JSON object"},
		{"orders", `[{"id": ""}]`, "message 0: id must not be empty"},
		{"orders", `[{"id": "` + strings.Repeat("x", 256) + `"}]`, "message 0: id longer than 255 bytes"},
		{"orders", `[{"id": "a"}, {"id": "b", "priority": 256}]`, "message 1: priority must be 0 to 255"},
		{"orders", `[{"id": "a", "payload": "*not base64*"}]`, "message 0: payload is not base64"},
		{"orders", `[{"id": "a", "delay_ms": "soon"}]`, "message 0: delay_ms must be an integer"},
		{"orders", `[{"id": 5}]`, "message 0: id must be a string"},
		{"orders", `[{"id": "a"}, null]`, "message 1 is not a JSON object"},
		{"orders", `[{"id": "a", "max_attempts": 1.5}]`, "message 0: max_attempts must be an integer"},
	} {
		err := call(tc.topic, tc.doc)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("send_many(%q, %.40q) = %v, want an error with %q", tc.topic, tc.doc, err, tc.want)
		}
	}
	if _, err := s.MessageGet(ctx, "orders", "a"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("after refused calls: MessageGet = %v, want ErrNotFound", err)
	}

	// A large payload passes the base64 check (a regular expression over
	// the whole string) and arrives whole.
	big := make([]byte, 1<<20)
	for i := range big {
		big[i] = byte(i * 7)
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := mysqlstore.SendManyTx(ctx, tx, prefix, "orders", mysqlstore.TxMessage{ID: "big", Payload: big}); err != nil {
		_ = tx.Rollback()
		t.Fatalf("1 MiB payload: %v", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if r, err := s.MessageGet(ctx, "orders", "big"); err != nil || !bytes.Equal(r.Payload, big) {
		t.Fatalf("MessageGet big: %v (payload intact: %v)", err, err == nil && bytes.Equal(r.Payload, big))
	}

	tx, err = db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck // nothing was sent
	if _, err := mysqlstore.SendManyTx(ctx, tx, prefix, "orders", mysqlstore.TxMessage{ID: "ok"}, mysqlstore.TxMessage{ID: "\xff"}); err == nil || !strings.Contains(err.Error(), "message 1: id is not valid UTF-8") {
		t.Fatalf("non-UTF-8 id: %v", err)
	}
}
