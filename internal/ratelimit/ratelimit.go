// Package ratelimit keeps one token bucket (golang.org/x/time/rate) per key
// — a bearer token's name or a client address — in a bounded map, for the
// server's per-token and per-client-IP request limits (scenario S24 in docs/reliability.md).
//
// Memory is bounded by MaxKeys: when a new key would exceed it, the least
// recently used key is dropped. Keys idle long enough for their bucket to
// refill completely are dropped as well (a few per call, no goroutine): a
// full bucket is what a new key gets anyway, so dropping one changes no
// answer. Dropping a busy key under pressure hands it a fresh burst; that is
// the price of the bound, and it is at most one burst per eviction.
package ratelimit

import (
	"container/list"
	"math"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys bounds a Limiter's map when Config.MaxKeys is 0. An entry
// costs about 200 bytes, so the bound is ≈ 13 MiB per limiter.
const DefaultMaxKeys = 1 << 16

// Config configures a Limiter.
type Config struct {
	// Rate is the sustained requests per second allowed per key; 0 or
	// less means no limit (New returns nil).
	Rate float64
	// Burst is how many requests a key may make at once after being idle.
	// 0 means max(1, ceil(Rate)): one second's worth.
	Burst int
	// MaxKeys bounds the number of keys tracked. 0 means DefaultMaxKeys.
	MaxKeys int
}

// Limiter is a set of token buckets by key. A nil *Limiter allows
// everything. It is safe for concurrent use.
type Limiter struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	// idle is how long a key must go unused for its bucket to be full
	// again, after which it can be forgotten without changing any answer.
	idle time.Duration

	mu   sync.Mutex
	keys map[string]*list.Element // of *entry
	lru  list.List                // front: most recently used
}

type entry struct {
	key  string
	lim  *rate.Limiter
	last time.Time
}

// New returns a Limiter, or nil (no limit) when cfg.Rate ≤ 0.
func New(cfg Config) *Limiter {
	if cfg.Rate <= 0 || math.IsNaN(cfg.Rate) {
		return nil
	}
	if cfg.Burst <= 0 {
		cfg.Burst = max(1, int(math.Ceil(cfg.Rate)))
	}
	if cfg.MaxKeys <= 0 {
		cfg.MaxKeys = DefaultMaxKeys
	}
	idle := time.Duration(float64(cfg.Burst) / cfg.Rate * float64(time.Second))
	return &Limiter{
		limit:   rate.Limit(cfg.Rate),
		burst:   cfg.Burst,
		maxKeys: cfg.MaxKeys,
		idle:    max(idle, time.Second),
		keys:    make(map[string]*list.Element),
	}
}

// Allow takes one token from key's bucket at now. When the bucket is empty
// it returns false and how long until a token is available (for
// Retry-After); a refused request takes nothing, so retrying clients are
// limited to the rate, not locked out.
func (l *Limiter) Allow(key string, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil {
		return true, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.sweep(now, 2)
	var e *entry
	if el, found := l.keys[key]; found {
		e = el.Value.(*entry)
		l.lru.MoveToFront(el)
	} else {
		for len(l.keys) >= l.maxKeys {
			l.remove(l.lru.Back())
		}
		e = &entry{key: key, lim: rate.NewLimiter(l.limit, l.burst)}
		l.keys[key] = l.lru.PushFront(e)
	}
	e.last = now
	if e.lim.AllowN(now, 1) {
		return true, 0
	}
	missing := 1 - e.lim.TokensAt(now)
	return false, time.Duration(missing / float64(l.limit) * float64(time.Second))
}

// Len is the number of keys tracked.
func (l *Limiter) Len() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}

// sweep forgets up to n least recently used keys that have been idle long
// enough to have a full bucket. Called under l.mu on every Allow, so idle
// keys go away at the rate new requests come in.
func (l *Limiter) sweep(now time.Time, n int) {
	for range n {
		el := l.lru.Back()
		if el == nil || now.Sub(el.Value.(*entry).last) < l.idle {
			return
		}
		l.remove(el)
	}
}

func (l *Limiter) remove(el *list.Element) {
	delete(l.keys, el.Value.(*entry).key)
	l.lru.Remove(el)
}

// ClientKey is the rate-limit key of a request's remote address
// (http.Request.RemoteAddr, "host:port"): the IP, and for IPv6 its /64,
// since one host usually holds a whole /64 and could otherwise pick a
// fresh key per request.
func ClientKey(remoteAddr string) string {
	host, _, err := net.SplitHostPort(remoteAddr)
	if err != nil {
		host = remoteAddr
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return host
	}
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.String()
	}
	return ip.String()
}
