package httpapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"testing"
	"time"
)

// serveOn runs b's server on a fresh loopback listener until the test ends.
func serveOn(t *testing.T, b *bundle) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.srv.Serve(ctx, ln) }()
	t.Cleanup(func() {
		stop()
		if err := <-served; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return ln.Addr().String()
}

// keepAlive opens a connection from local (nil: any), makes one GET
// /healthz on it and leaves it open and idle, as a flood does.
func keepAlive(t *testing.T, addr string, local net.Addr) (net.Conn, *bufio.Reader) {
	t.Helper()
	d := net.Dialer{Timeout: failsafe, LocalAddr: local}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	if code, err := get(c, br); err != nil || code != 200 {
		t.Fatalf("keep-alive request: %d, %v", code, err)
	}
	return c, br
}

// waitIdle waits until the server counts n idle connections.
func waitIdle(t *testing.T, b *bundle, n int) {
	t.Helper()
	lim := b.srv.lastLimiter.Load()
	for end := time.Now().Add(failsafe); lim.idleCount() != n; time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("%d idle connections, want %d", lim.idleCount(), n)
		}
	}
}

// waitConnIdle waits until the server counts the client connection c
// (found by its address) as idle.
func waitConnIdle(t *testing.T, b *bundle, c net.Conn) {
	t.Helper()
	lim := b.srv.lastLimiter.Load()
	idle := func() bool {
		lim.mu.Lock()
		defer lim.mu.Unlock()
		for e := lim.idle.Front(); e != nil; e = e.Next() {
			if e.Value.(*limitedConn).RemoteAddr().String() == c.LocalAddr().String() {
				return true
			}
		}
		return false
	}
	for end := time.Now().Add(failsafe); !idle(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("connection %s not idle", c.LocalAddr())
		}
	}
}

// get sends GET /healthz on c and reads the answer (failsafe deadline).
func get(c net.Conn, br *bufio.Reader) (int, error) {
	_ = c.SetDeadline(time.Now().Add(failsafe))
	defer c.SetDeadline(time.Time{})
	if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		return 0, err
	}
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode, nil
}

// closedByServer reports whether the server has closed c (a read ends
// with EOF or a reset rather than waiting).
func closedByServer(c net.Conn, br *bufio.Reader) bool {
	_ = c.SetReadDeadline(time.Now().Add(failsafe))
	_, err := br.ReadByte()
	var ne net.Error
	return err != nil && !(errors.As(err, &ne) && ne.Timeout())
}

// TestIdleFloodNewClientServed: one GET /healthz each on as many
// keep-alive connections as the cap allows used to lock everyone out
// until IdleTimeout (120 s). At the cap the oldest idle connection is
// closed instead, and a new client is served at once.
func TestIdleFloodNewClientServed(t *testing.T) {
	const max = 16
	b := setup(t, func(c *Config) { c.MaxConns = max; c.MaxConnsPerIP = -1 })
	addr := serveOn(t, b)
	type kc struct {
		c  net.Conn
		br *bufio.Reader
	}
	var flood []kc
	for i := range max {
		c, br := keepAlive(t, addr, nil)
		flood = append(flood, kc{c, br})
		waitIdle(t, b, i+1) // so "oldest idle" is flood[0], then flood[1] …
	}
	for i := range 3 { // each newcomer sheds one idle connection, oldest first
		// A client of its own, whose connection stays open (so the next
		// newcomer finds the server at its cap again).
		client := &http.Client{Transport: &http.Transport{}, Timeout: failsafe}
		defer client.CloseIdleConnections()
		res, err := client.Get("http://" + addr + "/healthz")
		if err != nil {
			t.Fatalf("new client %d after an idle flood: %v", i, err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("new client %d: status %d", i, res.StatusCode)
		}
		if !closedByServer(flood[i].c, flood[i].br) {
			t.Fatalf("idle connection %d (the oldest) was not closed", i)
		}
	}
	// The newest idle connections were kept and still work.
	last := flood[max-1]
	if code, err := get(last.c, last.br); err != nil || code != 200 {
		t.Fatalf("the newest idle connection: %d, %v", code, err)
	}
}

// TestPerIPConnCap: a client at its per-IP cap with every connection busy
// (here: slow request headers) gets no more, while another IP is served;
// once its connections are idle, a new one sheds the oldest of them.
func TestPerIPConnCap(t *testing.T) {
	const perIP = 4
	b := setup(t, func(c *Config) { c.MaxConns = 64; c.MaxConnsPerIP = perIP; c.ReadHeaderTimeout = time.Minute })
	addr := serveOn(t, b)
	var slow []net.Conn
	for range perIP {
		c, err := net.DialTimeout("tcp", addr, failsafe)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n") // headers not finished: busy
		slow = append(slow, c)
	}
	// The same IP: refused (closed without an answer).
	c, err := net.DialTimeout("tcp", addr, failsafe)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	if code, err := get(c, br); err == nil {
		t.Fatalf("a connection over the per-IP cap was served: %d", code)
	}
	// Another IP (127.0.0.2 is loopback too on Linux): served.
	if other, err := net.ResolveTCPAddr("tcp", "127.0.0.2:0"); err == nil {
		d := net.Dialer{Timeout: failsafe, LocalAddr: other}
		if c2, err := d.Dial("tcp", addr); err != nil {
			t.Logf("no second loopback source address (%v); other-IP case skipped", err)
		} else {
			c2.Close()
			keepAlive(t, addr, other)
		}
	}
	// Finish the slow requests: the connections go idle, and a newcomer
	// from the same IP sheds the oldest. Each is waited for by its own
	// address: the server marks a connection idle after its answer is
	// written, so the client can read it first, and a count of idle
	// connections could be met by the other IP's or a later one while
	// this one is not idle yet (the idle order is then not slow's).
	brs := make([]*bufio.Reader, perIP)
	for i, s := range slow {
		fmt.Fprint(s, "\r\n")
		brs[i] = bufio.NewReader(s)
		res, err := http.ReadResponse(brs[i], nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		waitConnIdle(t, b, s)
	}
	keepAlive(t, addr, nil)
	if !closedByServer(slow[0], brs[0]) {
		t.Fatal("the oldest idle connection of the IP was not closed for the newcomer")
	}
}
