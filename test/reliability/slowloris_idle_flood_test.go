package reliability

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// probe runs paced normal requests (a send and a health check each) for
// d and returns their latencies and failures.
func probe(t *testing.T, base string, d time.Duration) (lat []time.Duration, failures int) {
	c := client(t, base, 5*time.Second)
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	ctx := context.Background()
	end := time.Now().Add(d)
	for i := 0; time.Now().Before(end); i++ {
		t0 := time.Now()
		_, err := c.Send(ctx, "flood", delayq.SendRequest{ID: fmt.Sprint("probe-", time.Now().UnixNano(), "-", i), Payload: []byte("x")})
		if err != nil {
			failures++
		} else {
			lat = append(lat, time.Since(t0))
		}
		t0 = time.Now()
		res, err := hc.Get(base + "/healthz")
		if err != nil || res.StatusCode != 200 {
			failures++
		} else {
			lat = append(lat, time.Since(t0))
		}
		if res != nil {
			res.Body.Close()
		}
		time.Sleep(20 * time.Millisecond)
	}
	return lat, failures
}

// TestS22S23SlowlorisAndIdleFlood: slowloris connections (a header byte
// every 2 s) and a flood of idle keep-alive connections against the real
// binary. The server closes the slow ones by its header timeout and stays
// healthy; normal requests' p99 is reported (asserted only < 1 s).
func TestS22S23SlowlorisAndIdleFlood(t *testing.T) {
	slow := 200
	idle := pick(2000, 8000)
	p := newProc(t, "--max-conns", "10000")
	p.start()
	base := p.url()

	baseline, bfail := probe(t, base, 3*time.Second)
	rssBefore, _ := procStatusKiB(p.pid(), "VmRSS")

	var wg sync.WaitGroup
	stop := make(chan struct{})
	var slowClosed atomic.Int64
	var slowLife sync.Mutex
	var lifetimes []time.Duration
	for i := 0; i < slow; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := net.Dial("tcp", p.addr)
			if err != nil {
				return
			}
			defer conn.Close()
			opened := time.Now()
			hdr := "POST /v1/topics/flood/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "
			for j := 0; ; j++ {
				if _, err := conn.Write([]byte{hdr[j%len(hdr)]}); err != nil {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(2 * time.Second):
				}
			}
			slowClosed.Add(1)
			slowLife.Lock()
			lifetimes = append(lifetimes, time.Since(opened))
			slowLife.Unlock()
		}()
	}
	// Idle keep-alive connections: one request each, then silence.
	var idleOpen atomic.Int64
	var conns []net.Conn
	var connsMu sync.Mutex
	var iwg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for i := 0; i < idle; i++ {
		iwg.Add(1)
		sem <- struct{}{}
		go func() {
			defer iwg.Done()
			defer func() { <-sem }()
			conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
			if err != nil {
				return
			}
			fmt.Fprintf(conn, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				conn.Close()
				return
			}
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			idleOpen.Add(1)
			connsMu.Lock()
			conns = append(conns, conn)
			connsMu.Unlock()
		}()
	}
	iwg.Wait()
	rssOpen, _ := procStatusKiB(p.pid(), "VmRSS")
	underLoad, ufail := probe(t, base, pick(10*time.Second, 30*time.Second))
	close(stop)
	wg.Wait()
	connsMu.Lock()
	for _, c := range conns {
		c.Close()
	}
	connsMu.Unlock()
	healthy := ready(&http.Client{Timeout: 2 * time.Second}, base)

	bq, uq := quantiles(baseline), quantiles(underLoad)
	slowLife.Lock()
	lq := quantiles(lifetimes)
	slowLife.Unlock()
	writeResults(t, "S22-S23-flood", map[string]any{
		"scenario": "S22/S23 slowloris + idle flood (scaled)", "tier": tier(), "date": time.Now().UTC().Format(time.RFC3339),
		"slowloris_conns": slow, "slowloris_closed_by_server": slowClosed.Load(), "slowloris_lifetime": lq,
		"idle_keepalive_requested": idle, "idle_keepalive_open": idleOpen.Load(),
		"server_rss_mib_before": rssBefore >> 10, "server_rss_mib_connections_open": rssOpen >> 10,
		// What each open connection (idle keep-alive or slowloris) costs the server.
		"server_rss_kib_per_connection": float64(rssOpen-rssBefore) / float64(max(idleOpen.Load()+int64(slow), 1)),
		"baseline_latency":              bq, "baseline_failures": bfail, "under_flood_latency": uq, "under_flood_failures": ufail,
		"healthy_after": healthy,
	})
	if !healthy {
		t.Errorf("server unhealthy after the flood")
	}
	if uq.P99 >= 1000 || ufail > 0 {
		t.Errorf("under flood: p99 %.1f ms, %d failures; want < 1 s and none", uq.P99, ufail)
	}
	if slowClosed.Load() < int64(slow)*9/10 {
		t.Errorf("only %d of %d slowloris connections were closed by the server", slowClosed.Load(), slow)
	}
	if lq.Max > 10_000 {
		t.Errorf("a slowloris connection lived %.0f ms, want ≤ header timeout 5 s + one 2 s write interval (+ slack)", lq.Max)
	}
	if idleOpen.Load() < int64(idle)*9/10 {
		t.Errorf("only %d of %d idle connections were served", idleOpen.Load(), idle)
	}
}
