package pebblestore

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/delayq/delayq/internal/store"
)

// dumpKeys reads every key and value of a closed store directly with
// Pebble, read-only.
func dumpKeys(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Merger: countersMerger, Logger: pebbleLogger{quietLogger()}})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	it, err := db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	out := map[string][]byte{}
	for it.First(); it.Valid(); it.Next() {
		out[string(it.Key())] = bytes.Clone(it.Value())
	}
	return out
}

// TestOpenRefusesNewerFormat is a rollback: a data directory whose format
// key says a newer format (as a later delayq would write it) is refused
// at Open with an error naming both formats and wrapping
// store.ErrNewerFormat, and nothing stored changes (the sequence
// reservation Open makes comes after the check).
func TestOpenRefusesNewerFormat(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		insert(t, s, "q", 1, m(fmt.Sprint("m", i), 0))
	}
	future := byte(formatVersion + 1)
	if err := s.db.Set(keyFormat, []byte{future}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := dumpKeys(t, dir)
	if len(before) < 10 {
		t.Fatalf("the store holds %d keys; want its 10 messages and more", len(before))
	}

	_, err = Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
	if !errors.Is(err, store.ErrNewerFormat) {
		t.Fatalf("Open of a format-%d store: %v; want store.ErrNewerFormat", future, err)
	}
	for _, want := range []string{fmt.Sprintf("store format %d", future), fmt.Sprintf("reads formats %d to %d", oldestFormat, formatVersion), dir} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if after := dumpKeys(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Errorf("the refused Open changed the store: %d keys before, %d after", len(before), len(after))
	}
}
