package domain

import (
	"sort"
	"testing"
)

func TestIDGeneratorSortsAndIsValid(t *testing.T) {
	t.Parallel()
	var g IDGenerator
	const base = 1_700_000_000_000
	var ids []string
	seen := map[string]bool{}
	for i := range 3000 {
		id := g.Next(base + int64(i/3)) // three ids per millisecond
		if len(id) != 26 || ValidateID(id) != nil || seen[id] {
			t.Fatalf("bad or repeated id %q", id)
		}
		seen[id] = true
		ids = append(ids, id)
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatal("ids of one generator do not sort by creation")
	}
	if back := g.Next(base); back <= ids[len(ids)-1] {
		t.Fatalf("an earlier time made an id (%s) that sorts before the last (%s)", back, ids[len(ids)-1])
	}
}

func TestIDTimePart(t *testing.T) {
	t.Parallel()
	var g IDGenerator
	if got := g.Next(0)[:10]; got != "0000000000" {
		t.Fatalf("time part of epoch = %q", got)
	}
	var h IDGenerator
	if got := h.Next(1<<48 - 1)[:10]; got != "7ZZZZZZZZZ" {
		t.Fatalf("time part of max = %q", got)
	}
}
