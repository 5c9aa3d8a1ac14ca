package reliability

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// kfakeEnv, when set to "port:dir:topic", makes the test binary a Kafka
// broker (see runKfakeBroker) instead of running tests.
const kfakeEnv = "DELAYQ_TEST_KFAKE_BROKER"

// runKfakeBroker serves franz-go's kfake as a broker process of its own:
// one broker on the given port, state in dir (reloaded at start), every
// produce fsync'd before it is acknowledged (SyncWrites), the topic made
// with 3 partitions. No Kafka package exists on Debian, so this is what a
// kill -9 can hit; it speaks the Kafka protocol the target uses, and its
// storage says nothing of a real Kafka's speed. It returns when a
// SIGTERM or SIGINT arrives (SIGKILL is the test's point).
func runKfakeBroker(spec string) int {
	parts := strings.SplitN(spec, ":", 3)
	if len(parts) != 3 {
		fmt.Fprintf(os.Stderr, "%s=%q: want port:dir:topic\n", kfakeEnv, spec)
		return 2
	}
	port, err := strconv.Atoi(parts[0])
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: bad port: %v\n", kfakeEnv, err)
		return 2
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(port), kfake.DataDir(parts[1]), kfake.SyncWrites(),
		kfake.SeedTopics(3, parts[2]))
	if err != nil {
		fmt.Fprintln(os.Stderr, "kfake:", err)
		return 1
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	c.Close()
	return 0
}

// kafkaBroker is a kfake broker process (runKfakeBroker) on a free
// loopback port with its data in a temporary directory, restartable on
// both; killed when the test ends.
type kafkaBroker struct {
	t      *testing.T
	addr   string
	env    string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *strings.Builder
}

func startKafkaBroker(t *testing.T, topic string) *kafkaBroker {
	t.Helper()
	port := redistest.FreePort(t)
	b := &kafkaBroker{t: t, addr: "127.0.0.1:" + strconv.Itoa(port),
		env: kfakeEnv + "=" + strconv.Itoa(port) + ":" + t.TempDir() + ":" + topic}
	t.Cleanup(b.kill)
	b.start()
	return b
}

// start runs the broker and waits until it answers metadata.
func (b *kafkaBroker) start() {
	b.t.Helper()
	// This test binary, told by the environment to be the broker.
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), b.env)
	b.out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = b.out, b.out
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	b.cmd, b.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		if conn, err := net.DialTimeout("tcp", b.addr, time.Second); err == nil {
			_ = conn.Close()
			cl, err := kgo.NewClient(kgo.SeedBrokers(b.addr))
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				err = cl.Ping(ctx)
				cancel()
				cl.Close()
				if err == nil {
					return
				}
			}
		}
		select {
		case <-exited:
			b.t.Fatalf("the kfake broker exited during start-up:\n%s", b.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("the kfake broker did not get ready within 30s:\n%s", b.out.String())
		}
	}
}

// kill sends SIGKILL and waits for the exit.
func (b *kafkaBroker) kill() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
	b.cmd = nil
}

// kafkaEntries reads the whole topic from the start: each record's
// Delayq-Message-Id header and its timestamp, which the producer (delayq's
// target) set when it published, before the broker stored it.
func kafkaEntries(t *testing.T, addr, topic string, want int) []brokerEntry {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []brokerEntry
	// Read until want records arrived and nothing more came for a while
	// (duplicates come beyond want), or the time is up.
	deadline := time.Now().Add(60 * time.Second)
	for quiet := 0; time.Now().Before(deadline) && (len(out) < want || quiet < 3); {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			e := brokerEntry{at: r.Timestamp}
			for _, h := range r.Headers {
				if h.Key == "Delayq-Message-Id" {
					e.id = string(h.Value)
				}
			}
			out = append(out, e)
		})
		if n == 0 {
			quiet++
		} else {
			quiet = 0
		}
	}
	return out
}
