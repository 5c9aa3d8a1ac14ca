// Package redistest starts throw-away redis-server processes for tests:
// on free loopback ports, in a t.TempDir(), never the machine's shared
// 6379. Tests are skipped with a clear message when redis-server (or, for
// a cluster, redis-cli) is not installed; CI installs them.
//
//	srv := redistest.Start(t)                        // AOF on, appendfsync always
//	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
//	cl  := redistest.StartCluster(t, 3)              // 3 masters, no replicas
//
// Servers are killed in t.Cleanup. A Server is safe for use by one test
// goroutine at a time.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// startTimeout bounds how long a server may take to answer PING.
const startTimeout = 15 * time.Second

// Binaries, looked up in PATH.
var (
	serverBin = "redis-server"
	cliBin    = "redis-cli"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	dir  string
	port int
	args []string

	mu  sync.Mutex
	cmd *exec.Cmd // nil while killed
}

// Start runs redis-server on a free loopback port with
// --save "" --appendonly yes --appendfsync always; args are appended
// (a later directive overrides an earlier one).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	bin := lookPath(t, serverBin)
	dir := t.TempDir()
	port := freePort(t)
	base := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"),
	}
	s := &Server{t: t, dir: dir, port: port, args: append(append([]string{bin}, base...), args...)}
	s.start()
	t.Cleanup(s.Kill)
	return s
}

// Addr is "127.0.0.1:port".
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.port) }

// URL is "redis://127.0.0.1:port/0".
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Dir is the server's data directory.
func (s *Server) Dir() string { return s.dir }

// Kill sends SIGKILL and waits for the process to exit: no shutdown
// save, no flush beyond what appendfsync already did. Idempotent.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	_ = s.cmd.Wait()
	s.cmd = nil
}

// Restart kills the server if it runs and starts it again on the same
// port and directory, so it reloads its AOF.
func (s *Server) Restart() {
	s.t.Helper()
	s.Kill()
	s.start()
}

func (s *Server) start() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd := exec.Command(s.args[0], s.args[1:]...)
	cmd.Dir = s.dir
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.args[0], err)
	}
	s.cmd = cmd
	if err := waitPing(s.Addr(), startTimeout); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		s.cmd = nil
		s.t.Fatalf("redistest: redis-server on %s did not start: %v\n%s", s.Addr(), err, tail(filepath.Join(s.dir, "redis.log")))
	}
}

// Cluster is a Redis Cluster of masters without replicas.
type Cluster struct {
	Nodes []*Server
}

// Addrs are the nodes' addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Nodes))
	for i, n := range c.Nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL is "redis+cluster://host:port,host:port,…", the form
// redisstore.Options.URL takes.
func (c *Cluster) URL() string { return "redis+cluster://" + strings.Join(c.Addrs(), ",") }

// StartCluster starts n (>= 3) cluster-enabled servers, joins them with
// redis-cli --cluster create (no replicas) and waits until every node
// reports cluster_state:ok.
func StartCluster(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	cli := lookPath(t, cliBin)
	c := &Cluster{}
	for range n {
		bus := freePort(t)
		c.Nodes = append(c.Nodes, Start(t, append([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "2000",
		}, args...)...))
	}
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, create...).CombinedOutput()
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	deadline := time.Now().Add(30 * time.Second)
	for _, node := range c.Nodes {
		for {
			info, err := command(node.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(n)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok: %v\n%s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

func lookPath(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("redistest: %s not found in PATH (apt-get install redis-server); skipping Redis tests", name)
	}
	return p
}

// freePort asks the kernel for a free loopback port. Another process may
// take it before the server binds it; start then fails loudly.
func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPing(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		var reply string
		reply, err = command(addr, "PING")
		if err == nil && reply == "PONG" {
			return nil
		}
		if err == nil {
			err = fmt.Errorf("PING answered %q", reply)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// command sends one command in RESP and reads a simple, error or bulk
// reply: enough for PING and CLUSTER INFO without a client dependency.
func command(addr string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(conn)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "+"):
		return line[1:], nil
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("%s", line[1:])
	case strings.HasPrefix(line, "$"):
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", fmt.Errorf("bad bulk header %q", line)
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	default:
		return "", fmt.Errorf("unexpected reply %q", line)
	}
}

func tail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
