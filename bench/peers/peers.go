// Package peers resolves the peer systems the delayq benchmark compares
// with: asynq (on a Redis it starts), beanstalkd, River (on a PostgreSQL
// the caller names) and delaytable (a polling delay_messages table on a
// MySQL/MariaDB the caller names). It lives in its own
// module so the product's go.mod never depends on their clients.
package peers

import (
	"github.com/delayq/delayq/bench/peers/asynqtarget"
	"github.com/delayq/delayq/bench/peers/beanstalktarget"
	"github.com/delayq/delayq/bench/peers/delaytable"
	"github.com/delayq/delayq/bench/peers/rivertarget"
	"github.com/delayq/delayq/internal/bench"
)

// Targets documents the peer --target words.
const Targets = "peers: asynq (asynq v0.26 defaults on a redis-server it starts), asynq:poll=DURATION (forwarder and idle-worker polls set to DURATION), beanstalkd (a beanstalkd it starts; durable: -f0, every write fsync'd), beanstalkd:fsync=DURATION (durable binlog fsync'd at most every DURATION), river:postgres://URL[:tx][:poll=DURATION][:workers=N] (River v0.51 in a fresh schema; :tx = InsertTx / InsertManyFastTx in an application transaction), delaytable:mysql://URL[:tx][:poll=DURATION] (a delay_messages table polled with SELECT … FOR UPDATE SKIP LOCKED every 1 s by default)"

// Resolve maps a peer --target word to its factory.
var Resolve = bench.ChainResolvers(asynqtarget.Resolve, beanstalktarget.Resolve, rivertarget.Resolve, delaytable.Resolve)
