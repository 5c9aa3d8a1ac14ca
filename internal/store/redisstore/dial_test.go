package redisstore

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// dialCounter counts the dials that reach the network.
type dialCounter struct{ n atomic.Int64 }

func (c *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c.n.Add(1)
		return next(ctx, network, addr)
	}
}

func (*dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (*dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// TestEveryCallDials: with nothing listening, every call of a client that
// newClient built, whatever the scheme, makes a real dial. go-redis's own
// pool stops dialing after PoolSize failures in a row (here 1) and answers
// with the last dial error until a probe once a second gets through, so
// a Redis that is back would still look down; noDialBreaker prevents that.
// (TestFirstCallAfterRestart shows the effect on a real restart.)
func TestEveryCallDials(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close() // now nobody listens: dials are refused
	const calls = 10
	for name, url := range map[string]string{
		"standalone": "redis://" + addr + "/0?pool_size=1",
		"cluster":    "redis+cluster://" + addr + "?pool_size=1",
		"sentinel":   "redis+sentinel://" + addr + "/mymaster?pool_size=1",
	} {
		t.Run(name, func(t *testing.T) {
			rdb, err := newClient(url, 200*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer rdb.Close()
			dials := &dialCounter{}
			switch c := rdb.(type) {
			case *redis.ClusterClient:
				c.OnNewNode(func(node *redis.Client) { node.AddHook(dials) })
			case *redis.Client:
				c.AddHook(dials) // added after noDialBreaker: inside it, sees every dial
			default:
				t.Fatalf("client %T", rdb)
			}
			for i := range calls {
				if err := rdb.Ping(context.Background()).Err(); err == nil {
					t.Fatalf("ping %d answered with nothing listening on %s", i, addr)
				}
			}
			if n := dials.n.Load(); n < calls {
				t.Fatalf("%d calls made %d dials: the pool answered some without dialing", calls, n)
			}
		})
	}
}
