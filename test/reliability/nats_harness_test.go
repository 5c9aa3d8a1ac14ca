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

// startJetStream runs `nats-server -js` on a free loopback port with its
// store in a temporary directory, until the test ends; it answers the URL.
func startJetStream(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("nats-server")
	if err != nil {
		t.Skip("nats-server is not installed (apt-get install nats-server)")
	}
	port := redistest.FreePort(t)
	dir := t.TempDir()
	cmd := exec.Command(bin, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js"))
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
	url := "nats://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(30 * time.Second)
	for {
		if nc, err := nats.Connect(url); err == nil {
			_, err = nc.Request("$JS.API.INFO", nil, time.Second)
			nc.Close()
			if err == nil {
				return url
			}
		}
		select {
		case <-exited:
			t.Fatalf("nats-server exited during start-up:\n%s", out.String())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("nats-server did not get ready within 30s")
		}
	}
}

// createStream makes a file-stored stream capturing subject with a
// 2-minute duplicate window (longer than any redelivery of the test).
func createStream(t *testing.T, url, name, subject string) jetstream.Stream {
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
