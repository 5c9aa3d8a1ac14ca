package rabbitmq_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/delayq/delayq/internal/deliver/delivertest"
)

// rabbitServer is a RabbitMQ node of its own, on free loopback ports,
// with every file in a temporary directory. The Debian rabbitmq-server
// script is run directly (not the wrapper, which switches to the rabbitmq
// user and the system's data directory).
type rabbitServer struct {
	dir     string
	port    int
	tlsPort int
	caPEM   string
	node    string
	env     []string
	cmd     *exec.Cmd
	log     string
}

const rabbitBin = "/usr/lib/rabbitmq/bin"

func startRabbit() (*rabbitServer, error) {
	if _, err := os.Stat(filepath.Join(rabbitBin, "rabbitmq-server")); err != nil {
		return nil, fmt.Errorf("rabbitmq-server is not installed (apt-get install rabbitmq-server): %v", err)
	}
	dir, err := os.MkdirTemp("", "delayq-rabbit-")
	if err != nil {
		return nil, err
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	s := &rabbitServer{dir: dir, port: ports[0], tlsPort: ports[2],
		node: fmt.Sprintf("delayqtest%d@localhost", os.Getpid()), log: filepath.Join(dir, "out.log")}
	home := filepath.Join(dir, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	// The Erlang cookie lets rabbitmqctl (run by the tests) talk to the node.
	if err := os.WriteFile(filepath.Join(home, ".erlang.cookie"), []byte("DELAYQTESTCOOKIE"), 0o400); err != nil {
		return nil, err
	}
	if s.caPEM, err = delivertest.WriteCerts(dir); err != nil {
		return nil, err
	}
	conf := fmt.Sprintf(`listeners.tcp.1 = 127.0.0.1:%d
listeners.ssl.1 = 127.0.0.1:%d
ssl_options.cacertfile = %s
ssl_options.certfile = %s
ssl_options.keyfile = %s
ssl_options.verify = verify_none
ssl_options.fail_if_no_peer_cert = false
`, s.port, s.tlsPort, filepath.Join(dir, "ca.pem"), filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem"))
	if err := os.WriteFile(filepath.Join(dir, "rabbitmq.conf"), []byte(conf), 0o600); err != nil {
		return nil, err
	}
	s.env = append(os.Environ(),
		"HOME="+home,
		"RABBITMQ_NODENAME="+s.node,
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		"RABBITMQ_NODE_PORT="+strconv.Itoa(s.port),
		"RABBITMQ_DIST_PORT="+strconv.Itoa(ports[1]),
		"RABBITMQ_CONFIG_FILE="+filepath.Join(dir, "rabbitmq.conf"),
		"RABBITMQ_ADVANCED_CONFIG_FILE="+filepath.Join(dir, "advanced.config"),
		"RABBITMQ_ENABLED_PLUGINS_FILE="+filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_MNESIA_BASE="+filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE="+filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE="+filepath.Join(dir, "pid"),
	)
	return s, s.boot()
}

// boot starts the node (again, after kill, on the same ports and data)
// and waits until it accepts AMQP connections.
func (s *rabbitServer) boot() error {
	out, err := os.OpenFile(s.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmq-server"))
	cmd.Dir = s.dir
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group, so the script, beam and its helpers are
	// killed together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start rabbitmq-server: %v", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(120 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("rabbitmq-server exited during boot; its output:\n%s", s.tail())
		case <-time.After(500 * time.Millisecond):
		}
		if c, err := amqp.Dial(s.url()); err == nil {
			c.Close()
			return nil
		}
	}
	s.kill()
	return fmt.Errorf("rabbitmq-server did not accept connections on port %d within 120s; its output:\n%s", s.port, s.tail())
}

func (s *rabbitServer) url() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", s.port) }

// kill ends the whole node at once, like a crash.
func (s *rabbitServer) kill() {
	if s.cmd != nil {
		syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		// The listener goes away with beam; wait for it.
		for i := 0; i < 100; i++ {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
			if err != nil {
				break
			}
			c.Close()
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (s *rabbitServer) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}

// ctl runs rabbitmqctl against the node.
func (s *rabbitServer) ctl(args ...string) error {
	cmd := exec.Command(filepath.Join(rabbitBin, "rabbitmqctl"), append([]string{"-n", s.node}, args...)...)
	cmd.Dir = s.dir
	cmd.Env = s.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("rabbitmqctl %v: %v\n%s", args, err, out)
	}
	return nil
}

func (s *rabbitServer) tail() string {
	b, _ := os.ReadFile(s.log)
	if i := len(b) - 4000; i > 0 {
		b = b[i:]
	}
	return string(bytes.TrimSpace(b))
}

func freePorts(n int) ([]int, error) {
	var ports []int
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
