package reliability

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// TestS9RedisClusterKill9: S7 on a Redis Cluster of 3 masters (no
// replicas, AOF always) through `delayq serve --redis
// redis+cluster://…`: a random master is killed -9 and restarted (it
// rejoins from its nodes.conf) at random times under load. While it is
// down its slots — some of the topic's partitions — are unavailable.
// Pass as S7 always: lost 0, unexpected 0, early 0, resurrected 0,
// duplicated ≤ bound, came-due-while-down delivered by back + 2.5 s.
// Not covered: replicas, live resharding, CLUSTER FAILOVER.
func TestS9RedisClusterKill9(t *testing.T) {
	cl := redistest.StartCluster(t, 3)
	ctx := context.Background()
	var admin []*redis.Client
	for _, n := range cl.Nodes {
		admin = append(admin, rdb(t, n.Addr()))
	}
	clusterOK := func() bool {
		for _, a := range admin {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil || !strings.Contains(info, "cluster_state:ok") {
				return false
			}
		}
		return true
	}
	r := runRedisKillLoop(t, "S9-redis-cluster-kill9", "always", pick(1, 10), pick(1500, 50_000), cl.URL(), func(k *lockedRand) {
		n := cl.Nodes[k.IntN(len(cl.Nodes))]
		n.Restart()
		if d, ok := waitUntil(20*time.Second, clusterOK); !ok {
			t.Fatalf("cluster not ok %v after restarting %s", d, n.Addr())
		}
	})
	if r.Check.Lost != 0 || r.Check.Unexpected != 0 || r.Check.Early != 0 || r.Check.Resurrected != 0 || r.Check.Duplicated > r.Check.DupBound {
		t.Errorf("cluster: guarantees violated: %+v", r.Check)
	}
}
