package pgstore_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/pgstore"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

// deploymentSchema opens stores on one fresh schema of the shared server
// (TimeDB: the production clock), as the servers of one deployment.
func deploymentSchema(t *testing.T) (enginetest.Deployment, string) {
	srv := pgtest.Shared(t)
	schema := srv.NewSchema()
	return func(t *testing.T) store.Store {
		t.Helper()
		s, err := pgstore.Open(ctx, pgstore.Options{URL: srv.URL(), Schema: schema, Timeout: 10 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, schema
}

func deployment(t *testing.T) enginetest.Deployment {
	d, _ := deploymentSchema(t)
	return d
}

// TestTwoEngines: wake-up through LISTEN/NOTIFY.
func TestTwoEngines(t *testing.T) { enginetest.RunTwoEngines(t, deployment(t)) }

func TestPacedAcrossEngines(t *testing.T) { enginetest.RunPacedAcrossEngines(t, deployment(t)) }

// TestSharedLeases: SKIP LOCKED leases, one clock.
func TestSharedLeases(t *testing.T) { enginetest.RunSharedLeases(t, deployment(t)) }

func TestSkewedServers(t *testing.T) { enginetest.RunSkewedServers(t, deployment(t)) }

func TestFastServerKeepsDedupWindow(t *testing.T) {
	enginetest.RunFastServerKeepsDedupWindow(t, deployment(t))
}

// TestPauseShared: a pause through one server stops leases on another.
func TestPauseShared(t *testing.T) {
	enginetest.RunPauseShared(t, deployment(t), time.Second)
}

// TestGroupedWrites: concurrent single sends of repeated ids and acks,
// grouped per topic, on two engines.
func TestGroupedWrites(t *testing.T) {
	enginetest.RunGroupedWrites(t, deployment(t))
}

// TestAckRetried: an ack retried after it was done, through either of two
// engines, is answered ok; a stale receipt is still a conflict.
func TestAckRetried(t *testing.T) {
	enginetest.RunAckRetried(t, deployment(t))
}

// TestNackRetried: a nack retried after it was done, through either of two
// engines, is answered ok; a stale receipt is still a conflict.
func TestNackRetried(t *testing.T) {
	enginetest.RunNackRetried(t, deployment(t))
}
