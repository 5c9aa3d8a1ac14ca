package reliability

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/test/internal/history"
)

// Helpers of the Redis scenarios (S7–S11): a redis-server per scenario
// (redistest: free loopback ports, never the shared 6379), a client that
// spreads requests over several delayq servers, a TCP proxy that injects
// network faults between delayq and Redis, and a double-lease check.

// startRedis runs a throw-away redis-server with AOF on and the given
// appendfsync policy; extra directives are appended.
func startRedis(t *testing.T, fsync string, extra ...string) *redistest.Server {
	t.Helper()
	return redistest.Start(t, append([]string{"--appendfsync", fsync}, extra...)...)
}

// newRedisProc prepares a delayq server on Redis url; the harness still
// passes --data, which the Redis engine ignores.
func newRedisProc(t *testing.T, url string, extra ...string) *proc {
	return newProc(t, append([]string{"--redis", url}, extra...)...)
}

// rdb is a go-redis client for test-side administration (INFO, CONFIG,
// REPLICAOF), closed at cleanup.
func rdb(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: 2 * time.Second, PoolSize: 2})
	t.Cleanup(func() { c.Close() })
	return c
}

// infoField reads one field of INFO section.
func infoField(ctx context.Context, c *redis.Client, section, field string) (string, error) {
	s, err := c.Info(ctx, section).Result()
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(s, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("INFO %s has no %s", section, field)
}

// redisPID is the redis-server's process id (for SIGSTOP/SIGCONT: a hung
// Redis whose port still accepts connections).
func redisPID(t *testing.T, addr string) int {
	t.Helper()
	v, err := infoField(context.Background(), rdb(t, addr), "server", "process_id")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	return pid
}

// spreadTransport sends each request to the next of several servers,
// round robin, like a load balancer without health checks: a lease may
// come from one server and its ack go to another.
type spreadTransport struct {
	base  http.RoundTripper
	hosts []string
	n     atomic.Uint64
}

func (s *spreadTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h := s.hosts[s.n.Add(1)%uint64(len(s.hosts))]
	r2 := r.Clone(r.Context())
	r2.URL.Host, r2.Host = h, h
	return s.base.RoundTrip(r2)
}

// spreadClient is client() over every server in procs.
func spreadClient(t *testing.T, procs []*proc, timeout time.Duration) *delayq.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	st := &spreadTransport{base: tr}
	for _, p := range procs {
		st.hosts = append(st.hosts, p.addr)
	}
	c, err := delayq.NewClient(procs[0].url(), delayq.WithRetry(0, 0), delayq.WithTimeout(timeout),
		delayq.WithHTTPClient(&http.Client{Transport: st}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// faultProxy is a TCP proxy between delayq and Redis that injects
// network faults in process (toxiproxy is not a dependency): per-chunk
// latency, a blackhole (bytes are swallowed, connections stay open),
// reset of every open connection, and a switch of the upstream (a
// virtual IP moving to a promoted replica).
type faultProxy struct {
	t  *testing.T
	ln net.Listener

	mu        sync.Mutex
	target    string
	blackhole bool
	latency   func() time.Duration
	conns     map[net.Conn]struct{}
	wg        sync.WaitGroup
}

func newFaultProxy(t *testing.T, target string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *faultProxy) URL() string { return "redis://" + p.ln.Addr().String() + "/0" }

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		target := p.target
		p.mu.Unlock()
		up, err := net.DialTimeout("tcp", target, time.Second)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns[c], p.conns[up] = struct{}{}, struct{}{}
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(up, c)
		go p.pipe(c, up)
	}
}

func (p *faultProxy) pipe(dst, src net.Conn) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			hole, lat := p.blackhole, p.latency
			p.mu.Unlock()
			if !hole {
				if lat != nil {
					time.Sleep(lat())
				}
				if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
		}
		if err != nil {
			break
		}
	}
	src.Close()
	dst.Close()
	p.mu.Lock()
	delete(p.conns, src)
	delete(p.conns, dst)
	p.mu.Unlock()
}

// setTarget sends new connections to addr and resets the open ones.
func (p *faultProxy) setTarget(addr string) {
	p.mu.Lock()
	p.target = addr
	p.mu.Unlock()
	p.reset()
}

// reset closes every open connection with RST (linger 0).
func (p *faultProxy) reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		c.Close()
	}
}

func (p *faultProxy) setBlackhole(on bool) {
	p.mu.Lock()
	p.blackhole = on
	p.mu.Unlock()
}

func (p *faultProxy) setLatency(f func() time.Duration) {
	p.mu.Lock()
	p.latency = f
	p.mu.Unlock()
}

func (p *faultProxy) close() {
	p.ln.Close()
	p.setBlackhole(false)
	p.setLatency(nil)
	p.reset()
	p.wg.Wait()
}

// doubleLeases finds deliveries handed out while an earlier lease of the
// same message was still live: taking the leases in the order they were
// granted, the second lease answer completed, by the client's clock
// (sound whatever the servers' clocks say), before the first lease call
// was even invoked + lease, and no ok nack of the first was invoked
// between the two answers (a nack may end the lease as soon as it is
// invoked, and a long-poll started before it may get the retry).
func doubleLeases(rec *history.Recorder, lease time.Duration) []string {
	byID := map[string][]history.Op{}
	nacks := map[string][]time.Duration{}
	for _, op := range rec.Ops() {
		switch {
		case op.Kind == history.Lease && op.Outcome == history.OK:
			byID[op.ID] = append(byID[op.ID], op)
		case op.Kind == history.Nack && op.Outcome == history.OK:
			nacks[op.ID] = append(nacks[op.ID], op.Invoke)
		}
	}
	var out []string
	for id, ds := range byID {
		// Granted order: by the store's stamps when the answers carry them
		// (one clock, Redis TIME; a long-poll invoked first may be answered
		// with the later lease), else by invoke.
		slices.SortFunc(ds, func(a, b history.Op) int {
			if !a.At.IsZero() && !b.At.IsZero() {
				return a.At.Compare(b.At)
			}
			return int(a.Invoke - b.Invoke)
		})
		for i := 1; i < len(ds); i++ {
			d1, d2 := ds[i-1], ds[i]
			if slices.ContainsFunc(nacks[id], func(inv time.Duration) bool { return inv >= d1.Complete && inv < d2.Complete }) {
				continue
			}
			if d2.Complete < d1.Invoke+lease {
				out = append(out, id)
				break
			}
		}
	}
	slices.Sort(out)
	return out
}

// logHas reports whether the server log contains s (start-up warnings).
func logHas(t *testing.T, p *proc, s string) bool {
	b, err := os.ReadFile(p.log)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Contains(string(b), s)
}

// waitUntil polls f every 5 ms until it is true or limit passes; it
// returns how long that took and whether f became true.
func waitUntil(limit time.Duration, f func() bool) (time.Duration, bool) {
	t0 := time.Now()
	for time.Since(t0) < limit {
		if f() {
			return time.Since(t0), true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return time.Since(t0), false
}

// stopCont freezes (SIGSTOP) or thaws (SIGCONT) a process.
func stopCont(pid int, stop bool) {
	sig := syscall.SIGCONT
	if stop {
		sig = syscall.SIGSTOP
	}
	_ = syscall.Kill(pid, sig)
}
