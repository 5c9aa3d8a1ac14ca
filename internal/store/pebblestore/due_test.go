package pebblestore

import (
	"testing"

	"github.com/delayq/delayq/internal/store/storetest"
)

func TestDueCounts(t *testing.T) {
	storetest.RunDueCounts(t, openConformance)
}
