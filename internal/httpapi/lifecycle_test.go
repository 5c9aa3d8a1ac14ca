package httpapi

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"

	"github.com/delayq/delayq/internal/metrics"
	"github.com/delayq/delayq/internal/wire"
)

// failsafe bounds waits on events that must happen, so a bug fails the
// test instead of hanging it. It is not a timing assertion.
const failsafe = 20 * time.Second

func TestLongPollReturnsWhenDue(t *testing.T) {
	b := setup(t, nil)
	b.spy.leaseEntered = make(chan struct{}, 1)
	got := make(chan resp, 1)
	go func() { got <- b.do(t, "POST", "/v1/topics/t/lease", `{"wait":"30s"}`) }()
	<-b.spy.leaseEntered
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"soon","payload":"x","delay":"200ms"}`), 201)
	select {
	case r := <-got:
		want(t, r, 200)
		if ms := into[wire.MessagesResponse](t, r).Messages; len(ms) != 1 || ms[0].ID != "soon" {
			t.Fatalf("long-poll answered %s", r.raw)
		}
	case <-time.After(failsafe):
		t.Fatal("the long-poll never answered")
	}
}

func TestLongPollEmptyAfterWait(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "POST", "/v1/topics/t/lease", `{"wait":"50ms","max":5}`)
	want(t, r, 200)
	if string(r.raw) != "{\"messages\":[]}\n" {
		t.Fatalf("empty long-poll answered %q", r.raw)
	}
}

// TestLongPollClientDisconnect: cancelling the client's request ends the
// engine's wait (the request context), leaking no goroutine (goleak).
func TestLongPollClientDisconnect(t *testing.T) {
	b := setup(t, nil)
	b.spy.leaseEntered = make(chan struct{}, 1)
	b.spy.leaseDone = make(chan error, 1)
	ctx, cancel := context.WithCancel(context.Background())
	clientErr := b.leaseCancellable(ctx, `{"wait":"30s"}`)
	<-b.spy.leaseEntered
	cancel()
	select {
	case err := <-b.spy.leaseDone:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("lease ended with %v, want context.Canceled", err)
		}
	case <-time.After(failsafe):
		t.Fatal("the disconnect did not end the long-poll")
	}
	if err := <-clientErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
}

// TestLeaseGivenBackWhenClientGone: a client that hangs up while its
// long-poll is leasing a message never gets the answer; the server gives
// the lease back at once (a failed delivery, as the lease's expiry would
// count), so the next consumer takes the message now, not after the 30 s
// lease. Before, the message stayed leased to nobody until then.
func TestLeaseGivenBackWhenClientGone(t *testing.T) {
	b := setup(t, nil)
	want(t, b.do(t, "PUT", "/v1/topics/t", `{"lease":"30s"}`), 200)
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"m","payload":"x","delay":"300ms"}`), 201)
	b.spy.leaseHeld = make(chan struct{}, 1)
	b.spy.holdLease.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	clientErr := b.leaseCancellable(ctx, `{"wait":"10s"}`)
	select {
	case <-b.spy.leaseHeld:
	case <-time.After(failsafe):
		t.Fatal("the long-poll never leased the message")
	}
	cancel()
	if err := <-clientErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("client: %v", err)
	}
	r := b.do(t, "POST", "/v1/topics/t/lease", `{"wait":"5s"}`)
	want(t, r, 200)
	ms := into[wire.MessagesResponse](t, r).Messages
	if len(ms) != 1 || ms[0].ID != "m" {
		t.Fatalf("the next consumer got %s, want m at once", r.raw)
	}
	if m := ms[0]; m.Attempt != 2 || m.Failures != 1 || m.LastError != undeliveredReason {
		t.Errorf("given back as attempt %d, failures %d, last error %q; want 2, 1, %q", m.Attempt, m.Failures, m.LastError, undeliveredReason)
	}
}

// leaseCancellable long-polls topic t with body on a request that ctx
// cancels (a client hanging up), outside the API document's checks; the
// channel gets the client's error.
func (b *bundle) leaseCancellable(ctx context.Context, body string) chan error {
	clientErr := make(chan error, 1)
	req, err := http.NewRequestWithContext(ctx, "POST", b.ts.URL+"/v1/topics/t/lease", strings.NewReader(body))
	if err != nil {
		clientErr <- err
		return clientErr
	}
	req.Header.Set("Content-Type", "application/json")
	go func() {
		res, err := b.ts.Client().Do(req)
		if err == nil {
			res.Body.Close()
		}
		clientErr <- err
	}()
	return clientErr
}

// TestGracefulShutdown: when Serve's ctx ends, a long-poll answers at once
// with an empty list, an in-flight send still finishes, and Serve returns
// nil only after it did.
func TestGracefulShutdown(t *testing.T) {
	b := setup(t, nil)
	b.spy.sendGate = make(chan struct{})
	b.spy.sendEntered = make(chan struct{})
	b.spy.leaseEntered = make(chan struct{}, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.srv.Serve(ctx, ln) }()
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	base := "http://" + ln.Addr().String()
	post := func(path, body string) chan resp {
		ch := make(chan resp, 1)
		go func() {
			res, err := client.Post(base+path, "application/json", strings.NewReader(body))
			if err != nil {
				ch <- resp{status: -1, raw: []byte(err.Error())}
				return
			}
			raw, _ := io.ReadAll(res.Body)
			res.Body.Close()
			ch <- resp{status: res.StatusCode, raw: raw}
		}()
		return ch
	}
	sent := post("/v1/topics/t/messages", `{"id":"inflight","payload":"x"}`)
	<-b.spy.sendEntered
	polled := post("/v1/topics/t/lease", `{"wait":"30s"}`)
	<-b.spy.leaseEntered

	stop()
	select {
	case r := <-polled:
		if r.status != 200 || string(r.raw) != "{\"messages\":[]}\n" {
			t.Fatalf("long-poll during shutdown: %d %s", r.status, r.raw)
		}
	case <-time.After(failsafe):
		t.Fatal("shutdown did not end the long-poll")
	}
	select {
	case err := <-served:
		t.Fatalf("Serve returned (%v) with a request in flight", err)
	default:
	}
	if !b.srv.Draining() {
		t.Fatal("not draining after ctx ended")
	}
	close(b.spy.sendGate)
	if r := <-sent; r.status != 201 {
		t.Fatalf("in-flight send: %d %s", r.status, r.raw)
	}
	if err := <-served; err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if _, err := b.eng.Get(context.Background(), "t", "inflight"); err != nil {
		t.Fatalf("the in-flight send was not stored: %v", err)
	}
	if _, err := net.Dial("tcp", ln.Addr().String()); err == nil {
		t.Fatal("the listener still accepts after shutdown")
	}
}

// TestLongPollOutlivesReadTimeout: a read deadline (ReadTimeout, from the
// request's start) must not end a long-poll's context as if its client
// had gone — net/http lifts it once the body is read, and nothing here
// may set one again: the long-poll waits its whole wait, gets the message
// that comes due, and keeps its lease. A lease whose client went away is
// given back, so a deadline taken for a hang-up would hand the message to
// two consumers.
func TestLongPollOutlivesReadTimeout(t *testing.T) {
	b := setup(t, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	base := "http://" + serveOn(t, b)
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Post(base+"/v1/topics/t/messages", "application/json", strings.NewReader(`{"id":"m","payload":"x","delay":"1s"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != 201 {
		t.Fatalf("send: %d", res.StatusCode)
	}
	res, err = client.Post(base+"/v1/topics/t/lease", "application/json", strings.NewReader(`{"wait":"10s"}`))
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var got wire.MessagesResponse
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Messages) != 1 || got.Messages[0].ID != "m" {
		t.Fatalf("a long-poll outliving the read timeout answered %d %s, want m", res.StatusCode, raw)
	}
	m, err := b.eng.Get(context.Background(), "t", "m")
	if err != nil || m.State != domain.StateInflight || m.Failures != 0 || m.Receipt != got.Messages[0].Receipt {
		t.Fatalf("after the answer: %+v, %v; want still leased with the answered receipt", m, err)
	}
}

// TestSlowBodyTimesOut408: a body still arriving when the read timeout
// passes is answered 408 (request_timeout), which clients retry: the
// request was not carried out. A 400 said the request itself was wrong,
// and a producer that trusts it drops the message. Nothing is stored, and
// the connection, whose body was not read to its end, is closed.
func TestSlowBodyTimesOut408(t *testing.T) {
	b := setup(t, func(c *Config) { c.ReadTimeout = 300 * time.Millisecond })
	conn, err := net.Dial("tcp", serveOn(t, b))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	part := `{"id":"m","payload":"x"`
	if _, err := io.WriteString(conn, "POST /v1/topics/t/messages HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n"+part); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	start := time.Now()
	res, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer to a body that stopped arriving: %v", err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var eb wire.ErrorResponse
	if err := json.Unmarshal(raw, &eb); err != nil || res.StatusCode != http.StatusRequestTimeout || eb.Error.Code != wire.CodeTimeout {
		t.Fatalf("a body that stopped arriving: %d %s, want 408 %s", res.StatusCode, raw, wire.CodeTimeout)
	}
	if want := strconv.Itoa(len(part)) + " of its bytes arrived"; !strings.Contains(eb.Error.Message, want) {
		t.Errorf("the error %q does not say how much arrived (%q)", eb.Error.Message, want)
	}
	if !res.Close {
		t.Error("the connection is kept open after a body that was not read to its end")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("answered after %v, want about the 300 ms read timeout", d)
	}
	if _, err := b.eng.Get(context.Background(), "t", "m"); !errors.Is(err, domain.ErrNotFound) {
		t.Fatalf("a send whose body timed out left a message: %v", err)
	}
}

func TestCheckExposure(t *testing.T) {
	for _, tc := range []struct {
		addr           string
		auth, insecure bool
		wantErr        bool
	}{
		{addr: "127.0.0.1:7070"},
		{addr: "127.5.6.7:7070"},
		{addr: "[::1]:7070"},
		{addr: "localhost:7070"},
		{addr: "0.0.0.0:7070", wantErr: true},
		{addr: ":7070", wantErr: true},
		{addr: "[::]:7070", wantErr: true},
		{addr: "10.1.2.3:7070", wantErr: true},
		{addr: "example.com:7070", wantErr: true},
		{addr: "bad-address", wantErr: true},
		{addr: "0.0.0.0:7070", auth: true},
		{addr: "0.0.0.0:7070", insecure: true},
	} {
		err := CheckExposure(tc.addr, tc.auth, tc.insecure)
		if (err != nil) != tc.wantErr {
			t.Errorf("CheckExposure(%q, auth=%v, insecure=%v) = %v", tc.addr, tc.auth, tc.insecure, err)
		}
		if err != nil && tc.wantErr && strings.Contains(tc.addr, "0.0.0.0") && !strings.Contains(err.Error(), "--insecure") {
			t.Errorf("the error does not say how to fix it: %v", err)
		}
	}
}

func TestNewRejectsShortWriteTimeout(t *testing.T) {
	b := setup(t, nil)
	if _, err := New(Config{Queue: b.eng, WriteTimeout: 10 * time.Second}); err == nil {
		t.Fatal("a WriteTimeout shorter than the longest long-poll was accepted")
	}
}

func TestHeaderTooLarge(t *testing.T) {
	b := setup(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.srv.Serve(ctx, ln) }()
	defer func() { stop(); <-served }()
	req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/healthz", nil)
	req.Header.Set("X-Big", strings.Repeat("a", 128<<10))
	client := &http.Client{Transport: &http.Transport{}}
	defer client.CloseIdleConnections()
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("status %d, want 431", res.StatusCode)
	}
}

func TestMetricsAfterTraffic(t *testing.T) {
	m := metrics.New()
	b := setup(t, func(c *Config) { c.RequestObserver = m; c.Metrics = m.Handler() }, m.Subscription())
	if err := m.WatchQueue(b.eng, nil); err != nil {
		t.Fatal(err)
	}
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"a","payload":"x"}`), 201)
	want(t, b.do(t, "POST", "/v1/topics/t/messages", `{"id":"later","payload":"x","delay":"1h"}`), 201)
	r := b.do(t, "POST", "/v1/topics/t/lease", `{}`)
	want(t, r, 200)
	rc := into[wire.MessagesResponse](t, r).Messages[0].Receipt
	want(t, b.do(t, "POST", "/v1/topics/t/messages/a/ack", `{"receipt":"`+rc+`"}`), 200)
	want(t, b.do(t, "GET", "/v1/topics/t/messages/"+strings.Repeat("x", 5), ""), 404)

	r = b.do(t, "GET", "/metrics", "")
	want(t, r, 200)
	text := string(r.raw)
	for _, s := range []string{
		`delayq_messages_sent_total{topic="t"} 2`,
		`delayq_messages_delivered_total{topic="t"} 1`,
		`delayq_messages_acked_total{topic="t"} 1`,
		`delayq_messages_early_total{topic="t"} 0`,
		`delayq_release_lateness_seconds_bucket{topic="t",le="0.0001"}`,
		`delayq_release_lateness_seconds_bucket{topic="t",le="60"} 1`,
		`delayq_release_lateness_seconds_count{topic="t"} 1`,
		`delayq_messages{state="scheduled",topic="t"} 1`,
		`delayq_next_due_timestamp_seconds{topic="t"}`,
		`delayq_http_request_duration_seconds_count{code="201",method="POST",route="/v1/topics/{topic}/messages"} 2`,
		`delayq_http_request_duration_seconds_count{code="404",method="GET",route="/v1/topics/{topic}/messages/{id}"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(text, s) {
			t.Errorf("/metrics lacks %s", s)
		}
	}
	if strings.Contains(text, "/v1/topics/t/") {
		t.Error("a raw path leaked into a metric label")
	}
}

// panicQueue panics on every call, standing in for a bug in a Queue.
type panicQueue struct{ domain.Queue }

func TestPanicIs500AndLogged(t *testing.T) {
	var logs strings.Builder
	var mu sync.Mutex
	srv, err := New(Config{Queue: panicQueue{}, Logger: slog.New(slog.NewTextHandler(lockedWriter{&mu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/v1/topics", nil))
	if rec.Code != 500 || !strings.Contains(rec.Body.String(), `"code":"internal"`) {
		t.Fatalf("%d %s", rec.Code, rec.Body)
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(logs.String(), "panic serving request") {
		t.Fatalf("the panic was not logged: %s", logs.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestTLS serves HTTPS with a certificate made here: TLS 1.2+ works, TLS
// 1.1 and plaintext are refused.
func TestTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile, pool := selfSigned(t, dir)
	b := setup(t, nil)
	srv, err := New(Config{Queue: b.eng, TLSCertFile: certFile, TLSKeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ctx, ln) }()
	defer func() { stop(); <-served }()
	get := func(scheme string, maxVersion uint16) error {
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MaxVersion: maxVersion}}
		defer tr.CloseIdleConnections()
		res, err := (&http.Client{Transport: tr}).Get(scheme + "://" + ln.Addr().String() + "/healthz")
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return errors.New(res.Status)
		}
		return nil
	}
	if err := get("https", 0); err != nil {
		t.Fatalf("TLS: %v", err)
	}
	if err := get("https", tls.VersionTLS12); err != nil {
		t.Fatalf("TLS 1.2: %v", err)
	}
	if err := get("https", tls.VersionTLS11); err == nil {
		t.Fatal("TLS 1.1 accepted")
	}
	if err := get("http", 0); err == nil {
		t.Fatal("plaintext accepted")
	}
}

func selfSigned(t *testing.T, dir string) (certFile, keyFile string, pool *x509.CertPool) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "delayq test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600)
	os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}), 0o600)
	cert, _ := x509.ParseCertificate(der)
	pool = x509.NewCertPool()
	pool.AddCert(cert)
	return certFile, keyFile, pool
}

// TestErrorShapes: every answer our handler makes is the API's JSON error
// shape, including those for requests ServeMux would answer itself (no
// route, wrong method, a path it would redirect, CONNECT, "OPTIONS *",
// which net/http answered 200 itself, bypassing even the Host check).
// What net/http answers before any handler runs (431, 501, 417, 400 for
// a malformed request) stays plain text: http.Server has no hook for it
// (documented in docs/security.md); the statuses are pinned here.
func TestErrorShapes(t *testing.T) {
	b := setup(t, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- b.srv.Serve(ctx, ln) }()
	defer func() { stop(); <-served }()
	send := func(raw string) (*http.Response, []byte) {
		t.Helper()
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		// Write while reading: the server may answer (413) before it has
		// read the whole request and then close; a write blocked on a
		// full socket would then fail before the answer is read.
		go func() { _, _ = io.WriteString(c, raw) }()
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, body
	}
	const h = "Host: 127.0.0.1\r\nConnection: close\r\n"
	big := strings.Repeat("x", int(b.srv.cfg.MaxBodyBytes)+1)
	for _, tc := range []struct {
		name, raw string
		status    int
		code      string
	}{
		{"no route", "GET /v1/nope HTTP/1.1\r\n" + h + "\r\n", 404, wire.CodeNotFound},
		{"wrong method", "DELETE /v1/topics HTTP/1.1\r\n" + h + "\r\n", 405, wire.CodeMethod},
		{"redirected path", "GET /v1/topics/a/../b HTTP/1.1\r\n" + h + "\r\n", 404, wire.CodeNotFound},
		{"CONNECT", "CONNECT 127.0.0.1:80 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n", 404, wire.CodeNotFound},
		{"OPTIONS *", "OPTIONS * HTTP/1.1\r\n" + h + "\r\n", 404, wire.CodeNotFound},
		{"OPTIONS * foreign Host", "OPTIONS * HTTP/1.1\r\nHost: " + rebindHost + "\r\nConnection: close\r\n\r\n", 403, wire.CodeForbidden},
		{"body too large", "POST /v1/topics/a/messages HTTP/1.1\r\n" + h + "Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(big)) + "\r\n\r\n" + big, 413, wire.CodeTooLarge},
		{"malformed chunked body", "POST /v1/topics/a/messages HTTP/1.1\r\n" + h + "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n", 400, wire.CodeInvalid},
		{"malformed JSON", "POST /v1/topics/a/messages HTTP/1.1\r\n" + h + "Content-Type: application/json\r\nContent-Length: 1\r\n\r\n{", 400, wire.CodeInvalid},
		// Before any handler: net/http's own plain-text answers.
		{"header too large", "GET /healthz HTTP/1.1\r\n" + h + "X-Big: " + strings.Repeat("a", 128<<10) + "\r\n\r\n", 431, ""},
		{"unknown transfer-encoding", "POST /v1/topics/a/messages HTTP/1.1\r\n" + h + "Transfer-Encoding: gzip\r\n\r\n", 501, ""},
		{"malformed request line", "GARBAGE\r\n\r\n", 400, ""},
		{"missing Host", "GET /healthz HTTP/1.1\r\nConnection: close\r\n\r\n", 400, ""},
		{"unknown Expect", "POST /v1/topics/a/messages HTTP/1.1\r\n" + h + "Expect: x\r\nContent-Length: 0\r\n\r\n", 417, ""},
	} {
		res, body := send(tc.raw)
		if res.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d; body %q", tc.name, res.StatusCode, tc.status, body)
			continue
		}
		if tc.code == "" {
			continue
		}
		var e wire.ErrorResponse
		if ct := res.Header.Get("Content-Type"); ct != "application/json" || json.Unmarshal(body, &e) != nil || e.Error.Code != tc.code || e.Error.Message == "" {
			t.Errorf("%s: %s %q, want the JSON error shape with code %s", tc.name, ct, body, tc.code)
		}
	}
}
