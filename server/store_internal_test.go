package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// TestExplainNewerFormat: a store's refusal of a newer format gains which
// build refused it and what to do; other errors pass through unchanged.
func TestExplainNewerFormat(t *testing.T) {
	refused := fmt.Errorf("open data directory d: pebblestore: d is in store format 2, this build reads format 1: %w", store.ErrNewerFormat)
	err := explainNewerFormat(refused)
	if !errors.Is(err, store.ErrNewerFormat) {
		t.Fatalf("%v no longer wraps store.ErrNewerFormat", err)
	}
	for _, want := range []string{"store format 2, this build reads format 1", "this is delayq ", "changed nothing", "restore the backup", "Upgrade and rollback"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q lacks %q", err, want)
		}
	}
	other := errors.New("open data directory d: permission denied")
	if got := explainNewerFormat(other); got != other {
		t.Errorf("another error was changed: %v", got)
	}
}
