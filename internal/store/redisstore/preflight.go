package redisstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// serverConfig is what preflight learns of one Redis server.
type serverConfig struct {
	addr        string
	policy      string // maxmemory-policy
	appendonly  string // "yes" | "no" | "" (unknown)
	appendfsync string // "always" | "everysec" | "no" | "" (unknown)
	// Cluster only: cluster-require-full-coverage ("yes" | "no" | ""
	// unknown) and how many replicas this master has.
	fullCoverage string
	replicas     int
}

// preflight checks every master (one server, or each Cluster master):
// it refuses a maxmemory-policy other than noeviction unless
// allowEviction, and warns when AOF is off or appendfsync is not always
// (and when a caller's client does not apply context deadlines).
// CONFIG GET may be renamed away (managed Redis); then INFO answers the
// policy and whether AOF is on, and appendfsync is reported unknown.
func preflight(ctx context.Context, rdb redis.UniversalClient, log *slog.Logger, allowEviction bool) error {
	warnNoContextTimeout(rdb, log)
	var (
		mu   sync.Mutex
		cfgs []serverConfig
	)
	check := func(ctx context.Context, c *redis.Client) error {
		sc, err := readServerConfig(ctx, c)
		if err != nil {
			return err
		}
		mu.Lock()
		cfgs = append(cfgs, sc)
		mu.Unlock()
		return nil
	}
	var err error
	_, isCluster := rdb.(*redis.ClusterClient)
	if cc, ok := rdb.(*redis.ClusterClient); ok {
		err = cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
			sc, err := readServerConfig(ctx, c)
			if err != nil {
				return err
			}
			sc.fullCoverage, sc.replicas = clusterFacts(ctx, c)
			mu.Lock()
			cfgs = append(cfgs, sc)
			mu.Unlock()
			return nil
		})
	} else if c, ok := rdb.(*redis.Client); ok {
		err = check(ctx, c)
	} else {
		// A FailoverClient or another UniversalClient: ask through it.
		err = func() error {
			sc, err := readServerConfig(ctx, rdb)
			cfgs = append(cfgs, sc)
			return err
		}()
	}
	if err != nil {
		return unavailable("open: preflight", err)
	}
	for _, c := range cfgs {
		if c.policy != "noeviction" {
			if !allowEviction {
				return fmt.Errorf("redisstore: Redis %s has maxmemory-policy %q; delayq needs \"noeviction\" "+
					"(eviction deletes messages silently): set maxmemory-policy noeviction "+
					"(or %s, unsafe)%w", c.addr, c.policy, AllowEvictionOption, errEvictionPolicy)
			}
			log.Warn("redisstore: maxmemory-policy is not noeviction: Redis may evict messages (AllowEviction is set)",
				"redis", c.addr, "maxmemory-policy", c.policy)
		}
		switch {
		case c.appendonly == "no":
			log.Warn("redisstore: Redis AOF is off (appendonly no): a Redis crash loses every write since the last RDB snapshot, acknowledged sends included",
				"redis", c.addr)
		case c.appendfsync == "":
			log.Warn("redisstore: cannot read appendfsync (CONFIG GET unavailable); durability of acknowledged sends is unknown",
				"redis", c.addr, "appendonly", c.appendonly)
		case c.appendfsync != "always":
			log.Warn("redisstore: appendfsync is not always: acknowledged writes can be lost — "+
				"to a Redis process kill, up to ~2 s of them when the disk stalls (Redis then postpones the AOF write); "+
				"to a machine crash or power loss, ~1-2 s (everysec) or ~30 s (no); use appendfsync always to lose none",
				"redis", c.addr, "appendfsync", c.appendfsync)
		}
		if isCluster && c.fullCoverage == "yes" && c.replicas == 0 {
			// The store serves the other masters' partitions while one is
			// down, but with full coverage required the whole Cluster
			// refuses every key once the failure is agreed on.
			log.Warn("redisstore: Cluster master has no replica and cluster-require-full-coverage is yes: "+
				"if it fails, the whole Cluster stops serving (every topic), not just its partitions; "+
				"add a replica or set cluster-require-full-coverage no",
				"redis", c.addr)
		}
	}
	return nil
}

// clusterFacts reads what the Cluster preflight warns about: a master's
// full-coverage setting and replica count. Unknown (CONFIG or INFO renamed
// away) stays unknown ("", -1), never guessed.
func clusterFacts(ctx context.Context, c *redis.Client) (fullCoverage string, replicas int) {
	if conf, err := c.ConfigGet(ctx, "cluster-require-full-coverage").Result(); err == nil {
		fullCoverage = conf["cluster-require-full-coverage"]
	}
	replicas = -1
	if info, err := c.Info(ctx, "replication").Result(); err == nil {
		if n, err := strconv.Atoi(parseInfo(info)["connected_slaves"]); err == nil {
			replicas = n
		}
	}
	return fullCoverage, replicas
}

// warnNoContextTimeout warns when a client passed in Options.Client does
// not apply context deadlines to its connections (the clients Open makes
// always do). The store bounds each call as a whole by a context deadline
// (see "Unavailability" in the package doc); without
// ContextTimeoutEnabled that deadline only keeps the next round trip from
// starting, and the one in flight — a new connection's handshake
// included — runs to the client's own timeouts.
func warnNoContextTimeout(rdb redis.UniversalClient, log *slog.Logger) {
	var enabled bool
	switch c := rdb.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return // unknown: nothing to say
	}
	if !enabled {
		log.Warn("redisstore: Options.Client has ContextTimeoutEnabled off: while Redis hangs a call may take the client's read timeout " +
			"per round trip instead of about one Options.Timeout in all; set ContextTimeoutEnabled")
	}
}

// clusterEnabled reports whether the server c talks to runs in Cluster
// mode (INFO cluster), or might: when INFO does not answer, the store
// keeps to scripts that stay in one slot.
func clusterEnabled(ctx context.Context, c *redis.Client) bool {
	info, err := c.Info(ctx, "cluster").Result()
	return err != nil || parseInfo(info)["cluster_enabled"] != "0"
}

// readServerConfig asks CONFIG GET, falling back to INFO.
func readServerConfig(ctx context.Context, c redis.UniversalClient) (serverConfig, error) {
	sc := serverConfig{addr: addrOf(c)}
	if sc.addr == failoverAddr {
		sc.addr = masterAddr(ctx, c)
	}
	conf, err := c.ConfigGet(ctx, "*").Result()
	if err == nil && conf["maxmemory-policy"] != "" {
		sc.policy = conf["maxmemory-policy"]
		sc.appendonly = conf["appendonly"]
		sc.appendfsync = conf["appendfsync"]
		return sc, nil
	}
	info, ierr := c.Info(ctx, "memory", "persistence").Result()
	if ierr != nil {
		if err != nil {
			return sc, fmt.Errorf("CONFIG GET: %v; INFO: %w", err, ierr)
		}
		return sc, ierr
	}
	fields := parseInfo(info)
	sc.policy = fields["maxmemory_policy"]
	switch fields["aof_enabled"] {
	case "1":
		sc.appendonly = "yes"
	case "0":
		sc.appendonly = "no"
	}
	if sc.policy == "" {
		return sc, fmt.Errorf("neither CONFIG GET nor INFO memory report maxmemory-policy")
	}
	return sc, nil
}

func parseInfo(info string) map[string]string {
	out := map[string]string{}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if ok {
			out[k] = v
		}
	}
	return out
}

// failoverAddr is what go-redis's Sentinel client reports as its address.
const failoverAddr = "FailoverClient"

// masterAddr names the server a Sentinel client is connected to, for the
// warnings: its own address as CLIENT INFO reports it (laddr, Redis ≥ 6.2).
func masterAddr(ctx context.Context, c redis.UniversalClient) string {
	info, err := c.ClientInfo(ctx).Result()
	if err != nil || info.LAddr == "" {
		return "the Sentinel master"
	}
	return "the Sentinel master " + info.LAddr
}

func addrOf(c redis.UniversalClient) string {
	if cl, ok := c.(*redis.Client); ok {
		return cl.Options().Addr
	}
	return "(server)"
}

// AllowEvictionOption is how the eviction refusal names the option that
// overrides it; callers with their own name for it (a server Config
// field, a CLI flag) replace it in the message (see EvictionRefused).
const AllowEvictionOption = "Options.AllowEviction"

// errEvictionPolicy marks the refusal to open on an evicting Redis; its
// text is empty so that wrapping it adds nothing to the message.
var errEvictionPolicy = emptyError("eviction policy")

type emptyError string

func (emptyError) Error() string { return "" }

// EvictionRefused reports whether err is Open's refusal of a Redis whose
// maxmemory-policy may evict keys.
func EvictionRefused(err error) bool { return errors.Is(err, errEvictionPolicy) }
