package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/internal/store/storetest"
)

var prefixes atomic.Int64

// standalone starts a redis-server for one test (AOF, appendfsync always).
func standalone(t *testing.T) *redistest.Server {
	t.Helper()
	return redistest.Start(t)
}

// uniquePrefix is a fresh key namespace.
func uniquePrefix() string { return fmt.Sprintf("t%d", prefixes.Add(1)) }

// openAt opens a store at url with a fresh prefix and TimeCaller (the
// suites drive time through Now), closing it when t ends.
func openAt(t *testing.T, url string, mod ...func(*redisstore.Options)) *redisstore.Store {
	t.Helper()
	// The suites check semantics, not time bounds (the hang and fault
	// tests do that): a generous Timeout keeps a loaded -race run from
	// failing them with i/o timeouts.
	// Four partitions, as on a Cluster, also on one server: the suites
	// then check the merge of a topic's partitions everywhere
	// (TestConformanceOnePartition checks one server's default).
	o := redisstore.Options{URL: url, Prefix: uniquePrefix(), TimeSource: redisstore.TimeCaller, Timeout: 10 * time.Second, Partitions: redisstore.DefaultPartitions}
	for _, m := range mod {
		m(&o)
	}
	s, err := redisstore.Open(context.Background(), o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openAt(t, srv.URL()) })
}

func TestConformanceOnePartition(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	storetest.Run(t, func(t *testing.T) store.Store {
		return openAt(t, srv.URL(), func(o *redisstore.Options) { o.Partitions = 1 })
	})
}

func TestModel(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	storetest.RunModel(t, func(t *testing.T) store.Store { return openAt(t, srv.URL()) })
}

// openRedisTime opens a store at srv with the production time source,
// TimeRedis (the scripts read Redis TIME), for the suites: srv's clock is
// set to each call's Now (redistest.StartWithClock, storetest.WithClock).
func openRedisTime(t *testing.T, srv interface {
	URL() string
	SetTime(int64)
}) store.Store {
	s := openAt(t, srv.URL(), func(o *redisstore.Options) { o.TimeSource = redisstore.TimeRedis })
	return storetest.WithClock(s, srv.SetTime)
}

func TestConformanceRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWithClock(t)
	storetest.Run(t, func(t *testing.T) store.Store { return openRedisTime(t, srv) })
}

func TestModelRedisTime(t *testing.T) {
	t.Parallel()
	srv := redistest.StartWithClock(t)
	storetest.RunModel(t, func(t *testing.T) store.Store { return openRedisTime(t, srv) })
}

// On a Cluster each partition's scripts run on its master and read that
// master's TIME: all of them follow the one clock here.
func TestConformanceClusterRedisTime(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster: skipped in -short")
	}
	cl := redistest.StartClusterWithClock(t, 3)
	storetest.Run(t, func(t *testing.T) store.Store { return openRedisTime(t, cl) })
}

func TestConformanceCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster: skipped in -short")
	}
	cl := redistest.StartCluster(t, 3)
	storetest.Run(t, func(t *testing.T) store.Store { return openAt(t, cl.URL()) })
}

func TestModelCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("cluster: skipped in -short")
	}
	cl := redistest.StartCluster(t, 3)
	storetest.RunModel(t, func(t *testing.T) store.Store { return openAt(t, cl.URL()) })
}

// TestConformanceScriptsOnly: where Redis refuses functions (an ACL
// without FUNCTION and FCALL) the store runs the same Lua as scripts.
func TestConformanceScriptsOnly(t *testing.T) {
	t.Parallel()
	srv := standalone(t)
	url := refuseFunctions(t, srv.URL(), []string{srv.Addr()})
	t.Cleanup(func() { // after the suite's parallel tests
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr()})
		defer admin.Close()
		info, err := admin.Info(context.Background(), "commandstats").Result()
		// A refused FCALL is counted as rejected, not as a call.
		ranFcall := strings.Contains(info, "cmdstat_fcall:") && !strings.Contains(info, "cmdstat_fcall:calls=0,")
		if err != nil || !strings.Contains(info, "cmdstat_evalsha:calls=") || ranFcall {
			t.Errorf("want EVALSHA and no FCALL run (%v), commandstats:\n%s", err, info)
		}
	})
	storetest.Run(t, func(t *testing.T) store.Store { return openAt(t, url) })
}
