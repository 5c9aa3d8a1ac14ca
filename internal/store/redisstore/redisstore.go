package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
)

// Defaults of Options.
const (
	DefaultPrefix = "dq"
	// DefaultPartitions is a new keyspace's partition count on a Redis
	// Cluster, where partitions spread a hot topic over slots and masters.
	DefaultPartitions = 4
	// DefaultOneServerPartitions is a new keyspace's count on one Redis
	// server (or a Sentinel-managed master): there partitions spread
	// nothing, and every lease, peek and promotion script reads each
	// partition's heads, so more cost Redis time per message.
	DefaultOneServerPartitions = 1
	DefaultTimeout             = time.Second
)

// formatVersion is stored under "format" in the config hash; Open refuses
// a keyspace written by another format, except prevFormat. 3: records may
// hold their receipt and last error in a sized area (recArea), which
// builds of format 2 misread. 2: messages are packed STRINGs, index
// members ctr62 .. id, Seq per topic (1: a hash per message, members
// seq:id, a store-wide Seq key).
const formatVersion = "3"

// prevFormat is the format this build upgrades in place at Open: every
// format-2 record is one it reads (without recArea), and rewrites in the
// current layout on its first rewritten change. Once the config says 3,
// older builds refuse the keyspace (ErrNewerFormat) instead of misreading
// records with an area.
const prevFormat = "2"

// TimeSource says which clock judges "now" (due, lease expiry, stamps).
type TimeSource int

const (
	// TimeRedis (the default) reads Redis TIME inside every script and
	// ignores the Now of the call: one clock for every engine sharing the
	// Redis. See the package doc, "Time".
	TimeRedis TimeSource = iota
	// TimeCaller uses the Now each call passes. For tests that drive time
	// (the conformance suite), and for a single engine that prefers its
	// own clock; never for several engines whose clocks may disagree.
	TimeCaller
)

// Options configure Open. The zero value of each field means its default;
// one of URL and Client is required.
type Options struct {
	// URL of the Redis deployment:
	//
	//	redis://[user:pass@]host:port[/db][?opts]    one server (rediss:// for TLS)
	//	redis+cluster://[user:pass@]host:port[,host:port…][?addr=host:port…&opts]
	//	                                             Redis Cluster seed nodes (rediss+cluster:// for TLS)
	//	redis+sentinel://[user:pass@]host:port[,host:port…]/MASTERNAME[/db][?opts]
	//	                                             Sentinels and the name of the master they
	//	                                             monitor (rediss+sentinel:// for TLS)
	//
	// opts are go-redis's URL parameters (dial_timeout, read_timeout,
	// pool_size, …); timeouts not given there default to Timeout. In a
	// redis+sentinel URL, user:pass authenticates to the Redis master and
	// sentinel_username= / sentinel_password= to the Sentinels; see
	// "Connecting" in docs/redis.md.
	URL string
	// Client is used instead of URL when set. The store does not close it,
	// and its timeouts and retries are the caller's: keep MaxRetries at -1
	// (see "Unavailability" in the package doc).
	Client redis.UniversalClient
	// Prefix namespaces every key: 1–64 chars of [A-Za-z0-9._:-].
	// Default "dq".
	Prefix string
	// Partitions per topic, 1–MaxPartitions. Default: the count stored by
	// the first Open of this Prefix, else DefaultPartitions (4) on a
	// Cluster and DefaultOneServerPartitions (1) on one server. Fixed for
	// the life of the keyspace: Open fails if it differs from the stored
	// count.
	Partitions int
	// Logger receives preflight warnings and notification errors.
	// Default slog.Default().
	Logger *slog.Logger
	// AllowEviction opens even when a Redis server's maxmemory-policy is
	// not noeviction. UNSAFE: eviction deletes messages silently. Default
	// false: Open refuses such a server.
	AllowEviction bool
	// TimeSource says whose clock judges time. Default TimeRedis.
	TimeSource TimeSource
	// Timeout bounds dialing, each read and write, waiting for a pooled
	// connection, and each Store call as a whole (the calls that sweep
	// every topic: one Timeout per round trip), so that calls fail with
	// store.ErrUnavailable instead of hanging when Redis is down. Default
	// 1 s; with Client, the client's ReadTimeout (see "Unavailability").
	Timeout time.Duration
}

// Store is the Redis store.Store and store.Notifier. It is safe for
// concurrent use by any number of goroutines, and any number of Stores (in
// any number of processes) may share one Redis keyspace.
type Store struct {
	rdb       redis.UniversalClient
	ownClient bool
	keys      keyspace
	log       *slog.Logger
	callerNow bool // TimeSource == TimeCaller
	// scriptsOnly: the server refused functions (library.go), so calls
	// go as scripts.
	scriptsOnly atomic.Bool
	// oneServer: the client talks to one Redis server that is not in
	// Cluster mode (a plain URL, or a Sentinel master), so a script may
	// touch keys of any slot (sendScript).
	oneServer bool
	timeout   time.Duration // whole-call bound (callTimeout); 0: none
	// clock is the last Redis TIME a single server's lease or peek
	// answered (runby.go): a lease with a recent one sends its script
	// without a peek first.
	clock atomic.Pointer[clockSeen]

	// regAt is when this Store last added each topic to the registry
	// (topic -> time.Time); see needsRegister.
	regAt sync.Map

	// skips counts the partitions that calls on several partitions went
	// on without; skipsLogged is its value and skipLogAt the time (Unix
	// ns) of the last log line about them (see skipped).
	skips, skipsLogged, skipLogAt atomic.Int64
	// libLogAt is the time (Unix ns) of the last log line about the
	// function library not loading (rerunMissing).
	libLogAt atomic.Int64

	closed    atomic.Bool
	done      chan struct{} // closed by Close; ends Subscribe
	closeOnce sync.Once
}

var (
	_ store.Store     = (*Store)(nil)
	_ store.Notifier  = (*Store)(nil)
	_ store.DueLeaser = (*Store)(nil)
)

// Open connects to Redis, runs the preflight checks (preflight.go; for
// operators, the checklist in docs/redis.md) and returns the store. It
// fails with an error wrapping store.ErrUnavailable when Redis does not
// answer.
func Open(ctx context.Context, opts Options) (*Store, error) {
	prefix := opts.Prefix
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !validPrefix(prefix) {
		return nil, fmt.Errorf("redisstore: invalid Prefix %q: want 1-%d chars of [A-Za-z0-9._:-]", prefix, maxPrefixLen)
	}
	if opts.Partitions < 0 || opts.Partitions > MaxPartitions {
		return nil, fmt.Errorf("redisstore: Partitions %d out of range 1-%d", opts.Partitions, MaxPartitions)
	}
	log := opts.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Store{
		rdb:       opts.Client,
		log:       log,
		callerNow: opts.TimeSource == TimeCaller,
		timeout:   callTimeout(opts),
		done:      make(chan struct{}),
	}
	if s.rdb == nil {
		rdb, err := newClient(opts.URL, cmp.Or(opts.Timeout, DefaultTimeout))
		if err != nil {
			return nil, err
		}
		s.rdb, s.ownClient = rdb, true
	}
	fail := func(err error) (*Store, error) {
		if s.ownClient {
			_ = s.rdb.Close()
		}
		return nil, err
	}
	if err := s.rdb.Ping(ctx).Err(); err != nil {
		return fail(unavailable("open: ping", err))
	}
	if err := preflight(ctx, s.rdb, log, opts.AllowEviction); err != nil {
		return fail(err)
	}
	if c, ok := s.rdb.(*redis.Client); ok {
		s.oneServer = !clusterEnabled(ctx, c)
	}
	newParts := DefaultPartitions
	if s.oneServer {
		newParts = DefaultOneServerPartitions
	}
	parts, err := s.fixPartitions(ctx, prefix, opts.Partitions, newParts)
	if err != nil {
		return fail(err)
	}
	s.keys = keyspace{prefix: prefix, parts: parts}
	return s, nil
}

// newClient builds a go-redis client from Options.URL with timeouts that
// make an unreachable Redis an error within about Timeout, and no retries:
// a script retried after an ambiguous failure could apply twice (a send
// would then report itself a duplicate, an ack a conflict).
func newClient(rawURL string, timeout time.Duration) (redis.UniversalClient, error) {
	if rawURL == "" {
		return nil, errors.New("redisstore: Options.URL or Options.Client is required")
	}
	scheme, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return nil, errors.New("redisstore: the URL has no scheme (want redis://, rediss://, redis+cluster://, rediss+cluster://, redis+sentinel:// or rediss+sentinel://)")
	}
	switch scheme {
	case "redis", "rediss":
		o, err := redis.ParseURL(rawURL)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		connLimits{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
			&o.MaxRetries, &o.DialerRetries, &o.DialerRetryTimeout, &o.ContextTimeoutEnabled}.apply(timeout)
		rdb := redis.NewClient(o)
		rdb.AddHook(noDialBreaker{})
		return rdb, nil
	case "redis+cluster", "rediss+cluster":
		o, err := parseClusterURL(strings.TrimSuffix(scheme, "+cluster"), rest)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		connLimits{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
			&o.MaxRetries, &o.DialerRetries, &o.DialerRetryTimeout, &o.ContextTimeoutEnabled}.apply(timeout)
		rdb := redis.NewClusterClient(o)
		// Each node has its own pool; nodes are made on first use, after this.
		rdb.OnNewNode(func(node *redis.Client) { node.AddHook(noDialBreaker{}) })
		return rdb, nil
	case "redis+sentinel", "rediss+sentinel":
		o, err := parseSentinelURL(strings.TrimSuffix(scheme, "+sentinel"), rest)
		if err != nil {
			return nil, urlError(rawURL, err)
		}
		// These bound the Sentinel queries as well as the master's
		// connections; MaxRetries -1 holds for both.
		connLimits{&o.DialTimeout, &o.ReadTimeout, &o.WriteTimeout, &o.PoolTimeout,
			&o.MaxRetries, &o.DialerRetries, &o.DialerRetryTimeout, &o.ContextTimeoutEnabled}.apply(timeout)
		return newFailoverClient(o), nil
	default:
		return nil, fmt.Errorf("redisstore: URL scheme %q not supported (want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel)", scheme)
	}
}

// urlError words a URL that does not parse, never with the URL's text:
// parsers quote the URL or the part that failed, and when the URL holds a
// password that part may be a piece of it (a password with an unescaped
// '/', '?', '#' or '%' splits anywhere). A URL that RedactURL leaves as it
// is gets the parser's own words; others get only the kind of fault.
func urlError(rawURL string, err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err // *url.Error quotes the whole URL
	}
	if redactURL(rawURL) == rawURL { // nothing to hide (an '@' anywhere counts as user info)
		return fmt.Errorf("redisstore: bad URL: %w", err)
	}
	fault := "it does not parse"
	msg := err.Error()
	for _, f := range urlFaults {
		if strings.Contains(msg, f.match) {
			fault = f.say
			break
		}
	}
	return fmt.Errorf("redisstore: bad URL: %s (its text is not shown: it has a password; "+
		"percent-encode reserved characters in a password: %% as %%25, / as %%2F, ? as %%3F, # as %%23, @ as %%40)", fault)
}

// urlFaults map the parsers' fixed wording (net/url, go-redis, sentinel.go)
// to ours, which quotes nothing of the URL. First match wins.
var urlFaults = []struct{ match, say string }{
	{"invalid URL escape", "an invalid %-escape (a literal % is written %25)"},
	{"in host name", "an invalid character in the host"},
	{"missing ']'", "a '[' without ']' around an IPv6 address"},
	{"invalid port", "an invalid port (want 1-65535 after the host)"},
	{"is not 1-65535", "an invalid port (want 1-65535 after the host)"},
	{"database number", "an invalid database number"},
	{"bad db", "an invalid database number"},
	{"db given twice", "the database given twice (in the path and as db=)"},
	{"invalid URL path", "an invalid path (want /db)"},
	{"unexpected option", "an unknown option in the query"},
	{"unable to parse addr", "an invalid addr= host"},
	{"fragment", "a fragment (#…), which is not allowed"},
	{"bad user:password", "an invalid user:password before '@'"},
	{"is not accepted", "option username= or password= is not accepted in a redis+sentinel query (the master's credentials go in user:pass@, the Sentinels' in sentinel_username= and sentinel_password=)"},
	{"Sentinel address", "an invalid Sentinel address (want host:port)"},
	{"no Sentinel host", "no Sentinel host"},
	{"empty host", "an empty host in the host list"},
	{"no host", "no host"},
	{"master name", "no master name or an invalid one (want /MASTERNAME[/db])"},
	{"control character", "a control character"},
	{"path /", "an invalid path (want /MASTERNAME[/db])"},
	{"bad query", "an invalid query"},
	{"redis: invalid ", "an invalid option value in the query"},
}

// connLimits points at the connection settings that every scheme's options
// struct has under the same names (go-redis has no common type for them),
// so that one place sets them: timeouts not given in the URL default to
// Options.Timeout, and nothing is retried ("Unavailability" in doc.go).
// The dial retries matter only where noDialBreaker is not installed: the
// Sentinel queries that go-redis makes with clients of its own.
type connLimits struct {
	dial, read, write, pool   *time.Duration
	maxRetries, dialerRetries *int
	dialerRetryTimeout        *time.Duration
	contextTimeout            *bool
}

func (l connLimits) apply(timeout time.Duration) {
	*l.dial = cmp.Or(*l.dial, timeout)
	*l.read = cmp.Or(*l.read, timeout)
	*l.write = cmp.Or(*l.write, timeout)
	*l.pool = cmp.Or(*l.pool, timeout)
	*l.maxRetries = cmp.Or(*l.maxRetries, -1)
	*l.dialerRetries = cmp.Or(*l.dialerRetries, 2)
	*l.dialerRetryTimeout = cmp.Or(*l.dialerRetryTimeout, 50*time.Millisecond)
	*l.contextTimeout = true
}

// parseClusterURL accepts a comma-separated host list in the authority
// ("h1:p1,h2:p2") as well as go-redis's ?addr= parameters.
func parseClusterURL(scheme, rest string) (*redis.ClusterOptions, error) {
	authority, tail, _ := strings.Cut(rest, "/")
	if i := strings.IndexAny(authority, "?#"); i >= 0 {
		authority, tail = authority[:i], authority[i:]
	} else if tail != "" {
		tail = "/" + tail
	}
	userinfo, hosts := "", authority
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		userinfo, hosts = authority[:i+1], authority[i+1:]
	}
	list := strings.Split(hosts, ",")
	if list[0] == "" {
		return nil, errors.New("no host")
	}
	u, err := url.Parse(scheme + "://" + userinfo + list[0] + tail)
	if err != nil {
		return nil, err
	}
	if len(list) > 1 {
		q := u.Query()
		for _, h := range list[1:] {
			if h != "" {
				q.Add("addr", h)
			}
		}
		u.RawQuery = q.Encode()
	}
	return redis.ParseClusterURL(u.String())
}

// RedactURL returns an Options.URL fit for logs and error messages: the
// password of user:pass@ and the values of password= and
// sentinel_password= are replaced by "xxxxx", the rest is kept as given.
// It works on URLs that net/url cannot parse (a host list, say) and on
// malformed ones.
func RedactURL(s string) string { return redactURL(s) }

// redactURL implements RedactURL. The userinfo ends at the last '@' of
// the whole URL, past the query if need be: net/url ends it at the last
// '@' before the first '/', '?' or '#', but a password holding one of
// those unescaped is still to be hidden. An '@' in the query hides more
// than needed, never less. After a '?', every "key=value" separated by
// '&' or '#' is a parameter (a fragment after a stray '#' included).
func redactURL(s string) string {
	start := 0
	if i := strings.Index(s, "://"); i >= 0 {
		start = i + len("://")
	}
	out, rest := s[:start], s[start:]
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if q := strings.Index(rest[:at], "?"); q >= 0 && !strings.Contains(rest[:q], ":") {
			// The '@' is in the query and no "user:" precedes it: what
			// looks like userinfo is query text that may hold a secret
			// ("?sentinel_password=a:@b"). Hide all of it.
			return out + rest[:q] + "?xxxxx"
		}
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			out += user + ":xxxxx"
			if strings.Contains(rest[:at], "?") { // the '@' was in the query: all that follows is too
				return out + redactParams(rest[at:])
			}
			rest = rest[at:]
		}
	}
	head, query, hasQuery := strings.Cut(rest, "?")
	if !hasQuery {
		return out + head
	}
	return out + head + "?" + redactParams(query)
}

// redactParams hides the values of password parameters (and of keys that
// do not unescape, which could be one) in a query string.
func redactParams(query string) string {
	var b strings.Builder
	for query != "" {
		end := strings.IndexAny(query, "&#")
		if end < 0 {
			end = len(query)
		}
		p := query[:end]
		k, _, _ := strings.Cut(p, "=")
		if key, err := url.QueryUnescape(k); err != nil || secretParam(key) {
			p = k + "=xxxxx"
		}
		b.WriteString(p)
		if end < len(query) {
			b.WriteByte(query[end])
			end++
		}
		query = query[end:]
	}
	return b.String()
}

// secretParam says which URL parameters hold a password.
func secretParam(key string) bool {
	key = strings.ToLower(key)
	return key == "password" || strings.HasSuffix(key, "_password")
}

// fixPartitions records the partition count on first use of the prefix
// (want, or newParts when want is 0) and returns the count in force.
func (s *Store) fixPartitions(ctx context.Context, prefix string, want, newParts int) (int, error) {
	key := keyspace{prefix: prefix}.config()
	pipe := s.rdb.TxPipeline() // one key: MULTI is valid on Cluster too
	pipe.HSetNX(ctx, key, "partitions", strconv.Itoa(cmp.Or(want, newParts)))
	pipe.HSetNX(ctx, key, "format", formatVersion)
	get := pipe.HMGet(ctx, key, "partitions", "format")
	if _, err := pipe.Exec(ctx); err != nil {
		return 0, unavailable("open: read config", err)
	}
	vals := get.Val()
	n, err := strconv.Atoi(fmt.Sprint(vals[0]))
	if err != nil || n < 1 || n > MaxPartitions {
		return 0, fmt.Errorf("redisstore: %s partitions = %v: %w", key, vals[0], store.ErrCorrupt)
	}
	if fmt.Sprint(vals[1]) == prevFormat {
		if err := s.rdb.HSet(ctx, key, "format", formatVersion).Err(); err != nil {
			return 0, unavailable("open: upgrade the format", err)
		}
		vals[1] = formatVersion
	}
	if f := fmt.Sprint(vals[1]); f != formatVersion {
		// HSETNX wrote nothing over an existing format: the keyspace is
		// untouched.
		ours, _ := strconv.Atoi(formatVersion)
		if n, err := strconv.Atoi(f); err == nil && n > ours {
			return 0, fmt.Errorf("redisstore: %s is in store format %s, this build reads format %s: %w", key, f, formatVersion, store.ErrNewerFormat)
		}
		return 0, fmt.Errorf("redisstore: %s format = %q, this build reads format %s: %w", key, f, formatVersion, store.ErrCorrupt)
	}
	if want != 0 && want != n {
		return 0, fmt.Errorf("redisstore: prefix %q already uses %d partitions per topic, Options.Partitions is %d; the count cannot change", prefix, n, want)
	}
	return n, nil
}

// Close implements store.Store: it ends Subscribe calls and closes the
// client if Open made it. Calls after Close fail with ErrClosed, and so
// does a second Close.
func (s *Store) Close() error {
	err := store.ErrClosed
	s.closeOnce.Do(func() {
		s.closed.Store(true)
		close(s.done)
		err = nil
		if s.ownClient {
			if cerr := s.rdb.Close(); cerr != nil {
				err = fmt.Errorf("redisstore: close client: %w", cerr)
			}
		}
	})
	return err
}

// regTTL is how long a send trusts that its topic is in the registry
// before adding it again.
const regTTL = 10 * time.Second

// needsRegister reports whether a send on topic must (re-)add it to the
// registry SET. The registry is one store-wide key; adding on every send
// made it a hot slot on a Cluster. Topics are never removed, so adding
// once would do, except after the registry was lost (a Redis restarted
// without persistence): re-adding every regTTL bounds how long the sweeps
// (LeaseExpire, DedupPurge) can then miss a topic that is being sent to.
func (s *Store) needsRegister(topic string) bool {
	t, ok := s.regAt.Load(topic)
	return !ok || time.Since(t.(time.Time)) >= regTTL
}

// skipLogEvery is how often at most a Store logs the partitions its calls
// went on without, or that its function library did not load.
const skipLogEvery = 10 * time.Second

// logTurn reports whether a warning whose last line was logged at *at
// (Unix ns) may be logged now, once per skipLogEvery, and if so marks now.
func logTurn(at *atomic.Int64) bool {
	now, last := time.Now().UnixNano(), at.Load()
	return now-last >= int64(skipLogEvery) && at.CompareAndSwap(last, now)
}

// skipped records that a call on several partitions (lease, promote,
// lease expiry) went on without partition k, which failed with err. It is
// logged at most once per skipLogEvery, with the number skipped since the
// last line, so that a master down for an hour does not log every call.
// Nothing is logged when the caller gave up (its ctx ended) or the store
// is closed: no partition is at fault then.
func (s *Store) skipped(ctx context.Context, op string, k *partKeys, err error) {
	n := s.skips.Add(1)
	if s.closed.Load() || ctx.Err() != nil {
		return
	}
	if !logTurn(&s.skipLogAt) {
		return
	}
	s.log.Warn("redisstore: a partition failed and was left out; calls go on with the others (is its Redis master down?)",
		"op", op, "topic", k.topic, "partition", k.part, "slot_tag", k.tag,
		"skipped_since_last_warning", n-s.skipsLogged.Swap(n), "err", err)
}

// check fails fast on a closed store.
func (s *Store) check() error {
	if s.closed.Load() {
		return store.ErrClosed
	}
	return nil
}

// fail turns a client error into a store error: ErrClosed after Close,
// else ErrUnavailable wrapping the cause.
func (s *Store) fail(op string, err error) error {
	if s.closed.Load() {
		return fmt.Errorf("redisstore: %s: %w", op, store.ErrClosed)
	}
	return unavailable(op, err)
}

// unavailable wraps a Redis or network error. Context errors stay visible
// to errors.Is as well.
func unavailable(op string, err error) error {
	return fmt.Errorf("redisstore: %s: %w: %w", op, store.ErrUnavailable, err)
}

// nowArg is ARGV[1] of every script: "" lets the script read Redis TIME;
// a number (TimeCaller) is used as now.
func (s *Store) nowArg(now int64) string {
	if s.callerNow {
		return strconv.FormatInt(now, 10)
	}
	return ""
}

// Ping implements store.Pinger: PING to the server, or on a Cluster to
// every master (each holds some topics' keys).
func (s *Store) Ping(ctx context.Context) (err error) {
	if err := s.check(); err != nil {
		return err
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	if c, ok := s.rdb.(*redis.ClusterClient); ok {
		err = c.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
	} else {
		err = s.rdb.Ping(ctx).Err()
	}
	if err != nil {
		return s.fail("ping", err)
	}
	return nil
}

var _ store.Pinger = (*Store)(nil)

// StoreNow implements store.Clock: Redis TIME, which every script judges
// by (TimeRedis). With TimeCaller, ok is false. On a Cluster each master
// has its own clock and TIME answers one of them; the engine only uses
// this to aim its timers, and promotion reports the clock of the
// partition it judged by (PromoteResult.Now), which corrects the aim.
func (s *Store) StoreNow(ctx context.Context) (_ int64, ok bool, err error) {
	if err := s.check(); err != nil {
		return 0, false, err
	}
	if s.callerNow {
		return 0, false, nil
	}
	ctx, end := s.bound(ctx, 1)
	defer end(&err)
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return 0, false, s.fail("time", err)
	}
	return t.UnixMilli(), true, nil
}

var _ store.Clock = (*Store)(nil)
