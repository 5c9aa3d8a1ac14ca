package mysqlstore_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// TestUpgradeReadyClusteredInLeaseOrder: ready messages of two priorities
// sent on schema 11 (q_ready keyed (topic, due, seq), leased through
// lease_order) migrate to schema 12 (again without harm after an
// interruption): q_ready's primary key is the lease order, lease_order is
// gone and due_order is there; the topic's oldest ready message is still
// the earliest due whatever its priority, a cancel takes its ready row
// away by the new key, and a lease takes the rest in (priority, due, seq)
// order.
func TestUpgradeReadyClusteredInLeaseOrder(t *testing.T) {
	srv, prefix, db := oldSchema(t, 11)
	sent := []struct {
		id  string
		pri int
	}{{"p5-a", 5}, {"p0-a", 0}, {"p5-b", 5}, {"p0-b", 0}}
	for _, m := range sent {
		if _, err := db.Exec("CALL `"+prefix+"send_priority`('t', ?, 'x', 0, 0, ?, @i, @d, @u)", m.id, m.pri); err != nil {
			t.Fatalf("send on schema 11: %v", err)
		}
	}
	if _, err := db.Exec("CALL `" + prefix + "send_priority`('t', 'later', 'x', 3600000, 0, 0, @i, @d, @u)"); err != nil {
		t.Fatal(err)
	}

	migrateTwice(t, db, srv, prefix, 11)
	keys := map[string]string{}
	rows, err := db.Query("SELECT index_name, GROUP_CONCAT(column_name ORDER BY seq_in_index) FROM information_schema.statistics WHERE table_schema = DATABASE() AND table_name = ? GROUP BY index_name", prefix+"q_ready")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var name, cols string
		if err := rows.Scan(&name, &cols); err != nil {
			t.Fatal(err)
		}
		keys[name] = cols
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"PRIMARY": "topic,priority,due,seq", "due_order": "topic,due,seq"}
	if len(keys) != len(want) || keys["PRIMARY"] != want["PRIMARY"] || keys["due_order"] != want["due_order"] {
		t.Fatalf("%sq_ready keys %v, want %v", prefix, keys, want)
	}

	s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first, err := s.MessageGet(ctx, "t", "p5-a")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.TopicGet(ctx, "t")
	if err != nil || tr.OldestReady != first.DueAt || tr.Counts.Ready != 4 || tr.Counts.Scheduled != 1 {
		t.Fatalf("topic %+v %v; want 4 ready, the oldest due at %d (p5-a's), 1 scheduled", tr, err, first.DueAt)
	}
	if _, err := s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: "p0-b"}); err != nil {
		t.Fatal(err)
	}
	var left []string
	rows, err = db.Query("SELECT id FROM `" + prefix + "q_ready` WHERE topic = 't' ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		left = append(left, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"p0-a", "p5-a", "p5-b"}) {
		t.Fatalf("q_ready after cancelling p0-b holds %v", left)
	}
	leased, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Max: 10, LeaseFor: 60_000, Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range leased {
		got = append(got, r.ID)
	}
	if strings.Join(got, " ") != "p0-a p5-a p5-b" {
		t.Fatalf("leased %v, want p0-a p5-a p5-b (priority, then due)", got)
	}
	var n int
	if err := db.QueryRow("SELECT COUNT(*) FROM `" + prefix + "q_ready`").Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d q_ready rows after the lease, %v; want none", n, err)
	}
}
