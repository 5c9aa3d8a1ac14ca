package pgstore_test

import (
	"fmt"
	"testing"
)

// TestReadyLookupsWhenStatsSayEmpty: a lease, a cancel and a reschedule
// take a ready message's q_ready row by its key even when q_ready's
// statistics say the table is empty, as a vacuum just after a drain
// records them (the servers vacuum the queue tables every few seconds).
// With those statistics the planner costs q_ready's two indexes alike,
// and on schema version 17, whose lookups named topic, due_at and seq
// but not priority, it picked q_ready_lease (topic, priority, …), where
// only the topic bounds the scan: each message taken read the topic's
// whole ready range (a lease of 6 here read 1,000 buffers and more,
// growing with the backlog, instead of a few dozen).
func TestReadyLookupsWhenStatsSayEmpty(t *testing.T) {
	schema, q, server, filler := planSchema(t)
	const topic, backlog = "big", 30000

	// A drain: q_ready gets pages, is emptied, and vacuumed empty.
	waitHorizon(t, filler)
	fillTopic(t, filler, q, topic, "old", 3000, 0)
	mustExec(t, filler, "SELECT count(*) FROM "+q+".op_lease_due(NULL, $1, 3000, 3600000, 'drain')", topic)
	mustExec(t, filler, "VACUUM ANALYZE "+q+".q_ready")
	var pages, tuples float64
	if err := filler.QueryRow(ctx, "SELECT relpages, reltuples FROM pg_class WHERE oid = $1::regclass", schema+".q_ready").Scan(&pages, &tuples); err != nil {
		t.Fatal(err)
	}
	if pages == 0 || tuples != 0 {
		t.Fatalf("q_ready's statistics: %v pages, %v tuples; want pages and no tuples", pages, tuples)
	}

	// The backlog, due now (ready at once); no analyze follows.
	fillTopic(t, filler, q, topic, "new", backlog, 0)

	// The server's connection plans with those statistics.
	leaseDue := func(token string, max int) string {
		return fmt.Sprintf("SELECT * FROM %s.op_lease_due(NULL, 'big', %d, 30000, '%s')", q, max, token)
	}
	lease := func(token string, max int) string {
		return fmt.Sprintf("SELECT * FROM %s.op_lease(NULL, 'big', %d, 30000, '%s')", q, max, token)
	}
	// Messages at the backlog's end: the leases below take from its
	// start.
	cancel := func(k int) string {
		return fmt.Sprintf("SELECT * FROM %s.op_cancel('big', 'new%d')", q, backlog-k)
	}
	reschedule := func(k int) string {
		return fmt.Sprintf("SELECT * FROM %s.op_reschedule(NULL, 'big', 'new%d', NULL, true, 3600000)", q, backlog-k)
	}
	// A first call of each reads the catalogs' buffers to plan.
	mustExec(t, server, leaseDue("a", 1))
	mustExec(t, server, leaseDue("b", 6))
	mustExec(t, server, lease("c", 3))
	mustExec(t, server, cancel(0))
	mustExec(t, server, reschedule(1))
	for i := range 7 { // past the five custom plans before a generic one
		checkBuffers(t, server, "a due lease of 1", leaseDue(fmt.Sprintf("a%d", i), 1), 1, 80)
	}
	for i := range 3 {
		checkBuffers(t, server, "a due lease of 6", leaseDue(fmt.Sprintf("b%d", i), 6), 6, 180)
		checkBuffers(t, server, "a lease of 3 ready", lease(fmt.Sprintf("c%d", i), 3), 3, 120)
	}
	for k := 2; k < 8; k += 2 {
		checkBuffers(t, server, "a cancel of a ready message", cancel(k), 1, 80)
		checkBuffers(t, server, "a reschedule of a ready message", reschedule(k+1), 1, 80)
	}
}
