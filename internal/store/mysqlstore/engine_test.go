package mysqlstore_test

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/engine/enginetest"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
)

// suiteTimeout bounds each store call in the suites, which check
// semantics, not time bounds: a CI machine running every package's tests
// at once stretches transactions past the 2 s default (the fault tests
// set short bounds of their own).
const suiteTimeout = 15 * time.Second

// deployment opens stores on one fresh table prefix of the shared server
// (TimeDB: the production clock), as the servers of one deployment.
func deployment(t *testing.T) enginetest.Deployment {
	srv := mysqltest.Shared(t)
	prefix := srv.NewPrefix()
	return func(t *testing.T) store.Store {
		t.Helper()
		s, err := mysqlstore.Open(ctx, mysqlstore.Options{URL: srv.URL(), Prefix: prefix, Timeout: suiteTimeout})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
}

// TestTwoEngines: wake-up through the change-counter poll.
func TestTwoEngines(t *testing.T) { enginetest.RunTwoEngines(t, deployment(t)) }

func TestPacedAcrossEngines(t *testing.T) { enginetest.RunPacedAcrossEngines(t, deployment(t)) }

func TestSharedLeases(t *testing.T) { enginetest.RunSharedLeases(t, deployment(t)) }

func TestSkewedServers(t *testing.T) { enginetest.RunSkewedServers(t, deployment(t)) }

func TestFastServerKeepsDedupWindow(t *testing.T) {
	enginetest.RunFastServerKeepsDedupWindow(t, deployment(t))
}

// TestPauseShared: a pause through one server stops leases on another.
func TestPauseShared(t *testing.T) {
	enginetest.RunPauseShared(t, deployment(t), 6*time.Second)
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
