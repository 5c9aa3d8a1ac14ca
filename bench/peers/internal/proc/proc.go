// Package proc starts and stops the peer servers (redis-server,
// beanstalkd) the benchmark runs on free loopback ports.
package proc

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FreePort returns a free loopback port.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Find returns the path of a binary: the first of paths that exists, or
// name on PATH; hint tells how to install it.
func Find(name, hint string, paths ...string) (string, error) {
	for _, p := range paths {
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%s not found: %s", name, hint)
}

// Process is a started server.
type Process struct {
	Name string
	Path string
	Args []string
	cmd  *exec.Cmd
	done chan struct{}
	log  *tailBuffer
}

// Start runs path with args and waits until ready answers nil (polled
// every 2 ms, up to timeout). It returns the time just before the exec.
func (p *Process) Start(ctx context.Context, ready func() error, timeout time.Duration) (time.Time, error) {
	cmd := exec.Command(p.Path, p.Args...) // #nosec G204 -- benchmark harness starting the peer server it was configured to measure
	p.log = &tailBuffer{}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	began := time.Now()
	if err := cmd.Start(); err != nil {
		return began, fmt.Errorf("start %s: %w", p.Path, err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(p.done) }()
	deadline := began.Add(timeout)
	for {
		err := ready()
		if err == nil {
			return began, nil
		}
		select {
		case <-p.done:
			return began, fmt.Errorf("%s exited at start: %s", p.Name, p.log.String())
		case <-ctx.Done():
			p.Stop()
			return began, ctx.Err()
		case <-time.After(2 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.Stop()
			return began, fmt.Errorf("%s not ready after %s: %v", p.Name, timeout, err)
		}
	}
}

// Pid is the process id (0 if not running).
func (p *Process) Pid() int {
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Stop sends SIGTERM and waits (SIGKILL after 30 s).
func (p *Process) Stop() {
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
}

// RSS reads VmRSS of the process from /proc, in bytes.
func (p *Process) RSS() (int64, error) {
	if p.cmd == nil {
		return 0, errors.New(p.Name + " is not running")
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, errors.New("no VmRSS line")
}

// tailBuffer keeps the last 4 KiB a process wrote, for error messages.
type tailBuffer struct {
	mu sync.Mutex
	b  []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.b))
}
