package reliability

import (
	"fmt"
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

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// rabbitBin holds the Debian package's scripts; rabbitmq-server there is
// run directly (not the wrapper, which switches to the rabbitmq user and
// the system's data directory).
const rabbitBin = "/usr/lib/rabbitmq/bin"

// rabbitServer is a RabbitMQ node of its own on free loopback ports with
// every file in a temporary directory, restartable on both; killed when
// the test ends.
type rabbitServer struct {
	t    *testing.T
	dir  string
	port int
	env  []string
	cmd  *exec.Cmd
	log  string
}

func startRabbitServer(t *testing.T) *rabbitServer {
	t.Helper()
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		t.Skip("rabbitmq-server is not installed (apt-get install rabbitmq-server)")
	}
	dir := t.TempDir()
	s := &rabbitServer{t: t, dir: dir, port: redistest.FreePort(t), log: filepath.Join(dir, "out.log")}
	distPort := redistest.FreePort(t)
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte("DELAYQRELIABILITY"), 0o400); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf("listeners.tcp.1 = 127.0.0.1:%d\n", s.port)
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s.env = append(os.Environ(),
		"HOME="+home,
		fmt.Sprintf("RABBITMQ_NODENAME=delayqrel%d@localhost", os.Getpid()),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(s.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(distPort),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
	)
	t.Cleanup(s.kill)
	s.start()
	return s
}

func (s *rabbitServer) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", s.port) }

// start boots the node (again after a kill, on the same port and data)
// and waits until it accepts AMQP connections.
func (s *rabbitServer) start() {
	s.t.Helper()
	out, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		s.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Dir, cmd.Env = s.dir, s.env
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: the script, beam and its helper processes die
	// together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd = cmd
	deadline := time.Now().Add(180 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			s.t.Fatalf("rabbitmq-server exited during boot:\n%s", s.tail())
		case <-time.After(250 * time.Millisecond):
		}
		if c, err := amqp.Dial(s.url()); err == nil {
			_ = c.Close()
			return
		}
	}
	s.t.Fatalf("rabbitmq-server did not accept connections within 180s:\n%s", s.tail())
}

// kill ends the whole node with SIGKILL, like a crash, and waits until
// its port is free.
func (s *rabbitServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	s.cmd = nil
	for range 100 {
		c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(s.port))
		if err != nil {
			return
		}
		_ = c.Close()
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *rabbitServer) tail() string {
	b, _ := os.ReadFile(s.log)
	if i := len(b) - 4000; i > 0 {
		b = b[i:]
	}
	return strings.TrimSpace(string(b))
}

// rabbitConsumer consumes a durable queue for the whole test, through
// broker kills: it dials again and re-declares the queue (idempotent)
// until stopped. Each delivery is recorded with its receive time before
// it is acked, so a delivery cut off by a kill comes again.
type rabbitConsumer struct {
	url, queue string
	stop       chan struct{}
	done       chan struct{}

	mu      sync.Mutex
	entries []brokerEntry
	seen    map[string]bool
}

func consumeRabbit(url, queue string) *rabbitConsumer {
	c := &rabbitConsumer{url: url, queue: queue, stop: make(chan struct{}), done: make(chan struct{}), seen: map[string]bool{}}
	go c.run()
	return c
}

func (c *rabbitConsumer) run() {
	defer close(c.done)
	for {
		c.session()
		select {
		case <-c.stop:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// session consumes over one connection until it fails or stop.
func (c *rabbitConsumer) session() {
	conn, err := amqp.Dial(c.url)
	if err != nil {
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return
	}
	// A queue declared just before a kill -9 may not have reached
	// Mnesia's disk log yet (seen on 3.10): declare it on every connect.
	if _, err := ch.QueueDeclare(c.queue, true, false, false, false, nil); err != nil {
		return
	}
	if err := ch.Qos(256, 0, false); err != nil {
		return
	}
	ds, err := ch.Consume(c.queue, "", false, false, false, false, nil)
	if err != nil {
		return
	}
	for {
		select {
		case <-c.stop:
			return
		case d, ok := <-ds:
			if !ok {
				return
			}
			c.record(d)
			_ = d.Ack(false)
		}
	}
}

// record keeps a delivery as a broker entry unless it is the broker
// handing back one this consumer already saw (redelivered after a lost
// connection): only a second publish counts as a duplicate.
func (c *rabbitConsumer) record(d amqp.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d.Redelivered && c.seen[d.MessageId] {
		return
	}
	c.seen[d.MessageId] = true
	c.entries = append(c.entries, brokerEntry{id: d.MessageId, at: time.Now()})
}

// count answers how many distinct message ids arrived so far.
func (c *rabbitConsumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.seen)
}

// close stops consuming and answers every entry recorded.
func (c *rabbitConsumer) close() []brokerEntry {
	close(c.stop)
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.entries
}
