package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"unicode"

	"github.com/redis/go-redis/v9"
)

// defaultSentinelPort is the port of a Sentinel address given without one.
const defaultSentinelPort = "26379"

// sentinelURLForm is quoted by parse errors.
const sentinelURLForm = "redis+sentinel://[user:pass@]host:port[,host:port…]/MASTERNAME[/db][?opts]"

// parseSentinelURL parses the part after "redis+sentinel://" (base
// "redis") or "rediss+sentinel://" (base "rediss"):
//
//	[user:pass@]s1:p1[,s2:p2…]/MASTERNAME[/db][?opts]
//
// The hosts are Sentinels (port 26379 when left out); user:pass
// authenticates to the Redis master, as in a redis:// URL;
// sentinel_username and sentinel_password authenticate to the Sentinels.
// Every other option is go-redis's (redis.ParseFailoverURL): timeouts,
// pool sizes, addr=host:port for more Sentinels, and master_name=, in
// which case the path is only [/db], as go-redis has it.
//
// Where go-redis's own failover URL differs (redis://s1:p1/db?master_name=
// X&addr=s2:p2): there, user:pass goes to the Sentinels and the master's
// credentials to ?username=&password=. Here user:pass is the master's,
// as for every other scheme of Options.URL, and ?username= / ?password=
// are refused rather than silently meaning something else.
func parseSentinelURL(base, rest string) (*redis.FailoverOptions, error) {
	if strings.Contains(rest, "#") {
		return nil, errors.New("a fragment (#…) is not allowed")
	}
	rest, rawQuery, _ := strings.Cut(rest, "?")
	authority, path, _ := strings.Cut(rest, "/")

	var user *url.Userinfo
	if i := strings.LastIndex(authority, "@"); i >= 0 {
		u, err := url.Parse("redis://" + authority[:i+1] + "host")
		if err != nil || u.User == nil {
			return nil, errors.New("bad user:password before '@' (percent-encode reserved characters)")
		}
		user, authority = u.User, authority[i+1:]
	}
	if authority == "" {
		return nil, fmt.Errorf("no Sentinel host (want %s)", sentinelURLForm)
	}
	var addrs []string
	for _, h := range strings.Split(authority, ",") {
		addr, err := sentinelAddr(h)
		if err != nil {
			return nil, err
		}
		addrs = append(addrs, addr)
	}

	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, fmt.Errorf("bad query: %v", err)
	}
	for _, k := range []string{"username", "password"} {
		if q.Has(k) {
			return nil, fmt.Errorf("option %s= is not accepted: the Redis master's credentials go in user:pass@, "+
				"the Sentinels' in sentinel_username= and sentinel_password=", k)
		}
	}
	sentinelUser, sentinelPass := q.Get("sentinel_username"), q.Get("sentinel_password")
	q.Del("sentinel_username")
	q.Del("sentinel_password")
	master, masterInQuery := q.Get("master_name"), q.Has("master_name")
	q.Del("master_name")

	var segs []string
	if p := strings.TrimSuffix(path, "/"); p != "" {
		for _, seg := range strings.Split(p, "/") {
			s, err := url.PathUnescape(seg)
			if err != nil || s == "" {
				return nil, fmt.Errorf("bad path /%s (want /MASTERNAME[/db])", path)
			}
			segs = append(segs, s)
		}
	}
	dbText := ""
	switch {
	case masterInQuery && len(segs) > 1:
		return nil, fmt.Errorf("path /%s: with master_name= the path is only [/db]", path)
	case masterInQuery:
		if len(segs) == 1 {
			dbText = segs[0]
		}
	case len(segs) == 0:
		return nil, fmt.Errorf("no master name (want %s)", sentinelURLForm)
	case len(segs) > 2:
		return nil, fmt.Errorf("path /%s has more than /MASTERNAME/db", path)
	default:
		master = segs[0]
		if len(segs) == 2 {
			dbText = segs[1]
		}
		if isDigits(master) {
			return nil, fmt.Errorf("no master name: %q in the path is a db number (want %s)", master, sentinelURLForm)
		}
	}
	if err := checkMasterName(master); err != nil {
		return nil, err
	}
	if dbText != "" && q.Has("db") {
		return nil, errors.New("db given twice (in the path and as db=)")
	}
	if dbText == "" {
		dbText = q.Get("db")
	}
	q.Del("db")
	db := 0
	if dbText != "" {
		if db, err = strconv.Atoi(dbText); err != nil || db < 0 {
			return nil, fmt.Errorf("bad db %q: want a number >= 0", dbText)
		}
	}

	// The remaining options go to go-redis, so they mean what they mean
	// in its URLs (and an unknown one is an error).
	for _, a := range addrs[1:] {
		q.Add("addr", a)
	}
	gu := url.URL{Scheme: base, Host: addrs[0], RawQuery: q.Encode()}
	o, err := redis.ParseFailoverURL(gu.String())
	if err != nil {
		return nil, err
	}
	o.MasterName = master
	o.DB = db
	o.SentinelUsername, o.SentinelPassword = sentinelUser, sentinelPass
	o.Username, o.Password = "", ""
	if user != nil {
		o.Username = user.Username()
		o.Password, _ = user.Password()
	}
	if o.TLSConfig != nil {
		// go-redis names the first Sentinel as ServerName for every
		// connection; the master has another name. Empty, crypto/tls
		// verifies each server against the host it dials.
		o.TLSConfig.ServerName = ""
	}
	return o, nil
}

// sentinelAddr validates one host[:port] of the list.
func sentinelAddr(h string) (string, error) {
	if h == "" {
		return "", fmt.Errorf("empty host in the Sentinel list (want host:port[,host:port…])")
	}
	host, port, err := net.SplitHostPort(h)
	if err != nil {
		// No port (host, or [v6]): the Sentinel default.
		host, port, err = net.SplitHostPort(h + ":" + defaultSentinelPort)
		if err != nil {
			return "", fmt.Errorf("bad Sentinel address %q (want host:port)", h)
		}
	}
	if host == "" {
		return "", fmt.Errorf("bad Sentinel address %q: no host", h)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("bad Sentinel address %q: port %q is not 1-65535", h, port)
	}
	return net.JoinHostPort(host, port), nil
}

// checkMasterName refuses what a Sentinel configuration cannot name.
func checkMasterName(name string) error {
	if name == "" {
		return fmt.Errorf("no master name (want %s)", sentinelURLForm)
	}
	for _, r := range name {
		if unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("bad master name %q: no spaces or control characters", name)
		}
	}
	return nil
}

func isDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return s != ""
}

// newFailoverClient builds the Sentinel-backed client: a *redis.Client
// whose dialer asks the Sentinels for the current master, so preflight
// treats it as one server and, after a failover, new connections go to
// the promoted replica without reopening the Store.
func newFailoverClient(o *redis.FailoverOptions) *redis.Client {
	rdb := redis.NewFailoverClient(o)
	// The first hook added is the outermost: noDialBreaker sees the error
	// sentinelHook has reworded.
	rdb.AddHook(noDialBreaker{})
	rdb.AddHook(sentinelHook{master: o.MasterName})
	return rdb
}

// sentinelHook names the usual misconfiguration: Sentinels that answer
// but do not monitor the master name (get-master-addr-by-name is nil,
// which go-redis reports as "all sentinels … unreachable: redis: nil").
type sentinelHook struct{ master string }

func (h sentinelHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil && errors.Is(err, redis.Nil) {
			err = fmt.Errorf("no Sentinel knows a master named %q: %w", h.master, err)
		}
		return conn, err
	}
}

func (sentinelHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (sentinelHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
