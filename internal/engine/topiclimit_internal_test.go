package engine

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// TestTopicLimitRefresh: a sweep's listing replaces the known names, so a
// name admitted for an insert that then failed stops counting, while a
// name admitted during the listing (its topic possibly missing from it)
// still counts.
func TestTopicLimitRefresh(t *testing.T) {
	l := newTopicLimit(3)
	recs := func(names ...string) []*store.TopicRecord {
		var out []*store.TopicRecord
		for _, n := range names {
			out = append(out, &store.TopicRecord{Name: n})
		}
		return out
	}
	l.refresh(recs("a", "b"), l.begin())
	if !l.admit("a") || !l.admit("phantom") || l.admit("c") {
		t.Fatal("want a (known) and phantom (third) admitted, c refused at the limit of 3")
	}
	mark := l.begin()
	if l.admit("c") {
		t.Fatal("c admitted while a, b and phantom count")
	}
	l.refresh(recs("a", "b"), mark) // phantom's insert failed: not in the store
	if !l.admit("late") {
		t.Fatal("after the refresh a slot is free")
	}
	mark = l.begin()
	l.refresh(recs("a", "b"), mark) // late was admitted before this listing began but is not in it
	mark = l.begin()
	if !l.admit("during") { // admitted while the store is being listed
		t.Fatal("during not admitted")
	}
	l.refresh(recs("a", "b"), mark)
	if _, ok := l.names["during"]; !ok || len(l.names) != 3 {
		t.Fatalf("names %v: a name admitted during the listing must survive it", l.names)
	}
	var nilLimit *topicLimit
	nilLimit.refresh(recs("a"), nilLimit.begin()) // no limit: no-ops
}
