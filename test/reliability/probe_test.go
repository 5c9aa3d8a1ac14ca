package reliability

import (
	"context"
	"io"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/test/internal/history"
)

// probeOp is one probe send (or readiness check) during an outage
// scenario.
type probeOp struct {
	at, lat time.Duration // invoke on the recorder clock, latency
	status  int           // HTTP status, 0 for a transport error
	body    string        // /readyz only: the start of the answer
}

// prober sends a probe message every 50 ms and reads /readyz every
// 200 ms, each in its own goroutine so that one slow answer does not
// hide the next: the answer time of every call started during a fault
// is measured. Calls go to the servers in turn. Probe messages go to
// topic "probe", which nobody consumes.
type prober struct {
	rec *history.Recorder
	// sendTr and hc are the probes' own transports, so that their idle
	// keep-alive connections (one server goroutine each) can be closed
	// before a scenario counts the server's goroutines.
	sendTr *http.Transport
	hc     *http.Client

	mu     sync.Mutex
	sends  []probeOp
	readyz []probeOp

	cancel context.CancelFunc
	done   chan struct{}
}

// startProber starts probing bases; afterReadyz, when set, runs after
// each /readyz probe (S11 samples the server's goroutines there).
func startProber(t *testing.T, rec *history.Recorder, bases []string, afterReadyz func()) *prober {
	t.Helper()
	p := &prober{rec: rec, sendTr: &http.Transport{MaxIdleConnsPerHost: 64}, hc: &http.Client{Timeout: 10 * time.Second}, done: make(chan struct{})}
	var clients []*delayq.Client
	for _, b := range bases {
		c, err := delayq.NewClient(b, delayq.WithRetry(0, 0), delayq.WithTimeout(10*time.Second), delayq.WithHTTPClient(&http.Client{Transport: p.sendTr}))
		if err != nil {
			t.Fatal(err)
		}
		clients = append(clients, c)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go func() {
		defer close(p.done)
		var wg sync.WaitGroup
		for i := 0; ctx.Err() == nil; i++ {
			wg.Go(func() {
				at := rec.Now()
				_, err := clients[i%len(clients)].Send(ctx, "probe", delayq.SendRequest{ID: "q" + strconv.Itoa(i), Payload: []byte("x")})
				op := probeOp{at: at, lat: rec.Now() - at, status: statusOf(err)}
				p.mu.Lock()
				p.sends = append(p.sends, op)
				p.mu.Unlock()
			})
			if i%4 == 0 {
				wg.Go(func() {
					at := rec.Now()
					op := probeOp{at: at}
					if res, err := p.hc.Get(bases[(i/4)%len(bases)] + "/readyz"); err == nil {
						b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
						res.Body.Close()
						op.status, op.body = res.StatusCode, string(b)
					}
					op.lat = rec.Now() - at
					p.mu.Lock()
					p.readyz = append(p.readyz, op)
					p.mu.Unlock()
					if afterReadyz != nil {
						afterReadyz()
					}
				})
			}
			sleepCtx(ctx, 50*time.Millisecond)
		}
		wg.Wait()
	}()
	t.Cleanup(p.stop)
	return p
}

// stop ends the probes and waits for the last answers. Idempotent.
func (p *prober) stop() {
	p.cancel()
	<-p.done
	p.closeIdle()
}

// closeIdle closes the probes' idle keep-alive connections.
func (p *prober) closeIdle() {
	p.sendTr.CloseIdleConnections()
	p.hc.CloseIdleConnections()
}

// ops returns copies of the probe sends and /readyz checks so far.
func (p *prober) ops() (sends, readyz []probeOp) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]probeOp(nil), p.sends...), append([]probeOp(nil), p.readyz...)
}
