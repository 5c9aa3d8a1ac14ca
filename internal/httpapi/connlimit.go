package httpapi

import (
	"container/list"
	"crypto/tls"
	"net"
	"net/http"
	"sync"

	"github.com/delayq/delayq/internal/ratelimit"
)

// connLimiter caps a listener's open connections overall (max) and per
// client IP (perIP; IPv6 per /64), ≤ 0 meaning no cap. Idle keep-alive
// connections cost a slot but no work, so one client holding thousands of
// them must not lock others out: at a cap, the oldest idle connection
// (of that IP, for the per-IP cap) is closed to make room. Only when none
// is idle does a new connection wait for a slot (overall cap; the kernel's
// accept queue holds the rest, as before) or get closed at once (per-IP
// cap: that client already has its share busy).
//
// Connection states come from http.Server.ConnState (connState).
type connLimiter struct {
	net.Listener
	max, perIP int

	mu    sync.Mutex
	total int
	byIP  map[string]int
	idle  list.List     // *limitedConn, oldest idle first
	freed chan struct{} // closed (and replaced) when a slot frees or a conn goes idle
	done  chan struct{} // closed by Close
	once  sync.Once
}

func newConnLimiter(ln net.Listener, max, perIP int) *connLimiter {
	return &connLimiter{Listener: ln, max: max, perIP: perIP, byIP: map[string]int{},
		freed: make(chan struct{}), done: make(chan struct{})}
}

// limitedConn is a connection counted by a connLimiter.
type limitedConn struct {
	net.Conn
	l        *connLimiter
	key      string
	idleAt   *list.Element // non-nil while idle
	released bool          // guarded by l.mu
}

func (c *limitedConn) Close() error {
	c.l.mu.Lock()
	c.l.release(c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		lc, err := l.admit(c)
		if err != nil {
			_ = c.Close() // the listener is closing: its error is the one to return
			return nil, err
		}
		if lc != nil {
			return lc, nil
		}
		_ = c.Close() // over the per-IP cap with nothing idle to shed: refused
	}
}

// admit counts c in, shedding idle connections to make room; nil, nil
// means refused (per-IP cap), an error that the listener closed while c
// waited for a slot.
func (l *connLimiter) admit(c net.Conn) (*limitedConn, error) {
	key := ratelimit.ClientKey(c.RemoteAddr().String())
	var shed []*limitedConn
	closeShed := func() {
		for _, v := range shed {
			_ = v.Conn.Close() // idle: nothing in flight; its server goroutine sees the close and ends
		}
		shed = shed[:0]
	}
	defer closeShed()
	for {
		l.mu.Lock()
		if l.perIP > 0 && l.byIP[key] >= l.perIP {
			v := l.oldestIdle(key)
			if v == nil {
				l.mu.Unlock()
				return nil, nil
			}
			l.release(v)
			shed = append(shed, v)
		}
		if l.max > 0 && l.total >= l.max {
			v := l.oldestIdle("")
			if v == nil {
				wait := l.freed
				l.mu.Unlock()
				closeShed()
				select {
				case <-wait:
					continue
				case <-l.done:
					return nil, net.ErrClosed
				}
			}
			l.release(v)
			shed = append(shed, v)
		}
		lc := &limitedConn{Conn: c, l: l, key: key}
		l.total++
		l.byIP[key]++
		l.mu.Unlock()
		return lc, nil
	}
}

// oldestIdle is the connection idle the longest (of key's IP, unless key
// is ""), or nil. l.mu held.
func (l *connLimiter) oldestIdle(key string) *limitedConn {
	for e := l.idle.Front(); e != nil; e = e.Next() {
		if c := e.Value.(*limitedConn); key == "" || c.key == key {
			return c
		}
	}
	return nil
}

// release gives c's slot back (once). l.mu held.
func (l *connLimiter) release(c *limitedConn) {
	if c.released {
		return
	}
	c.released = true
	l.total--
	if l.byIP[c.key]--; l.byIP[c.key] <= 0 {
		delete(l.byIP, c.key)
	}
	l.setIdle(c, false)
	l.signal()
}

func (l *connLimiter) setIdle(c *limitedConn, idle bool) {
	switch {
	case idle && c.idleAt == nil:
		c.idleAt = l.idle.PushBack(c)
		l.signal() // a waiting connection may shed it
	case !idle && c.idleAt != nil:
		l.idle.Remove(c.idleAt)
		c.idleAt = nil
	}
}

// signal wakes connections waiting for a slot. l.mu held.
func (l *connLimiter) signal() {
	close(l.freed)
	l.freed = make(chan struct{})
}

// connState tracks which connections are idle (http.Server.ConnState).
func (l *connLimiter) connState(c net.Conn, st http.ConnState) {
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	lc, ok := c.(*limitedConn)
	if !ok || lc.l != l {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if lc.released {
		return
	}
	switch st {
	case http.StateIdle:
		l.setIdle(lc, true)
	case http.StateNew, http.StateActive:
		l.setIdle(lc, false)
	case http.StateClosed, http.StateHijacked:
		l.release(lc)
	}
}

func (l *connLimiter) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// idleCount is the number of idle connections (tests).
func (l *connLimiter) idleCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.idle.Len()
}
