package pgstore_test

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
	"github.com/delayq/delayq/internal/store/storetest"
)

// TestLeaseDue: op_lease_due and op_promote_grace (schema version 7).
func TestLeaseDue(t *testing.T) {
	srv := pgtest.Shared(t)
	storetest.RunDueLeaser(t, func(t *testing.T) store.Store {
		return openAt(t, srv, func(o *pgstore.Options) { o.TimeSource = pgstore.TimeCaller })
	})
}
