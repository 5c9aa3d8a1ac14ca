package redisstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/internal/store/storetest"
)

// TestLeaseDue: the store.DueLeaser conformance suite on one server
// (leaseDueScript over all partitions), with one partition, and on a
// Cluster (peekDueScript, then leaseDueScript per partition).
func TestLeaseDue(t *testing.T) {
	t.Parallel()
	t.Run("standalone", func(t *testing.T) {
		t.Parallel()
		srv := standalone(t)
		storetest.RunDueLeaser(t, func(t *testing.T) store.Store { return openAt(t, srv.URL()) })
	})
	t.Run("onepartition", func(t *testing.T) {
		t.Parallel()
		srv := standalone(t)
		storetest.RunDueLeaser(t, func(t *testing.T) store.Store {
			return openAt(t, srv.URL(), func(o *redisstore.Options) { o.Partitions = 1 })
		})
	})
	t.Run("cluster", func(t *testing.T) {
		t.Parallel()
		if testing.Short() {
			t.Skip("cluster: skipped in -short")
		}
		cl := redistest.StartCluster(t, 3)
		storetest.RunDueLeaser(t, func(t *testing.T) store.Store { return openAt(t, cl.URL()) })
	})
}
