package dqtarget

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/bench"
)

// httpClient returns a client tuned for a benchmark: enough idle
// connections for every sender and consumer, no client-side retries (a
// failure must show, not be papered over).
func httpClient(base string) (*delayq.Client, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	return delayq.NewClient(base, delayq.WithHTTPClient(&http.Client{Transport: tr}), delayq.WithRetry(0, 0))
}

type httpTarget struct {
	QueueTarget
	base string
}

func (t *httpTarget) baseURL() string { return t.base }

func openHTTP(_ context.Context, base string, o bench.OpenOptions) (bench.Target, error) {
	if !o.Durable {
		return nil, errors.New("a running server's durability is its own setting: run with --durable (default)")
	}
	c, err := httpClient(base)
	if err != nil {
		return nil, err
	}
	t := &httpTarget{base: base}
	t.Topic = topicName(o)
	t.setQueue(c)
	return t, nil
}

func (t *httpTarget) Close() error { return nil }

// serveTarget runs `delayq serve` as a subprocess on a free loopback port
// with a temp data directory, on the embedded engine or (redis set) on a
// redis-server it started too.
type serveTarget struct {
	QueueTarget
	bin   string
	addr  string
	dir   string
	cmd   *exec.Cmd
	done  chan struct{}
	redis *redisProc // nil: embedded engine (or engineArgs)
	// engineArgs, when set, replace --data: the SQL engines' flags.
	engineArgs []string
	// engineName is what ServerCPU and RSS say the server runs on.
	engineName string
}

// findDelayq locates the delayq binary: the explicit path, $DELAYQ_BIN,
// this executable if it is delayq, or delayq on $PATH.
func findDelayq(bin string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	if b := os.Getenv("DELAYQ_BIN"); b != "" {
		return b, nil
	}
	if exe, err := os.Executable(); err == nil && filepath.Base(exe) == "delayq" {
		return exe, nil
	}
	if p, err := exec.LookPath("delayq"); err == nil {
		return p, nil
	}
	return "", errors.New("delayq binary not found: give serve:/path/to/delayq, set DELAYQ_BIN, or put delayq on PATH (go build -o /tmp/delayq ./cmd/delayq)")
}

// FreePort returns a free loopback TCP address.
func FreePort() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func openServe(ctx context.Context, bin string, o bench.OpenOptions) (bench.Target, error) {
	if !o.Durable {
		return nil, errors.New("delayq serve is always durable: run with --durable (default)")
	}
	bin, err := findDelayq(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-bench-serve-")
	if err != nil {
		return nil, err
	}
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	t := &serveTarget{bin: bin, addr: addr, dir: dir}
	t.Topic = topicName(o)
	if _, err := t.start(ctx); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c, err := httpClient("http://" + addr)
	if err != nil {
		return nil, err
	}
	t.setQueue(c)
	return t, nil
}

func (t *serveTarget) baseURL() string { return "http://" + t.addr }

func (t *serveTarget) start(ctx context.Context) (time.Time, error) {
	args := []string{"serve", "--addr", t.addr, "--data", t.dir}
	if t.redis != nil {
		args = []string{"serve", "--addr", t.addr, "--redis", "redis://" + t.redis.addr + "/0"}
	}
	if t.engineArgs != nil {
		args = append([]string{"serve", "--addr", t.addr}, t.engineArgs...)
	}
	cmd := exec.Command(t.bin, args...) // #nosec G204 -- benchmark harness starting the delayq binary it was told to measure
	cmd.Stdout, cmd.Stderr = nil, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return began, fmt.Errorf("start %s serve: %w", t.bin, err)
	}
	t.cmd, t.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(t.done) }()
	if err := WaitHTTP(ctx, "http://"+t.addr+"/readyz", t.done, 60*time.Second); err != nil {
		t.stop()
		return began, err
	}
	return began, nil
}

// WaitHTTP polls url until it answers 200, the process ends (exited) or
// the timeout passes.
func WaitHTTP(ctx context.Context, url string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get(url) // #nosec G107 -- benchmark readiness probe of the server it started itself
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-exited:
			return fmt.Errorf("server exited before %s answered", url)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s", url, timeout)
		}
	}
}

func (t *serveTarget) stop() {
	if t.cmd == nil {
		return
	}
	_ = t.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-t.done:
	case <-time.After(20 * time.Second):
		_ = t.cmd.Process.Kill()
		<-t.done
	}
	t.cmd = nil
}

func (t *serveTarget) Close() error {
	t.stop()
	if t.redis != nil {
		t.redis.stop()
	}
	return os.RemoveAll(t.dir)
}

// ServerCPU implements bench.CPUReporter: the delayq serve process, and
// the redis-server under it if the benchmark started one.
func (t *serveTarget) ServerCPU() (time.Duration, string, error) {
	if t.cmd == nil {
		return 0, "", errors.New("delayq serve is not running")
	}
	cpu, err := bench.ProcCPU(t.cmd.Process.Pid)
	if t.engineName != "" {
		return cpu, "delayq serve only (" + t.engineName + " is a shared server the benchmark did not start)", err
	}
	if err != nil || t.redis == nil {
		return cpu, "delayq serve", err
	}
	rc, err := bench.ProcCPU(t.redis.cmd.Process.Pid)
	return cpu + rc, "delayq serve + redis-server", err
}

// RSS implements bench.MemReporter (the delayq process only).
func (t *serveTarget) RSS() (int64, string, error) {
	rss, err := ProcRSS(t.cmd.Process.Pid)
	return rss, "VmRSS of the delayq serve process", err
}

// Restart implements bench.Restarter: SIGTERM, wait, start again; the
// time returned is just before the exec.
func (t *serveTarget) Restart(ctx context.Context) (time.Time, error) {
	t.stop()
	return t.start(ctx)
}
