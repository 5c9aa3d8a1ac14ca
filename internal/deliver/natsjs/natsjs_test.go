package natsjs_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/deliver/delivertest"
	"github.com/delayq/delayq/internal/deliver/natsjs"
)

var srv *natsServer

func TestMain(m *testing.M) {
	var err error
	srv, err = startNATS(nil)
	if err != nil {
		// Fail, not skip: these tests are the only check of the target.
		fmt.Fprintf(os.Stderr, "natsjs tests need a nats-server with JetStream and could not start one: %v\n", err)
		os.Exit(1)
	}
	code := m.Run()
	srv.stop()
	os.Exit(code)
}

var seq atomic.Int64

// stream creates a file-backed stream capturing one fresh subject.
func stream(t testing.TB, s *natsServer, opts ...nats.Option) (jetstream.Stream, string) {
	t.Helper()
	nc, err := nats.Connect(s.url(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	n := seq.Add(1)
	subject := fmt.Sprintf("delayq.out.%d", n)
	st, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: fmt.Sprintf("S%d", n), Subjects: []string{subject},
		Storage: jetstream.FileStorage, Duplicates: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	return st, subject
}

func newTarget(t testing.TB, cfg natsjs.Config) *natsjs.Target {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = srv.url()
	}
	tg, err := natsjs.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tg.Close() })
	return tg
}

func batch(prefix string, n, size int) []deliver.Message {
	msgs := make([]deliver.Message, n)
	for i := range msgs {
		msgs[i] = deliver.Message{
			Topic:    "orders",
			ID:       fmt.Sprintf("%s-%d", prefix, i),
			Payload:  bytes.Repeat([]byte{byte('a' + i%26)}, size),
			Headers:  map[string]string{"Trace": fmt.Sprintf("t%d", i)},
			Attempt:  i%3 + 1,
			Priority: i % 5,
			DueAt:    time.Now(),
		}
	}
	return msgs
}

func mustPublish(t testing.TB, tg *natsjs.Target, msgs []deliver.Message) {
	t.Helper()
	for i, err := range tg.Publish(context.Background(), msgs) {
		if err != nil {
			t.Fatalf("message %d (%s): %v", i, msgs[i].ID, err)
		}
	}
}

// consume reads every message of st with an ordered consumer.
func consume(t *testing.T, st jetstream.Stream) []jetstream.Msg {
	t.Helper()
	ctx := context.Background()
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := int(info.State.Msgs)
	cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var got []jetstream.Msg
	for len(got) < want {
		b, err := cons.Fetch(want-len(got), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range b.Messages() {
			got = append(got, m)
			n++
		}
		if n == 0 {
			t.Fatalf("stream says %d messages, consumed %d", want, len(got))
		}
	}
	return got
}

func TestPublishConsume(t *testing.T) {
	st, subject := stream(t, srv)
	tg := newTarget(t, natsjs.Config{Subject: subject})
	msgs := batch("m", 50, 100)
	msgs[0].Payload = nil
	// A user's Nats-* header must not steer JetStream.
	msgs[1].Headers["Nats-Msg-Id"] = "m-0"
	mustPublish(t, tg, msgs)

	got := consume(t, st)
	if len(got) != len(msgs) {
		t.Fatalf("consumed %d messages, want %d", len(got), len(msgs))
	}
	byID := map[string]jetstream.Msg{}
	for _, m := range got {
		id := m.Headers().Get(jetstream.MsgIDHeader)
		if _, dup := byID[id]; dup {
			t.Fatalf("message %q stored twice", id)
		}
		byID[id] = m
	}
	for _, want := range msgs {
		m, ok := byID[want.ID]
		if !ok {
			t.Fatalf("message %q not stored", want.ID)
		}
		if !bytes.Equal(m.Data(), want.Payload) {
			t.Errorf("%s: data %q, want %q", want.ID, m.Data(), want.Payload)
		}
		h := m.Headers()
		if h.Get(natsjs.HeaderTopic) != "orders" || h.Get(natsjs.HeaderAttempt) != strconv.Itoa(want.Attempt) ||
			h.Get(natsjs.HeaderPriority) != strconv.Itoa(want.Priority) ||
			h.Get("Trace") != want.Headers["Trace"] || m.Subject() != subject {
			t.Errorf("%s: subject %q headers %v", want.ID, m.Subject(), h)
		}
	}
}

func TestPublishConcurrent(t *testing.T) {
	st, subject := stream(t, srv)
	tg := newTarget(t, natsjs.Config{Subject: subject})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; b < 5; b++ {
				for i, err := range tg.Publish(context.Background(), batch(fmt.Sprintf("g%d-b%d", g, b), 20, 10)) {
					if err != nil {
						t.Errorf("goroutine %d batch %d message %d: %v", g, b, i, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 4*5*20 {
		t.Fatalf("stream holds %d messages, want %d", info.State.Msgs, 4*5*20)
	}
}

func TestDuplicateWindowDropsRedelivery(t *testing.T) {
	st, subject := stream(t, srv)
	tg := newTarget(t, natsjs.Config{Subject: subject})
	msgs := batch("d", 10, 10)
	for i := range msgs {
		msgs[i].Attempt = 1
	}
	mustPublish(t, tg, msgs)
	// A redelivery (the runtime retrying after a lost confirm) is
	// acknowledged, and not stored again.
	again := batch("d", 10, 10)
	for i := range again {
		again[i].Attempt = 2
	}
	mustPublish(t, tg, again)
	// The same id twice within one batch too.
	mustPublish(t, tg, []deliver.Message{batch("x", 1, 5)[0], batch("x", 1, 5)[0]})

	got := consume(t, st)
	if len(got) != 11 {
		t.Fatalf("stream holds %d messages, want 11", len(got))
	}
	for _, m := range got {
		if m.Headers().Get(natsjs.HeaderAttempt) != "1" {
			t.Errorf("%s stored from attempt %s, want the first", m.Headers().Get(jetstream.MsgIDHeader), m.Headers().Get(natsjs.HeaderAttempt))
		}
	}
}

func TestSubjectWithoutStream(t *testing.T) {
	tg := newTarget(t, natsjs.Config{Subject: "nobody.stores.this"})
	errs := tg.Publish(context.Background(), batch("n", 5, 10))
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "no JetStream stream") ||
			!strings.Contains(err.Error(), "nobody.stores.this") || !strings.Contains(err.Error(), fmt.Sprintf("n-%d", i)) {
			t.Fatalf("message %d: err = %v, want one saying no stream captures the subject", i, err)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		cfg  natsjs.Config
		want string
	}{
		{natsjs.Config{Subject: "a"}, "url"},
		{natsjs.Config{URL: srv.url()}, "subject"},
		{natsjs.Config{URL: srv.url(), Subject: "a.*"}, "subject"},
		{natsjs.Config{URL: srv.url(), Subject: "a..b"}, "subject"},
		{natsjs.Config{URL: srv.url(), Subject: "a", Token: "t", User: "u"}, "token"},
		{natsjs.Config{URL: srv.url(), Subject: "a", Timeout: -1}, "timeout"},
		{natsjs.Config{URL: srv.url(), Subject: "a", TLS: &deliver.TLSConfig{CAPEM: "junk"}}, "ca_pem"},
	} {
		_, err := natsjs.New(context.Background(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v): err = %v, want one naming %q", tc.cfg, err, tc.want)
		}
	}
}

func TestCloseLeavesNoGoroutines(t *testing.T) {
	_, subject := stream(t, srv)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	tg, err := natsjs.New(context.Background(), natsjs.Config{URL: srv.url(), Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	mustPublish(t, tg, batch("leak", 5, 1))
	if err := tg.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestStreamAtLimitRefuses(t *testing.T) {
	nc, err := nats.Connect(srv.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	n := seq.Add(1)
	subject := fmt.Sprintf("delayq.full.%d", n)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: fmt.Sprintf("FULL%d", n), Subjects: []string{subject},
		MaxMsgs: 3, Discard: jetstream.DiscardNew,
	}); err != nil {
		t.Fatal(err)
	}
	tg := newTarget(t, natsjs.Config{Subject: subject})
	errs := tg.Publish(context.Background(), batch("f", 6, 1))
	for i, err := range errs {
		if i < 3 && err != nil {
			t.Errorf("message %d: %v, want stored (the stream has room)", i, err)
		}
		if i >= 3 && (err == nil || !strings.Contains(err.Error(), "maximum messages")) {
			t.Errorf("message %d: err = %v, want the stream's refusal", i, err)
		}
	}
}

func TestCloseThenPublishFails(t *testing.T) {
	_, subject := stream(t, srv)
	tg, err := natsjs.New(context.Background(), natsjs.Config{URL: srv.url(), Subject: subject})
	if err != nil {
		t.Fatal(err)
	}
	tg.Close()
	for _, err := range tg.Publish(context.Background(), batch("c", 2, 1)) {
		if !errors.Is(err, natsjs.ErrClosed) {
			t.Fatalf("err = %v, want ErrClosed", err)
		}
	}
}

func TestUserPassword(t *testing.T) {
	s, err := startNATS([]nats.Option{nats.UserInfo("delayq", "Pw-s3cret")}, "--user", "delayq", "--pass", "Pw-s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	st, subject := stream(t, s, nats.UserInfo("delayq", "Pw-s3cret"))
	tg := newTarget(t, natsjs.Config{URL: s.url(), Subject: subject, User: "delayq", Password: "Pw-s3cret"})
	mustPublish(t, tg, batch("a", 3, 3))
	if got := consume(t, st); len(got) != 3 {
		t.Fatalf("stored %d, want 3", len(got))
	}

	for _, cfg := range []natsjs.Config{
		{URL: s.url(), Subject: subject, User: "delayq", Password: "Wrong-pw1"},
		{URL: strings.Replace(s.url(), "nats://", "nats://delayq:Wrong-pw1@", 1), Subject: subject},
	} {
		_, err := natsjs.New(context.Background(), cfg)
		if err == nil || strings.Contains(err.Error(), "Wrong-pw1") {
			t.Fatalf("wrong password: err = %v, want an error without the password", err)
		}
		t.Log(err)
	}
}

func TestToken(t *testing.T) {
	s, err := startNATS([]nats.Option{nats.Token("Tok-s3cret")}, "--auth", "Tok-s3cret")
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	_, subject := stream(t, s, nats.Token("Tok-s3cret"))
	tg := newTarget(t, natsjs.Config{URL: s.url(), Subject: subject, Token: "Tok-s3cret"})
	mustPublish(t, tg, batch("t", 3, 3))
	_, err = natsjs.New(context.Background(), natsjs.Config{URL: s.url(), Subject: subject, Token: "Tok-wrong"})
	if err == nil || strings.Contains(err.Error(), "Tok-wrong") {
		t.Fatalf("wrong token: err = %v, want an error without the token", err)
	}
}

func TestTLS(t *testing.T) {
	dir := t.TempDir()
	caPEM, err := delivertest.WriteCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	caCfg, _ := (&deliver.TLSConfig{CAPEM: caPEM}).Config()
	s, err := startNATS([]nats.Option{nats.Secure(caCfg)},
		"--tls", "--tlscert", dir+"/cert.pem", "--tlskey", dir+"/key.pem")
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	st, subject := stream(t, s, nats.Secure(caCfg))
	url := fmt.Sprintf("tls://localhost:%d", s.port)
	for _, tc := range []struct {
		tls  *deliver.TLSConfig
		want string // "" for success, else part of New's error
	}{
		{&deliver.TLSConfig{CAPEM: caPEM}, ""},
		{&deliver.TLSConfig{InsecureSkipVerify: true}, ""},
		{nil, "certificate"},
		{&deliver.TLSConfig{CAPEM: caPEM, ServerName: "other.example"}, "other.example"},
	} {
		tg, err := natsjs.New(context.Background(), natsjs.Config{URL: url, Subject: subject, TLS: tc.tls, Timeout: 5 * time.Second})
		if tc.want != "" {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("TLS %+v: err = %v, want one containing %q", tc.tls, err, tc.want)
			}
			continue
		}
		if err != nil {
			t.Fatalf("TLS %+v: %v", tc.tls, err)
		}
		mustPublish(t, tg, batch(fmt.Sprintf("tls%d", seq.Add(1)), 1, 10))
		tg.Close()
	}
	if got := consume(t, st); len(got) != 2 {
		t.Fatalf("%d messages stored over TLS, want 2", len(got))
	}
}

// TestServerKilledMidBatch freezes the server so a batch stays
// unacknowledged, kills it, checks that the batch fails, restarts it on
// the same port and storage, and checks that the target publishes again.
func TestServerKilledMidBatch(t *testing.T) {
	s, err := startNATS(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	st, subject := stream(t, s)
	tg := newTarget(t, natsjs.Config{URL: s.url(), Subject: subject, Timeout: 5 * time.Second})
	mustPublish(t, tg, batch("warm", 1, 1))

	if err := s.freeze(); err != nil {
		t.Fatal(err)
	}
	msgs := batch("k", 20, 10)
	done := make(chan []error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		done <- tg.Publish(ctx, msgs)
	}()
	time.Sleep(500 * time.Millisecond) // let the batch reach the frozen server
	select {
	case errs := <-done:
		t.Fatalf("batch finished while the server was frozen: %v", errs)
	default:
	}
	s.kill()
	var errs []error
	select {
	case errs = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Publish did not return after the server was killed")
	}
	for i, err := range errs {
		if err == nil {
			t.Errorf("message %d acknowledged by a frozen server that was then killed", i)
		} else if i == 0 {
			t.Logf("message 0: %v", err)
		}
	}
	// While the server is down a batch fails at once.
	for _, err := range tg.Publish(context.Background(), msgs[:1]) {
		if err == nil {
			t.Fatal("publish to a dead server succeeded")
		} else if !strings.Contains(err.Error(), "not connected") {
			t.Fatalf("while down: err = %v, want one saying it is not connected", err)
		}
	}

	if err := s.boot(); err != nil {
		t.Fatal(err)
	}
	// The client reconnects by itself (its reconnect wait is 2s).
	deadline := time.Now().Add(30 * time.Second)
	for {
		errs := tg.Publish(context.Background(), msgs)
		if errors.Join(errs...) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no successful publish 30s after the restart: %v", errs[0])
		}
		time.Sleep(200 * time.Millisecond)
	}
	nc, err := nats.Connect(s.url())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	st, err = js.Stream(context.Background(), st.CachedInfo().Config.Name)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, m := range consume(t, st) {
		if strings.HasPrefix(m.Headers().Get(jetstream.MsgIDHeader), "k-") {
			got++
		}
	}
	if got != len(msgs) {
		t.Fatalf("after restart the stream holds %d of the batch, want %d", got, len(msgs))
	}
}

func BenchmarkPublish(b *testing.B) {
	nc, err := nats.Connect(srv.url())
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	name := fmt.Sprintf("BENCH%d", seq.Add(1))
	subject := "delayq.bench." + name
	// A bounded stream: old messages go, as in a consumed one.
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: name, Subjects: []string{subject}, Storage: jetstream.FileStorage, MaxMsgs: 10000,
	}); err != nil {
		b.Fatal(err)
	}
	tg := newTarget(b, natsjs.Config{Subject: subject})
	msgs := batch("b", 100, 1024)
	b.SetBytes(100 * 1024)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Fresh ids, or the duplicate window would skip the writes.
		for j := range msgs {
			msgs[j].ID = fmt.Sprintf("b-%d-%d", i, j)
		}
		for _, err := range tg.Publish(context.Background(), msgs) {
			if err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
}
