// Package redistest starts throw-away redis-server processes for tests:
// on free loopback ports, in a t.TempDir(), never the machine's shared
// 6379. Tests are skipped with a clear message when redis-server (or, for
// a cluster, redis-cli) is not installed; CI installs them.
//
//	srv := redistest.Start(t)                        // AOF on, appendfsync always
//	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
//	cl  := redistest.StartCluster(t, 3)              // 3 masters, no replicas
//	sn  := redistest.StartSentinel(t, "mymaster")    // master, replica, 3 Sentinels
//	srv := redistest.StartWithClock(t)               // srv.SetTime(ms) sets Redis TIME
//
// Servers are killed in t.Cleanup. A Server is safe for use by one test
// goroutine at a time.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
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

	env   []string // added to the process environment
	clock *os.File // StartWithClock's clock file, else nil

	mu     sync.Mutex
	cmd    *exec.Cmd     // nil while killed
	exited chan struct{} // closed when cmd has exited
	exit   error         // cmd.Wait's result, set before exited is closed
	gone   []string      // processes that exited without Kill, for the failure report
}

// Start runs redis-server on a free loopback port with
// --save "" --appendonly yes --appendfsync always; args are appended
// (a later directive overrides an earlier one).
func Start(t testing.TB, args ...string) *Server {
	t.Helper()
	return start(t, nil, nil, args)
}

func start(t testing.TB, env []string, clock *os.File, args []string) *Server {
	t.Helper()
	bin := lookPath(t, serverBin)
	dir := t.TempDir()
	port := FreePort(t)
	base := []string{
		"--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--dir", dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always",
		"--daemonize", "no", "--logfile", filepath.Join(dir, "redis.log"),
	}
	s := &Server{t: t, dir: dir, port: port, args: append(append([]string{bin}, base...), args...), env: env, clock: clock}
	s.start()
	t.Cleanup(s.Kill)
	t.Cleanup(s.report) // runs before Kill and before the TempDir holding the log is removed
	return s
}

// report, on a failed test, logs every process of s that exited without
// Kill and the tail of the server's log: a Redis that went away is then
// told apart from a client that could not reach a running one.
func (s *Server) report() {
	if !s.t.Failed() {
		return
	}
	s.mu.Lock()
	if s.cmd != nil {
		select {
		case <-s.exited:
			s.gone = append(s.gone, fmt.Sprintf("process %d: %v", s.cmd.Process.Pid, s.exit))
		default:
		}
	}
	gone := "none"
	if len(s.gone) > 0 {
		gone = strings.Join(s.gone, "; ")
	}
	s.mu.Unlock()
	s.t.Logf("redistest: redis-server on %s: processes that exited without Kill: %s; log tail:\n%s", s.Addr(), gone, tail(filepath.Join(s.dir, "redis.log")))
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
	select {
	case <-s.exited:
		s.gone = append(s.gone, fmt.Sprintf("process %d: %v", s.cmd.Process.Pid, s.exit))
	default:
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
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
	cmd := exec.Command(s.args[0], s.args[1:]...) // #nosec G204 -- test helper: redis-server from PATH with arguments built by Start/StartSentinel
	cmd.Dir = s.dir
	if s.env != nil {
		cmd.Env = append(os.Environ(), s.env...)
	}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("redistest: start %s: %v", s.args[0], err)
	}
	s.cmd = cmd
	s.exited = make(chan struct{})
	go func(exited chan struct{}) {
		err := cmd.Wait()
		s.exit = err
		close(exited)
	}(s.exited)
	if err := waitPing(s.Addr(), startTimeout); err != nil {
		_ = cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
		s.t.Fatalf("redistest: redis-server on %s did not start: %v\n%s", s.Addr(), err, tail(filepath.Join(s.dir, "redis.log")))
	}
	// The PONG must come from this process, not from another server that
	// took the port while this one was down for a restart.
	if pid, err := pidOf(s.Addr()); err != nil || pid != cmd.Process.Pid {
		_ = cmd.Process.Kill()
		<-s.exited
		s.cmd = nil
		s.t.Fatalf("redistest: %s answers as process %d (%v), not the redis-server just started (%d): the port was taken\n%s",
			s.Addr(), pid, err, cmd.Process.Pid, tail(filepath.Join(s.dir, "redis.log")))
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
	return startCluster(t, n, args, func(args []string) *Server { return Start(t, args...) })
}

func startCluster(t testing.TB, n int, args []string, startNode func(args []string) *Server) *Cluster {
	t.Helper()
	if n < 3 {
		t.Fatalf("redistest: a cluster needs at least 3 masters, got %d", n)
	}
	cli := lookPath(t, cliBin)
	c := &Cluster{}
	for range n {
		bus := FreePort(t)
		c.Nodes = append(c.Nodes, startNode(append([]string{
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-port", strconv.Itoa(bus), "--cluster-node-timeout", "2000",
		}, args...)))
	}
	create := append([]string{"--cluster", "create"}, c.Addrs()...)
	create = append(create, "--cluster-replicas", "0", "--cluster-yes")
	out, err := exec.Command(cli, create...).CombinedOutput() // #nosec G204 -- test helper: redis-cli from PATH joining the nodes it just started
	if err != nil {
		t.Fatalf("redistest: redis-cli --cluster create: %v\n%s", err, out)
	}
	c.WaitOK(t, 30*time.Second)
	return c
}

// WaitOK waits until every node reports cluster_state:ok and knows all
// the others — after a node was restarted or resumed, say — and fails
// the test after timeout.
func (c *Cluster) WaitOK(t testing.TB, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for _, node := range c.Nodes {
		for {
			info, err := command(node.Addr(), "CLUSTER", "INFO")
			if err == nil && strings.Contains(info, "cluster_state:ok") &&
				strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("redistest: cluster not ok: %v\n%s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
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
// Ports are drawn at random below Linux's ephemeral range (32768+), so
// no outgoing connection takes one while its server restarts, and never
// twice in one process: a server killed for a restart frees its port, and
// another test asking for a port must not get it in between.
const portLo, portHi = 20000, 32000

var (
	portsMu   sync.Mutex
	portsUsed = map[int]bool{}
)

// FreePort returns a loopback port that is free now, outside the ephemeral
// range and never handed out before in this process (see portLo).
func FreePort(t testing.TB) int {
	t.Helper()
	portsMu.Lock()
	defer portsMu.Unlock()
	for range 1000 {
		port := portLo + rand.IntN(portHi-portLo) // #nosec G404 -- a test port, not a secret
		if portsUsed[port] {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken by someone else
		}
		_ = l.Close()
		portsUsed[port] = true
		return port
	}
	t.Fatalf("redistest: no free port in %d-%d after 1000 tries", portLo, portHi)
	return 0
}

// pidOf asks the server on addr for its process id (INFO server).
func pidOf(addr string) (int, error) {
	info, err := command(addr, "INFO", "server")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("INFO server has no process_id")
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

// send dials addr and writes one command in RESP, with a 1 s deadline
// for the whole exchange; the caller reads the reply from r and closes
// conn.
func send(addr string, args ...string) (net.Conn, *bufio.Reader, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	return conn, bufio.NewReader(conn), nil
}

// command sends one command in RESP and reads a simple, error or bulk
// reply: enough for PING and CLUSTER INFO without a client dependency.
func command(addr string, args ...string) (string, error) {
	conn, r, err := send(addr, args...)
	if err != nil {
		return "", err
	}
	defer conn.Close()
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
	b, err := os.ReadFile(path) // #nosec G304 -- test helper: the log file of a server it started, in a t.TempDir()
	if err != nil {
		return ""
	}
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// Sentinel is a Redis master with one replica, watched by three Sentinels
// (quorum 2, down-after-milliseconds 1000, failover-timeout 5000).
type Sentinel struct {
	// Name is the monitored master's name.
	Name string
	// Master and Replica are the data servers as started; after a
	// failover their roles are swapped (ask MasterAddr).
	Master, Replica *Server
	// Sentinels are the three redis-server --sentinel processes.
	Sentinels []*Server
}

// StartSentinel starts a master, a replica of it (--replicaof) and three
// Sentinels monitoring it as name, all on free loopback ports; args are
// passed to both data servers (which, like Start's, run with
// appendonly yes and appendfsync always). It returns once the replica's
// link is up and every Sentinel reports the master ok with one replica
// and two other Sentinels, so a failover can start at once.
func StartSentinel(t testing.TB, name string, args ...string) *Sentinel {
	t.Helper()
	bin := lookPath(t, serverBin)
	s := &Sentinel{Name: name, Master: Start(t, args...)}
	s.Replica = Start(t, append([]string{"--replicaof", "127.0.0.1", strconv.Itoa(s.Master.port)}, args...)...)
	for range 3 {
		dir := t.TempDir()
		port := FreePort(t)
		conf := filepath.Join(dir, "sentinel.conf")
		text := fmt.Sprintf("port %d\nbind 127.0.0.1\ndaemonize no\ndir %s\nlogfile %s\n"+
			"sentinel monitor %s 127.0.0.1 %d 2\n"+
			"sentinel down-after-milliseconds %s 1000\n"+
			"sentinel failover-timeout %s 5000\n"+
			"sentinel parallel-syncs %s 1\n",
			port, dir, filepath.Join(dir, "redis.log"), name, s.Master.port, name, name, name)
		if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
			t.Fatalf("redistest: write %s: %v", conf, err)
		}
		sn := &Server{t: t, dir: dir, port: port, args: []string{bin, conf, "--sentinel"}}
		sn.start()
		t.Cleanup(sn.Kill)
		t.Cleanup(sn.report)
		s.Sentinels = append(s.Sentinels, sn)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var problem string
		if info, err := command(s.Replica.Addr(), "INFO", "replication"); err != nil || !strings.Contains(info, "master_link_status:up") {
			problem = fmt.Sprintf("replica link not up: %v %s", err, info)
		}
		for _, sn := range s.Sentinels {
			if problem != "" {
				break
			}
			info, err := command(sn.Addr(), "INFO", "sentinel")
			if err != nil || !strings.Contains(info, "name="+name+",status=ok,") ||
				!strings.Contains(info, ",slaves=1,") || !strings.Contains(info, ",sentinels=3") {
				problem = fmt.Sprintf("sentinel %s not ready: %v %s", sn.Addr(), err, info)
			}
		}
		if problem == "" {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("redistest: sentinel setup not ready after 30 s: %s", problem)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Addrs are the Sentinels' addresses.
func (s *Sentinel) Addrs() []string {
	out := make([]string, len(s.Sentinels))
	for i, n := range s.Sentinels {
		out[i] = n.Addr()
	}
	return out
}

// URL is "redis+sentinel://h:p,h:p,h:p/NAME/0", the form
// redisstore.Options.URL takes.
func (s *Sentinel) URL() string {
	return "redis+sentinel://" + strings.Join(s.Addrs(), ",") + "/" + s.Name + "/0"
}

// MasterAddr asks the Sentinels (the first that answers) for the
// current master: SENTINEL get-master-addr-by-name.
func (s *Sentinel) MasterAddr() (string, error) {
	var err error
	for _, sn := range s.Sentinels {
		var reply []string
		reply, err = commandStrings(sn.Addr(), "SENTINEL", "get-master-addr-by-name", s.Name)
		if err == nil && len(reply) == 2 {
			return net.JoinHostPort(reply[0], reply[1]), nil
		}
		if err == nil {
			err = fmt.Errorf("sentinel %s answered %q", sn.Addr(), reply)
		}
	}
	return "", err
}

// WaitFailover polls the Sentinels until they name a master other than
// old and that server reports role:master, and returns its address. It
// fails the test after timeout.
func (s *Sentinel) WaitFailover(old string, timeout time.Duration) string {
	s.Master.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		addr, err := s.MasterAddr()
		if err == nil && addr != old {
			info, ierr := command(addr, "INFO", "replication")
			if ierr == nil && strings.Contains(info, "role:master") {
				return addr
			}
		}
		if time.Now().After(deadline) {
			s.Master.t.Fatalf("redistest: no failover from %s within %v (sentinels say %q, %v)\n%s", old, timeout, addr, err,
				tail(filepath.Join(s.Sentinels[0].dir, "redis.log")))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Server returns the data server (Master or Replica) listening on addr,
// or nil.
func (s *Sentinel) Server(addr string) *Server {
	for _, srv := range []*Server{s.Master, s.Replica} {
		if srv.Addr() == addr {
			return srv
		}
	}
	return nil
}

// commandStrings sends one command and reads an array of bulk strings
// (nil elements as ""), or a null array as nil.
func commandStrings(addr string, args ...string) ([]string, error) {
	conn, r, err := send(addr, args...)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	readLine := func() (string, error) {
		line, err := r.ReadString('\n')
		return strings.TrimRight(line, "\r\n"), err
	}
	line, err := readLine()
	if err != nil {
		return nil, err
	}
	switch {
	case strings.HasPrefix(line, "-"):
		return nil, fmt.Errorf("%s", line[1:])
	case !strings.HasPrefix(line, "*"):
		return nil, fmt.Errorf("unexpected reply %q", line)
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return nil, fmt.Errorf("bad array header %q", line)
	}
	if n < 0 {
		return nil, nil
	}
	out := make([]string, 0, n)
	for range n {
		h, err := readLine()
		if err != nil {
			return nil, err
		}
		if !strings.HasPrefix(h, "$") {
			return nil, fmt.Errorf("unexpected element %q", h)
		}
		size, err := strconv.Atoi(h[1:])
		if err != nil {
			return nil, fmt.Errorf("bad bulk header %q", h)
		}
		if size < 0 {
			out = append(out, "")
			continue
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return nil, err
		}
		out = append(out, string(buf[:size]))
	}
	return out, nil
}

// Pause sends SIGSTOP: the process keeps its port and the kernel still
// accepts connections and buffers requests, but nothing is answered — a
// hung Redis. Resume undoes it; Kill works on a paused server too.
func (s *Server) Pause() { s.signal(syscall.SIGSTOP) }

// Resume sends SIGCONT to a paused server. Requests buffered meanwhile
// are then executed, those of clients that gave up included.
func (s *Server) Resume() { s.signal(syscall.SIGCONT) }

func (s *Server) signal(sig syscall.Signal) {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		s.t.Fatalf("redistest: signal %v: server on %s is not running", sig, s.Addr())
	}
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("redistest: signal %v to redis-server on %s: %v", sig, s.Addr(), err)
	}
}
