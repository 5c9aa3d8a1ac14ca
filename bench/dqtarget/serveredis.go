package dqtarget

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/bench"
)

// parseServeRedis reads "serve-redis[:OPT[:OPT]]": OPT is nopersist (a
// Redis with neither AOF nor snapshots, whatever --durable says) or the
// path of the delayq binary.
func parseServeRedis(spec string) (bin string, noPersist bool, err error) {
	rest, _ := strings.CutPrefix(spec, "serve-redis")
	if rest != "" && !strings.HasPrefix(rest, ":") {
		return "", false, fmt.Errorf("want serve-redis[:nopersist][:/path/to/delayq], not %q", spec)
	}
	for _, o := range strings.Split(strings.TrimPrefix(rest, ":"), ":") {
		switch {
		case o == "":
		case o == "nopersist":
			noPersist = true
		case strings.ContainsRune(o, '/'):
			bin = o
		default:
			return "", false, fmt.Errorf("serve-redis: unknown option %q (nopersist, or a path to delayq)", o)
		}
	}
	return bin, noPersist, nil
}

// openServeRedis starts a redis-server on a free loopback port, then
// `delayq serve --redis` on it. Durable: appendonly yes + appendfsync
// always (every write fsync'd before Redis answers); not durable or
// nopersist: no AOF, no snapshots.
func openServeRedis(ctx context.Context, bin string, noPersist bool, o bench.OpenOptions) (bench.Target, error) {
	bin, err := findDelayq(bin)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "delayq-bench-serve-redis-")
	if err != nil {
		return nil, err
	}
	rp, err := startRedis(ctx, dir, o.Durable && !noPersist)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	addr, err := FreePort()
	if err != nil {
		rp.stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	t := &serveTarget{bin: bin, addr: addr, dir: dir, redis: rp}
	t.Topic = topicName(o)
	if _, err := t.start(ctx); err != nil {
		rp.stop()
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c, err := httpClient("http://" + addr)
	if err != nil {
		_ = t.Close()
		return nil, err
	}
	t.setQueue(c)
	return t, nil
}

// redisProc is a redis-server the benchmark started.
type redisProc struct {
	addr string
	cmd  *exec.Cmd
	done chan struct{}
}

func startRedis(ctx context.Context, dir string, fsync bool) (*redisProc, error) {
	bin := "/usr/bin/redis-server"
	if _, err := os.Stat(bin); err != nil {
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, errors.New("redis-server not found (apt-get install redis-server)")
		}
	}
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	host, port, _ := net.SplitHostPort(addr)
	args := []string{"--bind", host, "--port", port, "--dir", dir, "--save", "", "--daemonize", "no", "--logfile", ""}
	if fsync {
		args = append(args, "--appendonly", "yes", "--appendfsync", "always")
	} else {
		args = append(args, "--appendonly", "no")
	}
	cmd := exec.Command(bin, args...) // #nosec G204 -- benchmark harness starting redis-server on a free loopback port
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	rp := &redisProc{addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(rp.done) }()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer rdb.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			return rp, nil
		}
		select {
		case <-rp.done:
			return nil, fmt.Errorf("redis-server on %s exited at start", addr)
		case <-ctx.Done():
			rp.stop()
			return nil, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			rp.stop()
			return nil, fmt.Errorf("redis-server on %s not ready: %v", addr, err)
		}
	}
}

func (r *redisProc) stop() {
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(20 * time.Second):
		_ = r.cmd.Process.Kill()
		<-r.done
	}
}
