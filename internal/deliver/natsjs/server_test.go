package natsjs_test

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// natsServer is a nats-server with JetStream of its own, on a free
// loopback port, storing in a temporary directory.
type natsServer struct {
	dir  string
	port int
	args []string
	cmd  *exec.Cmd
	out  *bytes.Buffer
	// auth options the readiness check connects with
	opts []nats.Option
}

const natsBin = "/usr/sbin/nats-server"

// startNATS starts a server; extra are nats-server flags (--user, --auth).
func startNATS(opts []nats.Option, extra ...string) (*natsServer, error) {
	if _, err := exec.LookPath(natsBin); err != nil {
		return nil, fmt.Errorf("nats-server is not installed (apt-get install nats-server): %v", err)
	}
	dir, err := os.MkdirTemp("", "delayq-nats-")
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	s := &natsServer{dir: dir, port: port, opts: opts,
		args: append([]string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js")}, extra...)}
	return s, s.boot()
}

func (s *natsServer) boot() error {
	s.out = &bytes.Buffer{}
	cmd := exec.Command(natsBin, s.args...)
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start nats-server: %v", err)
	}
	s.cmd = cmd
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-exited:
			return fmt.Errorf("nats-server %v exited during start-up:\n%s", s.args, s.out)
		case <-time.After(50 * time.Millisecond):
		}
		nc, err := nats.Connect(s.url(), s.opts...)
		if err != nil {
			continue
		}
		// JetStream answers once it is up.
		_, err = nc.Request("$JS.API.INFO", nil, time.Second)
		nc.Close()
		if err == nil {
			return nil
		}
	}
	s.kill()
	return fmt.Errorf("nats-server did not get ready on port %d within 30s:\n%s", s.port, s.out)
}

func (s *natsServer) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", s.port) }

// freeze stops the server process (SIGSTOP) and waits until the kernel
// says it is stopped: the signal alone does not stop it at once.
func (s *natsServer) freeze() error {
	if err := s.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return err
	}
	stat := fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid)
	for i := 0; i < 200; i++ {
		b, err := os.ReadFile(stat)
		if err != nil {
			return err
		}
		// pid (comm) STATE ...
		if f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:])); len(f) > 0 && f[0] == "T" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("nats-server did not stop after SIGSTOP")
}

func (s *natsServer) kill() {
	s.cmd.Process.Kill()
	for i := 0; i < 100; i++ {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", s.port))
		if err != nil {
			return
		}
		c.Close()
		time.Sleep(50 * time.Millisecond)
	}
}

func (s *natsServer) stop() {
	s.kill()
	os.RemoveAll(s.dir)
}
