package pebblestore

import (
	"errors"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/storetest"
)

func openConformance(t *testing.T) store.Store {
	s := openMem(t, vfs.NewMem())
	t.Cleanup(func() {
		// The suite may have closed it already (ErrClosed is fine); a
		// store that is still open must pass the full recount.
		if err := s.Verify(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Verify: %v", err)
		}
		_ = s.Close()
	})
	return s
}

func TestConformance(t *testing.T) { storetest.Run(t, openConformance) }

func TestModel(t *testing.T) { storetest.RunModel(t, openConformance) }

// TestLeaseDue: MessageLeaseDue takes due messages straight from s/ and
// MessagePromoteGrace leaves the newly due ones to it; Verify (at
// cleanup) recounts the indexes against the counters.
func TestLeaseDue(t *testing.T) { storetest.RunDueLeaser(t, openConformance) }
