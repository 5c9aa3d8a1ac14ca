// Package redisstore is the Redis backend of store.Store (and
// store.Notifier): delayq's state lives in Redis or Redis Cluster, so any
// number of delayq servers share one queue.
//
//	s, err := redisstore.Open(ctx, redisstore.Options{URL: "redis://127.0.0.1:6379/0"})
//
// # Connecting
//
// Options.URL takes one of
//
//	redis://[user:pass@]host:port[/db][?opts]          one server (rediss:// for TLS)
//	redis+cluster://[user:pass@]h1:p1[,h2:p2…][?opts]   Cluster seeds (rediss+cluster://)
//	redis+sentinel://[user:pass@]s1:p1[,s2:p2…]/MASTERNAME[/db][?opts]
//	                                                   Sentinels (rediss+sentinel://)
//
// where opts are go-redis URL parameters (dial_timeout, pool_size, …;
// for clusters and Sentinels also addr=host:port). Or pass a ready
// client in Options.Client; the store does not close it.
//
// With redis+sentinel the hosts are Sentinels (port 26379 when left
// out) and MASTERNAME is the name they monitor (sentinel monitor
// MASTERNAME …); every command goes to the current master, which the
// client asks the Sentinels for whenever it dials. user:pass is the
// master's ACL user and password (requirepass), as in a redis:// URL;
// Sentinels that require their own (requirepass in sentinel.conf) take
// sentinel_username= and sentinel_password=. The server's log and
// errors show both passwords as "xxxxx" (RedactURL), and the error for a
// URL with a password that does not parse names the fault without
// quoting any of the URL (a password with an unescaped '/', '?' or '%'
// would be split into the quoted parts). This differs
// from go-redis's ParseFailoverURL, whose user:pass goes to the
// Sentinels and whose ?username=/?password= go to the master: here
// ?username= and ?password= are refused so that neither reading goes
// unnoticed. Its form redis://s1:p1[/db]?master_name=NAME&addr=s2:p2 is
// accepted with the redis+sentinel scheme (the path is then only
// [/db]). rediss+sentinel uses TLS to the Sentinels and to the master
// alike (go-redis has one TLS config), each verified against the host
// it dials: the master's certificate must name the address the
// Sentinels announce (an IP unless they announce hostnames);
// skip_verify=true turns verification off.
//
// The timeouts and the no-retry rule of "Unavailability" hold for the
// Sentinel queries as for the master. During a failover (the master
// down, the Sentinels not yet agreed on a new one: about
// down-after-milliseconds plus an election, a few seconds) calls fail
// with store.ErrUnavailable; once a replica is promoted the same Store
// dials it and carries on. Writes the old master acknowledged but had
// not yet replicated are lost (see "Durability"). Open's preflight
// checks the master it reaches, not the replicas: give them the same
// maxmemory-policy and AOF settings, since one of them becomes master.
//
// # Key layout
//
// A topic's messages are spread over P partitions (Options.Partitions,
// default 4, fixed at the first Open of a prefix) by FNV-1a(id) mod P, so
// a hot topic uses P Cluster slots and dedup by id stays inside one
// partition. Every key of a partition carries the hash tag {topic#p}
// (Redis hashes only the text between the first '{' and the next '}');
// topic names ([A-Za-z0-9._:-]) and ids ([A-Za-z0-9._:@+=-]) have no
// '{', '}' or '#', so no user input can move a key to another slot, and
// no two (topic, partition) pairs share a tag. With prefix "dq":
//
//	dq:{orders#2}:sched   ZSET   scheduled  score DueAt       member ctr62 .. id
//	dq:{orders#2}:ready   ZSET   ready      score DueAt       member  "
//	dq:{orders#2}:lease   ZSET   inflight   score LeaseUntil  member  "
//	dq:{orders#2}:dead    ZSET   dead       score DeadAt      member  "
//	dq:{orders#2}:acked   ZSET   tombstones score AckedAt     member  "
//	dq:{orders#2}:m:<id>  STRING the message: a 46-byte binary header
//	                             (state, Seq, times, counts), receipt,
//	                             last error, headers, then the payload
//	                             (recHeader in lua.go)
//	dq:{orders}:meta      HASH   seq (the topic's Seq counter), tn (its
//	                             topic number), settings (the engine's blob)
//	dq:{orders}:rate      HASH   tok, ts: the topic's rate-limit token bucket
//	                             (store.RateLimiter; expires once full again)
//	dq:{#sched}:names     SET    every recurring schedule's name
//	dq:{#sched}:s:<name>  HASH   spec (the engine's blob), last (LastTick),
//	                             cat, uat — all schedules in one slot
//	dq:topics             SET    every topic name (the registry)
//	dq:tn                 STRING topic-number counter (INCR once per topic)
//	dq:config             HASH   partitions, format ("2")
//	dq:notify             Pub/Sub channel (not a key)
//
// Memory is what shaped the message keys. One STRING per message, not a
// hash with a field per record field: a payload above
// hash-max-listpack-value (64 B by default) turns a hash into a hashtable
// with a dict entry and two SDS strings per field. The id is in the key
// and the index member, not in the value. ctr62 is the topic-local part
// of Seq in an order-preserving form ('0' + digit count, then base-62
// digits: "3Q0u" for 100,000), 2-9 bytes where a zero-padded decimal took
// 21. ZSETs order equal scores by member bytes, so each index is in
// (time, Seq) order. With a 256-byte payload and a 26-byte id a pending
// message takes about 600 B of Redis memory (docs/benchmarks.md). Times
// are stored in 6 signed bytes: DueAt, RetryAt and LeaseUntil beyond
// ±2^47 ms (about the year 6400) are refused.
//
// Counts per state are the ZCARDs of the indexes: O(1), and unable to
// drift from the data because every state change moves the member inside
// its script.
//
// # Scripts
//
// Every state transition of a partition is one Lua script (EVALSHA, with
// EVAL when the script cache is empty), documented with its KEYS, ARGV and
// reply beside the Go method that runs it:
//
//	insertScript      MessageInsertMany (insert + dedup)     message.go
//	cancelScript      MessageCancel                          message.go
//	rescheduleScript  MessageReschedule                      message.go
//	promoteScript     MessagePromote (due -> ready)          promote.go
//	leaseScript       MessageLease                           lease.go
//	ackScript         MessageAck, MessageAckMany             lease.go
//	nackScript        MessageNack (retry or dead)            lease.go
//	extendScript      MessageExtend                          lease.go
//	expireScript      LeaseExpire                            lease.go
//	deadPageScript    DeadList (read-only)                   dead.go
//	deadReplayScript  DeadReplay                             dead.go
//	deadDeleteScript  DeadDelete                             dead.go
//	dedupPurgeScript  DedupPurge                             dead.go
//	infoScript        TopicGet, TopicList (read-only)        topic.go
//	peekScript        head of an index (read-only)           merge.go
//	rateTakeScript    RateTake (token bucket on TIME)        ratelimit.go
//	schedule*Script   ScheduleUpsert, ScheduleTick, ScheduleDelete  schedule.go
//
// All keys a script touches share the partition's hash tag, so no script
// is ever CROSSSLOT; message keys are named inside the scripts from a
// prefix in ARGV, and Redis 7 checks (for scripts with a shebang, as all
// of these are) that they are in the slot of the declared KEYS. Scripts
// validate before they write. At maxmemory the insert script is refused
// up front (it is the only one that grows the data); the others move
// existing messages and run, so none stops half-way and consumers can
// drain a full Redis.
//
// Not part of any atomic script, by design: registering a topic and
// reserving Seq numbers before an insert (other slots; a failure leaves a
// known empty topic or a gap in Seq), and the settings put. A call that
// spans partitions (an insert or ack batch, a lease of Max messages) is
// atomic per partition, not as a whole.
//
// # Order
//
// Seq is tn<<44 | ctr: ctr counts the topic's inserts (one HINCRBY on the
// topic's meta hash per insert call reserves a block), tn is the topic's
// number, assigned once from dq:tn so Seq is unique store-wide. A send
// thus touches only the topic's slots: no store-wide key is a hot slot on
// a Cluster (each server adds a topic to the registry SET on its first
// send there, then at most every 10 s).
// (DueAt, Seq) is a total order of a topic's messages. Within a partition,
// messages are promoted and leased strictly in (DueAt, Seq) order, inside
// one script. Across partitions, promote and lease first peek at every
// partition's head, merge them in (DueAt, Seq) order and take each
// partition's share of Max; with one server the result is exactly the
// topic-wide order. With several servers racing, a peeked head may be
// taken by another server first; the script then takes its partition's
// next entries, so the cross-partition order is best effort: by due time
// at millisecond granularity, with send order kept within each partition.
//
// # Time
//
// By default (TimeRedis) every "now" a decision depends on — is a message
// due (insert, reschedule, promote, nack), has a lease expired, and the
// CreatedAt/UpdatedAt/DeadAt/AckedAt stamps — is Redis TIME, read inside
// the script that decides; the Now in the call is ignored. Several delayq
// servers with differently wrong clocks therefore still agree, and one
// clock is never compared with another's timestamps (R8). A message is
// never promoted before its DueAt by Redis time. PromoteResult.Now reports
// the Redis time the promotion judged by, so the engine sleeps
// NextDue-Now rather than trusting its own clock. On a Cluster, each
// partition is judged by the clock of the master that owns its slot.
//
// Instants that follow from "now" reach the scripts as durations and are
// computed there from the same TIME: the due time of a relative delay
// ("+delay"), a nack's retry time, a lease's end, and DedupPurge's cutoff
// (now - window). Only an absolute deliver_at is stored as given. A server
// whose clock is off by milliseconds or seconds therefore neither
// schedules early nor hands out a lease that is already over. The engine
// arms its timers by its estimate of Redis TIME (StoreNow, and the Now
// that promotions report), so it neither sleeps through a due time nor
// spins while Redis's clock catches up with its own.
//
// TimeCaller uses the Now of each call instead. It exists so the
// conformance suite can drive time, and for a single server that prefers
// its own clock; production with several servers uses TimeRedis.
//
// # Durability
//
// A call that returned nil was executed by Redis; whether it survives a
// crash is the Redis deployment's persistence setting:
//
//	setting                        Redis process killed       machine crash / power loss
//	appendonly yes, fsync always   nothing lost               nothing lost (disk honours fsync)
//	appendonly yes, fsync everysec nothing, or up to ~2 s *   up to ~1-2 s of acknowledged writes
//	appendonly yes, fsync no       nothing, or up to ~2 s *   up to ~30 s (the kernel's flush)
//	appendonly no (RDB or none)    all since the last RDB snapshot (with save "": everything)
//	failover (Sentinel, Cluster)   writes acknowledged by the old primary but not yet replicated
//	                               are lost: replication is asynchronous, and this store does
//	                               not WAIT for replicas
//
//	* Redis writes the AOF before replying, except while a background fsync
//	  stalls (it may then postpone the write by up to 2 s).
//
// Open checks every master (CONFIG GET, or INFO when CONFIG is renamed
// away): it refuses a maxmemory-policy other than noeviction (eviction
// would delete messages silently) unless Options.AllowEviction, and logs a
// warning when AOF is off or appendfsync is not always. At maxmemory with
// noeviction, inserts fail with ErrUnavailable and nothing stored is lost,
// while leases, acks, cancels and deletes keep working.
//
// # Unavailability
//
// Dial, read, write and pool waits are bounded by Options.Timeout
// (default 1 s), and so is each Store call as a whole: a call derives one
// context deadline, now + Timeout, at entry (unless the caller's ctx ends
// sooner), and go-redis applies it to the pool wait, a new connection's
// handshake and every read and write (ContextTimeoutEnabled). Many calls
// make several round trips in a row — a send registers the topic and
// reserves Seq, inserts, then publishes; a lease or promotion peeks, then
// acts; a new connection first sends HELLO — and with a Timeout for each,
// a send while Redis hangs (SIGSTOP, a black-holing network) would take
// 2-3 × Timeout to fail. So every call fails within about one Timeout with
// an error wrapping store.ErrUnavailable, and never hangs. When the call's
// own deadline ends it, the error is not a context error: the caller's ctx
// did not end.
//
// The calls that read every topic get one Timeout per round trip instead:
// LeaseExpire and DedupPurge (three: the registry, the peeks, the
// changes) and TopicList (two). Each of their rounds is O(topics ×
// partitions) commands long, the sweeps run in the background where no
// request waits on them, and a tighter bound could keep a large, healthy
// keyspace from ever being swept or listed.
//
// With a client passed in Options.Client the bound is Options.Timeout, or
// else that client's ReadTimeout. Without ContextTimeoutEnabled on it
// (Open warns) the deadline only keeps further round trips from starting:
// the one in flight runs to the client's own timeouts.
//
// A call cut short by its deadline is as ambiguous as any timeout: a
// script already sent may have run, or may run later (a paused Redis
// executes what it had buffered when it resumes). Nothing is retried: the
// client is not allowed to retry (MaxRetries -1), since a script retried
// after an ambiguous failure could apply twice. Every script call is also
// sent as a NoRetry command, because MaxRetries does not cover
// everything: a ClusterClient resends on network errors (a read timeout
// included) up to MaxRedirects times, and Options.Client may have any
// setting. MOVED and ASK are still followed (the command did not run).
// When Redis returns, the client reconnects by itself; the Store need not
// be reopened. Every call while Redis is down dials afresh, so the first
// call after it is back succeeds: a go-redis pool would otherwise stop
// dialing after PoolSize failed dials in a row and answer with the last
// dial error until its once-a-second probe got through, which the clients
// Open makes from a URL prevent (a client passed in Options.Client keeps
// that behaviour).
//
// # Cluster
//
// On a Redis Cluster each partition ({topic#p}) is in the slot of its
// hash tag, so a topic's partitions are spread over the masters; the
// topic's meta hash ({topic}), the registry (dq:topics), the topic-number
// counter, the config and the schedules are in slots of their own.
// Notifications are keyless: go-redis publishes on any master. When one
// master is down (killed, hung, or cut off), until it returns or a
// replica takes its slots over, what needs its slots fails and the rest
// goes on:
//
//   - Lease, promotion and lease expiry treat partitions independently.
//     A partition whose peek or script fails is left out of that call
//     and the others are served; the skipped partitions are logged (a
//     warning at most every 10 s, with how many were skipped). A lease
//     returns every record it leased, in whichever of its rounds — a
//     leased record that reached nobody would stay inflight until its
//     lease expired, and count that expiry as a failure — and fails with
//     ErrUnavailable only when it leased nothing and some partition
//     failed. A promotion fails only when every partition failed;
//     otherwise its NextDue is the partitions' that answered, but no
//     later than 1 s after Now, so the engine (which sleeps until NextDue)
//     tries the missing ones again within a second. Lease expiry fails
//     only when it expired nothing and some partition failed, so the
//     engine sweeps again after 1 s.
//   - Each master's share of such a call is sent as a pipeline of its
//     own: in one pipeline, go-redis retries a master it cannot connect
//     to until the deadline and then marks every call of the pipeline
//     failed, those other masters answered included.
//   - The peeks get half of the call's time: a master that hangs (accepts
//     connections, answers nothing) must leave time to lease from the
//     others. While a master is down, such a call takes about half of
//     Options.Timeout longer — a refused connection too, since go-redis
//     retries dialing until the deadline.
//   - The missing partitions' messages come later, once their master is
//     back: order across partitions is best effort anyway ("Order").
//   - A send fails when a message of it belongs to a partition there (the
//     other partitions of a batch may have stored theirs; a retry with the
//     same ids finds them as duplicates), and every send to the topic
//     fails when the topic's meta hash is there (it reserves Seq). The
//     sweeps need the registry's master. Ack batches, topic counts
//     (TopicGet, TopicList), dead-letter calls and DedupPurge stay
//     all-or-nothing: they fail while a partition they touch is down.
//   - A script sent to a master that died before answering may have run
//     (see "Unavailability"): a lease then stays inflight until it
//     expires, as on a single Redis.
//
// With cluster-require-full-coverage yes, Redis's default, every node
// refuses every key once the others agree the master failed (after
// cluster-node-timeout): a Cluster without replicas then stops as a
// whole. Set it to no, or give each master a replica, so that a master
// down costs only its own slots.
//
// # Several servers
//
// Each lease, promotion, expiry and ack is decided inside one script, so a
// message is never leased or promoted twice at once, and a lease expires
// once even when several servers sweep together. LeaseExpire and
// DedupPurge visit every partition of every registered topic: a server
// that died leaves its leases to whichever server sweeps next. Their cost
// is O(topics × partitions) pipelined reads per call.
//
// # Notifications
//
// After an insert, reschedule, nack, replay, lease expiry or promotion
// that leaves messages scheduled or ready, the store publishes one message
// per call on the channel "<prefix>:notify": "topic\tdueMS" with the
// call's earliest due time. Subscribe delivers them to the engine, which
// arms its timers and wakes long-polls without polling. Promotions publish
// because every server arms the same due time and only the first promotes:
// the others' long-polls must hear of it. Subscribe reports when it is
// live, and the engine then re-reads every topic, so what was sent before
// (or while re-subscribing) is not missed; go-redis re-subscribes after a
// connection loss, and the engines' safety sweep (every 5 s) covers any
// notification lost meanwhile.
package redisstore
