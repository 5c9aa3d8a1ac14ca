package reliability

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// jetStreamServer is a `nats-server -js` on a free loopback port with its
// store in a temporary directory, restartable on both; killed when the
// test ends.
type jetStreamServer struct {
	t      *testing.T
	bin    string
	args   []string
	url    string
	cmd    *exec.Cmd
	exited chan struct{}
	out    *strings.Builder
}

// startJetStream starts a server and answers its URL.
func startJetStream(t *testing.T) string { return startJetStreamServer(t).url }

func startJetStreamServer(t *testing.T) *jetStreamServer {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("nats-server is not installed (apt-get install nats-server)")
	}
	port := redistest.FreePort(t)
	s := &jetStreamServer{t: t, bin: bin, url: "nats://127.0.0.1:" + strconv.Itoa(port),
		args: []string{"-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(t.TempDir(), "js")}}
	t.Cleanup(s.kill)
	s.start()
	return s
}

// start runs the server and waits until JetStream answers.
func (s *jetStreamServer) start() {
	s.t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	s.out = &strings.Builder{}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.cmd, s.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for {
		if nc, err := nats.Connect(s.url); err == nil {
			_, err = nc.Request("$JS.API.INFO", nil, time.Second)
			nc.Close()
			if err == nil {
				return
			}
		}
		select {
		case <-exited:
			s.t.Fatalf("nats-server exited during start-up:\n%s", s.out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("nats-server did not get ready within 30s")
		}
	}
}

// kill sends SIGKILL and waits for the exit.
func (s *jetStreamServer) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	<-s.exited
	s.cmd = nil
}

// connectJetStream opens a connection to url, closed when t ends.
func connectJetStream(t *testing.T, url string) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// createStream makes a file-stored stream capturing subject with a
// 2-minute duplicate window (longer than any redelivery of the test).
func createStream(t *testing.T, url, name, subject string) jetstream.Stream {
	t.Helper()
	js := connectJetStream(t, url)
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{Name: name, Subjects: []string{subject},
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// jetStreamEntries reads the whole stream: each message's Nats-Msg-Id and
// the time the stream stored it.
func jetStreamEntries(t *testing.T, st jetstream.Stream) []brokerEntry {
	t.Helper()
	ctx := context.Background()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Msgs) // #nosec G115 -- a test stream's message count
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]brokerEntry, 0, want)
	for len(out) < want {
		b, err := cons.Fetch(min(want-len(out), 1000), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			md, err := m.Metadata()
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, brokerEntry{id: m.Headers().Get(jetstream.MsgIDHeader), at: md.Timestamp})
			n++
		}
		if n == 0 {
			t.Fatalf("the stream holds %d messages, read %d", want, len(out))
		}
	}
	return out
}

// openStream connects anew and opens an existing stream.
func openStream(t *testing.T, url, name string) jetstream.Stream {
	t.Helper()
	js := connectJetStream(t, url)
	st, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
