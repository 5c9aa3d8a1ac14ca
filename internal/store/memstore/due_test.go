package memstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
	"github.com/delayq/delayq/internal/store/storetest"
)

func TestDueCounts(t *testing.T) {
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return memstore.New() })
}
