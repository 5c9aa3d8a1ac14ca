package redisstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/storetest"
)

func TestDueCounts(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	storetest.RunDueCounts(t, func(t *testing.T) store.Store { return openAt(t, srv.URL()) })
}
