package reliability

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestS23SlowBodiesAndReaders: the two slow clients the header timeout
// does not cover, against the real binary with a 64 MiB body budget:
//
//   - slow bodies: 1,200 batch sends claiming 3 MiB (Content-Length), then
//     a byte a second. Each may hold the budget only for what arrived; a
//     buffer sized before its bytes came (64 KiB each, 75 MiB in all) left
//     every other request with a body waiting 1 s for a 503.
//   - slow readers: consumers that lease 100 messages of 80 KiB with a 3 s
//     lease and never read the answer. Their messages must come back when
//     the lease runs out and reach a real consumer, and the server must end
//     the blocked answers by its write timeout.
//
// Meanwhile normal sends, batch sends and health checks must stay fast
// with no failure; the server must close the slow bodies by its read timeout,
// answering none of them 2xx.
func TestS23SlowBodiesAndReaders(t *testing.T) {
	const (
		slowBodies   = 1200
		readers      = 4
		perReader    = 100
		payloadBytes = 80 << 10 // an answer of 8 MB: more than the kernel buffers (4 MiB to send, 128 KiB to receive)
		claimed      = 3 << 20
		// The server's defaults (httpapi.DefaultReadTimeout,
		// DefaultWriteTimeout: the longest long-poll + 30 s).
		readTimeout  = 30 * time.Second
		writeTimeout = 60 * time.Second
	)
	p := newProc(t, "--max-conns", "10000", "--max-conns-per-ip", "-1", "--max-body-memory", "64MiB")
	p.start()
	base := p.url()
	ctx := context.Background()
	c := client(t, base, 30*time.Second)

	const readTopic = "s23read"
	payload := bytes.Repeat([]byte("s"), payloadBytes)
	for i := 0; i < readers*perReader; i += 100 {
		var reqs []delayq.SendRequest
		for j := i; j < min(i+100, readers*perReader); j++ {
			reqs = append(reqs, delayq.SendRequest{ID: fmt.Sprint("r", j), Payload: payload})
		}
		res, err := c.SendBatch(ctx, readTopic, reqs)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	baseline, bfail := probe(t, base, 3*time.Second)

	// Slow readers: each leases, then reads nothing until the end.
	var unread []net.Conn
	leasedAt := time.Now()
	for range readers {
		conn, err := net.Dial("tcp", p.addr)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		body := fmt.Sprintf(`{"max":%d,"lease":"3s"}`, perReader)
		fmt.Fprintf(conn, "POST /v1/topics/%s/lease HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", readTopic, len(body), body)
		unread = append(unread, conn)
	}
	if _, ok := waitUntil(10*time.Second, func() bool {
		ti, err := c.Topic(ctx, readTopic)
		return err == nil && ti.Counts.Inflight == readers*perReader
	}); !ok {
		t.Fatalf("the slow readers did not lease the %d messages within 10 s", readers*perReader)
	}

	// Slow bodies: a 3 MiB claim, then a byte a second until the server
	// answers or closes.
	type slowEnd struct {
		status int // 0: closed without an answer
		life   time.Duration
	}
	ends := make(chan slowEnd, slowBodies)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 64)
	for range slowBodies {
		sem <- struct{}{}
		conn, err := net.DialTimeout("tcp", p.addr, 5*time.Second)
		<-sem
		if err != nil {
			t.Fatalf("dial: %v", err)
		}
		opened := time.Now()
		fmt.Fprintf(conn, "POST /v1/topics/s23body/messages:batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", claimed)
		answered := make(chan struct{})
		wg.Go(func() {
			defer conn.Close()
			_ = conn.SetReadDeadline(time.Now().Add(readTimeout + 30*time.Second))
			res, err := http.ReadResponse(bufio.NewReader(conn), nil)
			close(answered)
			e := slowEnd{life: time.Since(opened)}
			if err == nil {
				e.status = res.StatusCode
				res.Body.Close()
			}
			ends <- e
		})
		wg.Go(func() {
			for {
				select {
				case <-answered:
					return
				case <-time.After(time.Second):
				}
				if _, err := conn.Write([]byte(" ")); err != nil {
					return
				}
			}
		})
	}

	// A real consumer takes every message the unread answers held once
	// their leases run out.
	got := map[string]*delayq.Message{}
	var consumeErr error
	consumed := make(chan struct{})
	go func() {
		defer close(consumed)
		end := time.Now().Add(30 * time.Second)
		for len(got) < readers*perReader && time.Now().Before(end) {
			msgs, err := c.Lease(ctx, readTopic, delayq.LeaseRequest{Max: 100, Wait: 2 * time.Second})
			if err != nil {
				consumeErr = err
				return
			}
			var acks []delayq.AckRequest
			for _, m := range msgs {
				got[m.ID] = m
				acks = append(acks, delayq.AckRequest{ID: m.ID, Receipt: m.Receipt})
			}
			if len(acks) == 0 {
				continue
			}
			errs, err := c.AckBatch(ctx, readTopic, acks)
			if err == nil {
				err = errors.Join(errs...)
			}
			if err != nil {
				consumeErr = err
				return
			}
		}
	}()
	// Producers' batches need more of the budget than single sends: a
	// batch of 100 1 KiB messages, every 100 ms, beside the probe.
	var batchLat []time.Duration
	batchFail := 0
	batchesDone := make(chan struct{})
	probeFor := pick(10*time.Second, 20*time.Second)
	go func() {
		defer close(batchesDone)
		bc := client(t, base, 5*time.Second)
		pad := bytes.Repeat([]byte("b"), 1024)
		for i, end := 0, time.Now().Add(probeFor); time.Now().Before(end); i++ {
			var reqs []delayq.SendRequest
			for j := range 100 {
				reqs = append(reqs, delayq.SendRequest{ID: fmt.Sprintf("batch-%d-%d", i, j), Payload: pad, When: delayq.When{Delay: time.Hour}})
			}
			t0 := time.Now()
			res, err := bc.SendBatch(ctx, "s23batch", reqs)
			for _, r := range res {
				err = cmp.Or(err, r.Err)
			}
			if err != nil {
				batchFail++
			} else {
				batchLat = append(batchLat, time.Since(t0))
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	underLoad, ufail := probe(t, base, probeFor)
	<-batchesDone
	rssKiB, _ := procStatusKiB(p.pid(), "VmRSS")
	<-consumed
	wg.Wait()
	close(ends)
	statuses := map[int]int{}
	var lifetimes []time.Duration
	for e := range ends {
		statuses[e.status]++
		lifetimes = append(lifetimes, e.life)
	}

	// The unread answers: past its write timeout the server has ended
	// them and closed their connections, so reading them now finds the
	// part that was sent and the end (a live connection would keep us
	// reading until our own deadline). Nothing read them before.
	time.Sleep(time.Until(leasedAt.Add(writeTimeout + 5*time.Second)))
	var readerBytes []int64
	readersClosed := 0
	for _, conn := range unread {
		_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := io.Copy(io.Discard, conn)
		readerBytes = append(readerBytes, n)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("an unread lease answer's connection was still open %s after the lease (%d B had been sent)", time.Since(leasedAt).Round(time.Second), n)
			continue
		}
		readersClosed++ // EOF or a reset: the server closed it
	}
	time.Sleep(time.Second) // the server gives back what it could not deliver (stale receipts by now)
	ti, err := c.Topic(ctx, readTopic)
	healthy := ready(&http.Client{Timeout: 2 * time.Second}, base)

	bq, uq, lq := quantiles(baseline), quantiles(underLoad), quantiles(lifetimes)
	statusText := map[string]int{}
	for s, n := range statuses {
		statusText[strconv.Itoa(s)] = n
	}
	writeResults(t, "S23-slow-bodies-readers", map[string]any{
		"scenario": "S23 slow request bodies and slow lease readers", "tier": tier(), "date": time.Now().UTC().Format(time.RFC3339),
		"slow_bodies": slowBodies, "slow_body_claimed_bytes": claimed, "slow_body_answers": statusText, "slow_body_lifetime": lq,
		"slow_readers": readers, "slow_reader_messages": readers * perReader, "slow_readers_closed_by_server": readersClosed, "slow_reader_bytes_sent": readerBytes,
		"redelivered_to_consumer": len(got), "server_rss_mib_under_load": rssKiB >> 10,
		"baseline_latency": bq, "baseline_failures": bfail, "under_load_latency": uq, "under_load_failures": ufail,
		"batch_send_latency": quantiles(batchLat), "batch_send_failures": batchFail,
		"healthy_after": healthy,
	})
	if !healthy {
		t.Errorf("server unhealthy afterwards")
	}
	if uq.P99 >= 1000 || ufail > 0 {
		t.Errorf("under slow clients: p99 %.1f ms, %d failures; want < 1 s and none", uq.P99, ufail)
	}
	if bl := quantiles(batchLat); bl.N == 0 || bl.P99 >= 1000 || batchFail > 0 {
		t.Errorf("batch sends under slow clients: %d ok, p99 %.1f ms, %d failures; want p99 < 1 s and none failed", bl.N, bl.P99, batchFail)
	}
	// Each stopped at its read timeout: 408, which clients retry (the
	// request was not carried out), never a 2xx or a 400 that tells a
	// producer its request was wrong.
	for s, n := range statuses {
		if s != http.StatusRequestTimeout {
			t.Errorf("%d slow bodies were answered %d, want %d", n, s, http.StatusRequestTimeout)
		}
	}
	if len(lifetimes) != slowBodies {
		t.Errorf("%d of %d slow bodies ended", len(lifetimes), slowBodies)
	}
	if lq.Max > ms(readTimeout+10*time.Second) {
		t.Errorf("a slow body lived %.0f ms, want ≤ the read timeout %s (+ slack)", lq.Max, readTimeout)
	}
	if consumeErr != nil {
		t.Errorf("consumer: %v", consumeErr)
	}
	if len(got) != readers*perReader {
		t.Errorf("the consumer got %d of the %d messages the unread answers held", len(got), readers*perReader)
	}
	for id, m := range got {
		if m.Attempt != 2 || len(m.Payload) != payloadBytes {
			t.Errorf("%s: attempt %d, %d B payload; want the second delivery of %d B", id, m.Attempt, len(m.Payload), payloadBytes)
			break
		}
	}
	if err != nil {
		t.Errorf("topic: %v", err)
	} else if n := ti.Counts.Ready + ti.Counts.Inflight + ti.Counts.Scheduled + ti.Counts.Dead; n != 0 {
		t.Errorf("after the slow readers were closed the topic holds %+v; want nothing (each message acked once)", ti.Counts)
	}
}
