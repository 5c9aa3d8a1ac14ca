package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/test/internal/history"
)

// bin is the delayq binary under test, built once by TestMain.
var bin string

func TestMain(m *testing.M) {
	if spec := os.Getenv(kfakeEnv); spec != "" {
		os.Exit(runKfakeBroker(spec))
	}
	dir, err := os.MkdirTemp("", "delayq-reliability-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	bin = filepath.Join(dir, "delayq")
	build := exec.Command("go", "build", "-o", bin, "./cmd/delayq")
	build.Dir = repoRoot()
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build delayq:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) { os.RemoveAll(dir) }))
}

func repoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}

// tier is the size knob: DELAYQ_RELIABILITY=short (default) or full.
func tier() string {
	if os.Getenv("DELAYQ_RELIABILITY") == "full" {
		return "full"
	}
	return "short"
}

func full() bool { return tier() == "full" }

// pick returns short or full by tier.
func pick[T any](short, fullv T) T {
	if full() {
		return fullv
	}
	return short
}

// seed is DELAYQ_SEED or a fresh one; every scenario logs and records it.
func seed(t *testing.T) uint64 {
	if v := os.Getenv("DELAYQ_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("DELAYQ_SEED=%q: %v", v, err)
		}
		return s
	}
	return uint64(time.Now().UnixNano())
}

func resultsDir(t *testing.T) string {
	if d := os.Getenv("DELAYQ_RESULTS_DIR"); d != "" {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		return d
	}
	return t.TempDir()
}

// writeResults writes v as <dir>/<name>.json and logs where.
func writeResults(t *testing.T, name string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(resultsDir(t), name+".json")
	if err := os.WriteFile(p, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("results: %s\n%s", p, b)
}

// freeAddr finds a loopback port; the server keeps it across restarts so
// clients keep their URL.
// freeAddr is a loopback address for a server that is restarted on it:
// redistest's ports are outside the ephemeral range and never reused in
// this process, so nothing takes it while the server is down.
func freeAddr(t *testing.T) string {
	t.Helper()
	return "127.0.0.1:" + strconv.Itoa(redistest.FreePort(t))
}

// proc is one `delayq serve` subprocess, restartable on the same address
// and data directory.
type proc struct {
	t    *testing.T
	addr string
	data string
	args []string
	log  string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{}
	exitErr error
	starts  int
}

// newProc prepares a server on a fresh port and data dir; extra flags are
// appended to the serve command line.
func newProc(t *testing.T, extra ...string) *proc {
	t.Helper()
	dir := t.TempDir()
	p := &proc{t: t, addr: freeAddr(t), data: filepath.Join(dir, "data"), log: filepath.Join(dir, "server.log"), args: extra}
	t.Cleanup(func() {
		p.kill9()
		if t.Failed() {
			if b, err := os.ReadFile(p.log); err == nil {
				if len(b) > 8000 {
					b = b[len(b)-8000:]
				}
				t.Logf("server log tail:\n%s", b)
			}
		}
	})
	return p
}

func (p *proc) url() string { return "http://" + p.addr }

// start execs the server and waits until /readyz answers 200. It returns
// the time from exec to ready.
func (p *proc) start() time.Duration {
	p.t.Helper()
	d, err := p.tryStart(30 * time.Second)
	if err != nil {
		p.t.Fatal(err)
	}
	return d
}

func (p *proc) tryStart(limit time.Duration) (time.Duration, error) {
	lf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	args := append([]string{"serve", "--addr", p.addr, "--data", p.data, "--log-level", "warn"}, p.args...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Env = append(os.Environ(), "DELAYQ_CONFIG=")
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		lf.Close()
		return 0, err
	}
	exited := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.exited = cmd, exited
	p.starts++
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		lf.Close()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	hc := &http.Client{Timeout: time.Second}
	defer hc.CloseIdleConnections()
	for time.Since(t0) < limit {
		select {
		case <-exited:
			return 0, fmt.Errorf("server exited during start-up: %v", p.exitErr)
		default:
		}
		if ready(hc, p.url()) {
			return time.Since(t0), nil
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0, fmt.Errorf("server not ready within %v", limit)
}

func ready(hc *http.Client, base string) bool {
	for _, path := range []string{"/healthz", "/readyz"} {
		res, err := hc.Get(base + path)
		if err != nil {
			return false
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return false
		}
	}
	return true
}

// kill9 sends SIGKILL and waits for the process to be gone. No-op when
// not running.
func (p *proc) kill9() {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-exited:
		return
	default:
	}
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGKILL)
	<-exited
}

// term sends SIGTERM and waits up to limit for a clean exit; it returns
// how long shutdown took and the exit error (nil for status 0).
func (p *proc) term(limit time.Duration) (time.Duration, error) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	t0 := time.Now()
	_ = syscall.Kill(cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(limit):
		p.kill9()
		return time.Since(t0), fmt.Errorf("no exit within %v after SIGTERM (killed)", limit)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return time.Since(t0), p.exitErr
}

// client makes a Go client with no automatic retries: the scenarios retry
// themselves so that every attempt is recorded on its own.
func client(t *testing.T, base string, timeout time.Duration) *delayq.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 30 * time.Second}
	t.Cleanup(tr.CloseIdleConnections)
	c, err := delayq.NewClient(base, delayq.WithRetry(0, 0), delayq.WithTimeout(timeout),
		delayq.WithHTTPClient(&http.Client{Transport: tr}))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// outcome classifies a call's error for the history: ok; fail when the
// request certainly had no effect (connection refused, or a 4xx answer);
// info otherwise (reset, timeout, 5xx: it may or may not have happened).
func outcome(err error) history.Outcome {
	if err == nil {
		return history.OK
	}
	if errors.Is(err, syscall.ECONNREFUSED) {
		return history.Fail
	}
	var ae *delayq.APIError
	if errors.As(err, &ae) && ae.StatusCode >= 400 && ae.StatusCode < 500 {
		return history.Fail
	}
	return history.Info
}

func finish(p *history.Pending, o history.Outcome) {
	switch o {
	case history.OK:
		p.OK()
	case history.Fail:
		p.Fail()
	default:
		p.Info()
	}
}

// sleepCtx sleeps d or until ctx ends; false when ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// lockedRand is a seeded source shared by goroutines.
type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func newRand(s uint64) *lockedRand {
	return &lockedRand{r: rand.New(rand.NewPCG(s, s^0x9e3779b97f4a7c15))}
}

func (l *lockedRand) IntN(n int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.IntN(n)
}

func (l *lockedRand) Float64() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.r.Float64()
}

func (l *lockedRand) Dur(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return lo + time.Duration(l.r.Int64N(int64(hi-lo)))
}

// ms renders a duration as float milliseconds for results files.
func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// latencyJSON is a lateness summary in ms.
type latencyJSON struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

func latJSON(l history.Lateness) latencyJSON {
	return latencyJSON{N: l.N, P50: ms(l.P50), P99: ms(l.P99), Max: ms(l.Max)}
}

// quantiles summarises raw durations.
func quantiles(xs []time.Duration) latencyJSON {
	if len(xs) == 0 {
		return latencyJSON{}
	}
	s := append([]time.Duration(nil), xs...)
	slices.Sort(s)
	at := func(q float64) time.Duration { return s[min(len(s)-1, int(q*float64(len(s))))] }
	return latencyJSON{N: len(s), P50: ms(at(0.5)), P99: ms(at(0.99)), Max: ms(s[len(s)-1])}
}

// deadIDs lists every dead letter of topic.
func deadIDs(ctx context.Context, t *testing.T, c *delayq.Client, topic string) map[string]*delayq.Message {
	t.Helper()
	out := map[string]*delayq.Message{}
	cursor := ""
	for {
		page, err := c.DeadList(ctx, topic, delayq.DeadListRequest{Limit: 1000, Cursor: cursor})
		if err != nil {
			t.Fatalf("dead list: %v", err)
		}
		for _, m := range page.Messages {
			if out[m.ID] != nil {
				t.Errorf("dead letter %s listed twice", m.ID)
			}
			out[m.ID] = m
		}
		if page.Next == "" {
			return out
		}
		cursor = page.Next
	}
}
