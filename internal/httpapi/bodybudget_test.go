package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// heapBytes reads the heap's live-or-garbage objects and what it retains
// from the OS (objects, unused span space, free pages not yet released).
func heapBytes() (objects, retained uint64) {
	s := []metrics.Sample{
		{Name: "/memory/classes/heap/objects:bytes"},
		{Name: "/memory/classes/heap/unused:bytes"},
		{Name: "/memory/classes/heap/free:bytes"},
	}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[0].Value.Uint64() + s[1].Value.Uint64() + s[2].Value.Uint64()
}

// TestBodyBudgetFlood: concurrent chunked batch bodies near the size limit,
// each invalid at its very end, all held open at once. Without a budget
// each one's buffer is held (here 32 × 3.75 MiB, and in the report 60 ×
// 15 MB took 2.3 GB) and the heap stays that big afterwards. With an 8 MiB
// budget the bodies over it wait briefly and get 503 with Retry-After, the
// heap's peak stays near the budget, and the memory is given back to the
// OS once the flood is over.
func TestBodyBudgetFlood(t *testing.T) {
	const (
		n      = 32
		limit  = 4 << 20
		budget = 8 << 20
		mib    = 1 << 20
	)
	b := setup(t, func(c *Config) { c.MaxBatchBodyBytes = limit; c.MaxBodyMemory = budget })
	body := []byte(`{"messages":[{"payload":"` + strings.Repeat("a", limit-limit/16) + `"}]}!`)
	runtime.GC()
	base, _ := heapBytes()

	var peak atomic.Uint64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if o, _ := heapBytes(); o > peak.Load() {
				peak.Store(o)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()

	// Every request writes all but its last bytes, then waits until all
	// have (or were answered), so the bodies are held at the same time.
	var written sync.WaitGroup
	written.Add(n)
	allWritten := make(chan struct{})
	go func() { written.Wait(); close(allWritten) }()
	type answer struct {
		status     int
		code       string
		retryAfter string
		err        error
	}
	answers := make(chan answer, n)
	addr := b.ts.Listener.Addr().String()
	for range n {
		go func() {
			var once sync.Once
			done := func() { once.Do(written.Done) }
			defer done()
			c, err := net.DialTimeout("tcp", addr, failsafe)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(3 * failsafe)) // without a budget, 32 bodies are checked at once
			got := make(chan answer, 1)
			go func() { // read while writing: a refusal comes before the body ends
				res, err := http.ReadResponse(bufio.NewReader(c), nil)
				if err != nil {
					got <- answer{err: err}
					return
				}
				defer res.Body.Close()
				var er wire.ErrorResponse
				_ = json.NewDecoder(res.Body).Decode(&er)
				got <- answer{status: res.StatusCode, code: er.Error.Code, retryAfter: res.Header.Get("Retry-After")}
			}()
			fmt.Fprintf(c, "POST /v1/topics/t/messages:batch HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
			head, tail := body[:len(body)-16], body[len(body)-16:]
			for len(head) > 0 {
				k := min(len(head), 256<<10)
				if _, err := fmt.Fprintf(c, "%x\r\n%s\r\n", k, head[:k]); err != nil {
					break // refused: the server closed the connection
				}
				head = head[k:]
			}
			done()
			select {
			case <-allWritten:
				fmt.Fprintf(c, "%x\r\n%s\r\n0\r\n\r\n", len(tail), tail)
			case a := <-got:
				answers <- a
				return
			}
			answers <- <-got
		}()
	}
	var ok400, busy503 int
	for range n {
		a := <-answers
		switch {
		case a.err != nil:
			t.Errorf("request failed without an answer: %v", a.err)
		case a.status == 400:
			ok400++
		case a.status == 503 && a.code == wire.CodeUnavailable && a.retryAfter != "":
			busy503++
		default:
			t.Errorf("answer %d %q (Retry-After %q); want 400 or 503 with Retry-After", a.status, a.code, a.retryAfter)
		}
	}
	close(stopSampling)
	<-sampled
	t.Logf("%d read through (400), %d refused (503); heap peak %d MiB over a base of %d MiB",
		ok400, busy503, (peak.Load()-base)/mib, base/mib)
	if ok400 == 0 || busy503 == 0 {
		t.Errorf("%d bodies read, %d refused; want some of each", ok400, busy503)
	}
	if grew := peak.Load() - min(peak.Load(), base); grew > 10*budget {
		t.Errorf("the heap grew by %d MiB during the flood; the body budget is %d MiB", grew/mib, budget/mib)
	}
	if u := b.srv.budget.inUse(); u != 0 {
		t.Errorf("%d bytes still charged to the budget", u)
	}
	// The memory is returned without waiting for the runtime's own GC.
	for end := time.Now().Add(failsafe); ; time.Sleep(10 * time.Millisecond) {
		_, retained := heapBytes()
		if retained < base+4*budget {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the heap still retains %d MiB after the flood (base %d MiB)", retained/mib, base/mib)
		}
	}
}

// budgetCall is one request's acquire on bb, run in a goroutine; on a
// refusal it releases what it held, as readBody does.
func budgetCall(ctx context.Context, bb *byteBudget, need, held int64) <-chan error {
	done := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(time.Hour) // only the budget's own decisions count
		err := bb.acquire(ctx, need, held, &deadline)
		if err != nil {
			bb.release(held)
		}
		done <- err
	}()
	return done
}

// TestBudgetStandstillGoesToTheLargest: three bodies fill the budget and
// each waits to grow; only another's end would free bytes, and none ends.
// The budget refuses the ones holding least at once, and the one holding
// most gets the room, instead of all three waiting out their time.
func TestBudgetStandstillGoesToTheLargest(t *testing.T) {
	const mib = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	bb := newByteBudget(8 * mib)
	for _, n := range []int64{4 * mib, 3 * mib, 1 * mib} {
		var deadline time.Time
		if err := bb.acquire(ctx, n, 0, &deadline); err != nil {
			t.Fatalf("first %d MiB: %v", n/mib, err)
		}
	}
	small := budgetCall(ctx, bb, 1*mib, 1*mib)
	middle := budgetCall(ctx, bb, 3*mib, 3*mib)
	large := budgetCall(ctx, bb, 4*mib, 4*mib)
	if err := <-large; err != nil {
		t.Errorf("the body holding most: %v; want its growth charged", err)
	}
	for name, ch := range map[string]<-chan error{"least": small, "middle": middle} {
		if err := <-ch; !errors.Is(err, errBodyBudget) {
			t.Errorf("the body holding the %s: %v; want refused by the budget at once", name, err)
		}
	}
	if u := bb.inUse(); u != 8*mib {
		t.Errorf("%d MiB charged, want the largest body's 8 MiB", u/mib)
	}
}

// TestBudgetWaitsWhileOthersRead: a body waiting for room is not refused
// while another request holds bytes outside the queue (still reading,
// or in its handler); it is charged once that one releases.
func TestBudgetWaitsWhileOthersRead(t *testing.T) {
	const mib = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	bb := newByteBudget(8 * mib)
	var deadline time.Time
	if err := bb.acquire(ctx, 6*mib, 0, &deadline); err != nil {
		t.Fatal(err)
	}
	if err := bb.acquire(ctx, 1*mib, 0, &deadline); err != nil {
		t.Fatal(err)
	}
	grow := budgetCall(ctx, bb, 2*mib, 1*mib)
	for { // wait until it queued
		bb.mu.Lock()
		n := len(bb.waiting)
		bb.mu.Unlock()
		if n == 1 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// A first buffer that fits is charged although a body waits.
	if err := bb.acquire(ctx, 16<<10, 0, &deadline); err != nil {
		t.Errorf("a first buffer beside a waiting body: %v", err)
	}
	bb.release(16 << 10)
	select {
	case err := <-grow:
		t.Fatalf("the waiting body was decided (%v) while another still held its bytes", err)
	default:
	}
	bb.release(6 * mib)
	if err := <-grow; err != nil {
		t.Errorf("the waiting body after the release: %v; want charged", err)
	}
}

// TestBudgetNeedOverTheWhole: a growth larger than the whole budget can
// never be charged, so it is refused at once instead of after a wait.
func TestBudgetNeedOverTheWhole(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), failsafe)
	defer cancel()
	bb := newByteBudget(8 << 20)
	if err := <-budgetCall(ctx, bb, 9<<20, 0); !errors.Is(err, errBodyBudget) {
		t.Errorf("9 MiB on an 8 MiB budget: %v; want refused by the budget", err)
	}
	if u := bb.inUse(); u != 0 {
		t.Errorf("%d bytes charged after the refusal", u)
	}
}
