// Package peers resolves the peer systems the delayq benchmark compares
// with: asynq (on a Redis it starts) and beanstalkd. It lives in its own
// module so the product's go.mod never depends on their clients.
package peers

import (
	"github.com/delayq/delayq/bench/peers/asynqtarget"
	"github.com/delayq/delayq/bench/peers/beanstalktarget"
	"github.com/delayq/delayq/internal/bench"
)

// Targets documents the peer --target words.
const Targets = "peers: asynq (asynq v0.26 defaults on a redis-server it starts), asynq:poll=DURATION (forwarder and idle-worker polls set to DURATION), beanstalkd (a beanstalkd it starts; durable: -f0, every write fsync'd), beanstalkd:fsync=DURATION (durable binlog fsync'd at most every DURATION)"

// Resolve maps a peer --target word to its factory.
var Resolve = bench.ChainResolvers(asynqtarget.Resolve, beanstalktarget.Resolve)
