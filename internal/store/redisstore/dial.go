package redisstore

import (
	"context"
	"net"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// noDialBreaker keeps go-redis's dial circuit breaker shut. After
// PoolSize dials in a row fail, a go-redis pool stops dialing and answers
// every call with the last dial error until a background probe, made once
// a second, gets through (redis/go-redis#3062). A Redis that is back after
// a restart would then still be reported unavailable for up to a second,
// and every call in that second would fail without trying. With this hook
// a failed dial hands the pool a deadConn instead of an error: the pool
// never counts a failure, the call fails all the same on its first write
// with the dial's error (ErrUnavailable), and every call dials afresh.
//
// It wraps the whole dial, so for a Sentinel client a failed master
// lookup is covered too. Dial retries inside the pool (DialerRetries) no
// longer happen, since the pool sees no dial fail: a refused call fails at
// once and the next call dials again.
type noDialBreaker struct{}

func (noDialBreaker) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			return &deadConn{err: err, addr: dialAddr{network, addr}}, nil
		}
		return conn, nil
	}
}

func (noDialBreaker) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (noDialBreaker) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// deadConn is a connection that could not be made: reads and writes fail
// with the dial's error, so go-redis discards it after the first use.
// SyscallConn fails too, so that the pool's health check drops one that
// waits idle (MinIdleConns) instead of handing it out.
type deadConn struct {
	err  error
	addr dialAddr
}

func (c *deadConn) Read([]byte) (int, error)         { return 0, c.err }
func (c *deadConn) Write([]byte) (int, error)        { return 0, c.err }
func (c *deadConn) Close() error                     { return nil }
func (c *deadConn) LocalAddr() net.Addr              { return c.addr }
func (c *deadConn) RemoteAddr() net.Addr             { return c.addr }
func (c *deadConn) SetDeadline(time.Time) error      { return nil }
func (c *deadConn) SetReadDeadline(time.Time) error  { return nil }
func (c *deadConn) SetWriteDeadline(time.Time) error { return nil }

func (c *deadConn) SyscallConn() (syscall.RawConn, error) { return nil, c.err }

// dialAddr is the address a deadConn was dialed for.
type dialAddr struct{ network, addr string }

func (a dialAddr) Network() string { return a.network }
func (a dialAddr) String() string  { return a.addr }
