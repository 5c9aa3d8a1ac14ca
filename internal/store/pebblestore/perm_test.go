package pebblestore

import (
	"os"
	"path/filepath"
	"testing"
)

// A data directory Open creates holds every payload: other local users
// must not be able to list or read it (gosec G301).
func TestOpenCreatesPrivateDataDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	s, err := Open(dir, Options{Logger: quietLogger(), BallastSize: -1})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm&0o007 != 0 {
		t.Fatalf("data dir mode %v: want no permissions for others", perm)
	}
}
