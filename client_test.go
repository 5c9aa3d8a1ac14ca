package delayq

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

// fakeServer records requests and answers with a per-test function.
type fakeServer struct {
	mu   sync.Mutex
	reqs []recorded
	srv  *httptest.Server
}

type recorded struct {
	Method, Path, Query, Auth string
	Body                      []byte
}

func newFake(t *testing.T, answer func(w http.ResponseWriter, r *http.Request, body []byte, n int)) *fakeServer {
	t.Helper()
	f := &fakeServer{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, recorded{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Authorization"), body})
		n := len(f.reqs)
		f.mu.Unlock()
		answer(w, r, body, n)
	}))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakeServer) requests() []recorded {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]recorded(nil), f.reqs...)
}

func (f *fakeServer) client(t *testing.T, opts ...ClientOption) *Client {
	t.Helper()
	c, err := NewClient(f.srv.URL, append([]ClientOption{WithRetry(3, time.Millisecond)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func wireErr(w http.ResponseWriter, status int, code, msg, field string) {
	writeJSON(w, status, wire.ErrorResponse{Error: wire.ErrorBody{Code: code, Message: msg, Field: field}})
}

// echoMessage answers a send with the message it describes.
func echoMessage(w http.ResponseWriter, body []byte, status int, dup bool) {
	var req wire.SendRequest
	_ = json.Unmarshal(body, &req)
	writeJSON(w, status, wire.Message{ID: deref(req.ID), Topic: "t", Payload: req.Payload, PayloadBase64: req.PayloadBase64, State: "scheduled", Duplicate: dup})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func TestClientErrorDecoding(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		status   int
		code     string
		msg      string
		field    string
		raw      string // non-JSON body instead
		want     error
		wantText string
	}{
		{name: "not found", status: 404, code: wire.CodeNotFound, msg: "message x not found", want: ErrNotFound, wantText: "message x not found"},
		{name: "conflict", status: 409, code: wire.CodeConflict, msg: "stale receipt", want: ErrConflict, wantText: "stale receipt"},
		{name: "invalid", status: 400, code: wire.CodeInvalid, msg: "invalid delay: must not be negative", field: "delay", want: ErrInvalid, wantText: "invalid delay: must not be negative"},
		{name: "too large", status: 413, code: wire.CodeTooLarge, msg: "payload is 2 MiB", want: ErrTooLarge, wantText: "payload is 2 MiB"},
		{name: "headers too large", status: 431, code: wire.CodeHeaderTooLarge, msg: "headers", want: ErrTooLarge, wantText: "headers"},
		{name: "rate limited", status: 429, code: wire.CodeRateLimited, msg: "slow down", want: ErrRateLimited, wantText: "slow down"},
		{name: "request timeout", status: 408, code: wire.CodeTimeout, msg: "body timed out", want: ErrUnavailable, wantText: "body timed out"},
		{name: "unavailable", status: 503, code: wire.CodeUnavailable, msg: "redis down", want: ErrUnavailable, wantText: "redis down"},
		{name: "unauthorized", status: 401, code: wire.CodeUnauthenticated, msg: "no token", want: ErrUnauthorized, wantText: "no token"},
		{name: "forbidden", status: 403, code: wire.CodeForbidden, msg: "scope consume missing", want: ErrForbidden, wantText: "scope consume missing"},
		{name: "internal matches nothing", status: 500, code: wire.CodeInternal, msg: "internal error", want: nil, wantText: "internal error"},
		{name: "proxy html 502", status: 502, raw: "<html>bad gateway</html>", want: ErrUnavailable, wantText: "HTTP 502 Bad Gateway"},
		{name: "plain text 404", status: 404, raw: "404 page not found", want: ErrNotFound, wantText: "HTTP 404: 404 page not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, func(w http.ResponseWriter, r *http.Request, _ []byte, _ int) {
				if tt.raw != "" {
					w.Header().Set("X-Request-Id", "proxy-1") // a proxy's own id
					w.WriteHeader(tt.status)
					_, _ = io.WriteString(w, tt.raw)
					return
				}
				wireErr(w, tt.status, tt.code, tt.msg, tt.field)
			})
			c := f.client(t, WithRetry(0, 0))
			_, err := c.Get(context.Background(), "orders", "x")
			if err == nil {
				t.Fatal("no error")
			}
			if err.Error() != tt.wantText {
				t.Errorf("text %q, want %q", err.Error(), tt.wantText)
			}
			var ae *APIError
			if !errors.As(err, &ae) || ae.StatusCode != tt.status {
				t.Fatalf("not an *APIError with status %d: %#v", tt.status, err)
			}
			if wantID := map[bool]string{true: "proxy-1"}[tt.raw != ""]; ae.RequestID != wantID {
				t.Errorf("RequestID %q, want %q", ae.RequestID, wantID)
			}
			for _, s := range []error{ErrNotFound, ErrConflict, ErrInvalid, ErrTooLarge, ErrRateLimited, ErrUnavailable, ErrUnauthorized, ErrForbidden} {
				if got := errors.Is(err, s); got != (s == tt.want) {
					t.Errorf("errors.Is(err, %v) = %v", s, got)
				}
			}
			if tt.want == ErrInvalid {
				var ie *InvalidError
				if !errors.As(err, &ie) || ie.Field != tt.field || ie.Reason != "must not be negative" {
					t.Errorf("InvalidError = %#v", ie)
				}
			}
		})
	}
}

func TestClientSendRetryReusesIDOn503(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		switch n {
		case 1:
			wireErr(w, 503, wire.CodeUnavailable, "engine unavailable", "")
		case 2:
			w.WriteHeader(http.StatusBadGateway)
		case 3: // the body did not arrive within the server's read timeout
			wireErr(w, 408, wire.CodeTimeout, "request body timed out", "")
		default:
			echoMessage(w, body, 200, true) // the earlier attempt had gone through
		}
	})
	m, err := f.client(t).Enqueue(context.Background(), "orders", []byte("hi"), After(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	ids := sentIDs(t, f.requests())
	if len(ids) != 4 || ids[0] == "" || ids[0] != ids[1] || ids[1] != ids[2] || ids[2] != ids[3] || ids[0] != m.ID {
		t.Fatalf("ids over attempts %q, message %q: want one client-made id reused", ids, m.ID)
	}
	if err := ValidateID(m.ID); err != nil {
		t.Fatal(err)
	}
	if m.Duplicate {
		t.Error("Duplicate set although this call created the message")
	}
}

func TestClientSendRetryReusesIDOnConnectionReset(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		if n == 1 { // read the request, then drop the connection without answering
			hangUp(w)
			return
		}
		echoMessage(w, body, 201, false)
	})
	m, err := f.client(t).Send(context.Background(), "orders", NewSendRequest([]byte("hi")))
	if err != nil {
		t.Fatal(err)
	}
	ids := sentIDs(t, f.requests())
	if len(ids) != 2 || ids[0] == "" || ids[0] != ids[1] || ids[0] != m.ID {
		t.Fatalf("ids over attempts %q, message %q", ids, m.ID)
	}
}

func TestClientKeepsCallerID(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		echoMessage(w, body, 200, true)
	})
	m, err := f.client(t).Enqueue(context.Background(), "orders", []byte("hi"), WithID("order-42"))
	if err != nil {
		t.Fatal(err)
	}
	if m.ID != "order-42" || !m.Duplicate {
		t.Fatalf("got id %q duplicate %v: a caller's id must be kept and Duplicate reported", m.ID, m.Duplicate)
	}
}

func TestClientNoRetriesNoClientID(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		wireErr(w, 503, wire.CodeUnavailable, "down", "")
	})
	_, err := f.client(t, WithRetry(0, 0)).Enqueue(context.Background(), "orders", []byte("hi"))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if ids := sentIDs(t, f.requests()); len(ids) != 1 || ids[0] != "" {
		t.Fatalf("ids %q: want one attempt with no id (the server makes it)", ids)
	}
}

func TestClientContextCancelStopsRetries(t *testing.T) {
	t.Parallel()
	attempted := make(chan struct{}, 10)
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		attempted <- struct{}{}
		wireErr(w, 503, wire.CodeUnavailable, "down", "")
	})
	c := f.client(t, WithRetry(5, time.Hour)) // the backoff would wait for ever
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { _, err := c.Enqueue(ctx, "orders", []byte("x")); errc <- err }()
	<-attempted
	cancel()
	err := <-errc
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v; want context.Canceled (and not ErrUnavailable: the caller gave up)", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d attempts after cancel, want 1", n)
	}
}

func TestClientRetriesAreBounded(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		wireErr(w, 503, wire.CodeUnavailable, "down", "")
	})
	_, err := f.client(t, WithRetry(2, time.Millisecond)).Get(context.Background(), "orders", "a")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v", err)
	}
	if n := len(f.requests()); n != 3 {
		t.Fatalf("%d attempts, want 1 + 2 retries", n)
	}
}

// hangUp drops the connection after reading the request, without an
// answer: the client cannot tell whether the server acted.
func hangUp(w http.ResponseWriter) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err == nil {
		_ = conn.Close()
	}
}

// firstAnswerLost is a server that hangs up on the first request and
// answers the others with the JSON answer.
func firstAnswerLost(t *testing.T, answer string) *fakeServer {
	return newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		if n == 1 {
			hangUp(w)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(answer))
	})
}

// A cancel is not repeated after a connection loss: a repeat of a cancel
// that was done finds nothing (cancel keeps no tombstone) and would say so.
func TestClientCancelNotRepeatedAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) { hangUp(w) })
	_, err := f.client(t).Cancel(context.Background(), "orders", "a")
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if n := len(f.requests()); n != 1 {
		t.Fatalf("%d attempts: a cancel whose outcome is unknown must not be repeated", n)
	}
}

// A nack is repeated after a connection loss, with the same receipt and
// reason: the server answers a repeat of a done nack with the message as
// that nack left it.
func TestClientNackRepeatedAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	f := firstAnswerLost(t, `{"id":"a","state":"scheduled","failures":1}`)
	m, err := f.client(t).Nack(context.Background(), "orders", "a", "r1", NackRequest{Reason: "boom"})
	if err != nil || m.Failures != 1 {
		t.Fatalf("nack: %+v %v", m, err)
	}
	reqs := f.requests()
	if len(reqs) != 2 || string(reqs[0].Body) != string(reqs[1].Body) {
		t.Fatalf("%d attempts: want the nack repeated once, with the same receipt and reason", len(reqs))
	}
}

// An ack is repeated after a connection loss, with the same receipt: the
// server answers a repeat of a done ack as it answered the first.
func TestClientAckRepeatedAfterConnectionLoss(t *testing.T) {
	t.Parallel()
	f := firstAnswerLost(t, "{}")
	if err := f.client(t).Ack(context.Background(), "orders", "a", "r1"); err != nil {
		t.Fatal(err)
	}
	reqs := f.requests()
	if len(reqs) != 2 || string(reqs[0].Body) != string(reqs[1].Body) {
		t.Fatalf("%d attempts: want the ack repeated once, with the same receipt", len(reqs))
	}
}

func TestClientTransportErrorIsUnavailable(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := NewClient(url, WithRetry(1, time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Topics(context.Background())
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
}

func TestClientWireEncoding(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		echoMessage(w, body, 201, false)
	})
	c := f.client(t, WithToken("s3cret"))
	ctx := context.Background()
	at := time.Date(2030, 1, 2, 3, 4, 5, 1_500_001, time.FixedZone("x", 3600))
	if _, err := c.Enqueue(ctx, "orders", []byte("héllo"), At(at), WithID("a"), WithMaxAttempts(3), WithHeaders(map[string]string{"k": "v"})); err != nil {
		t.Fatal(err)
	}
	bin := []byte{0xff, 0x00, 0xfe}
	m, err := c.Enqueue(ctx, "orders", bin, After(1500*time.Millisecond), WithID("b"))
	if err != nil {
		t.Fatal(err)
	}
	if string(m.Payload) != string(bin) {
		t.Errorf("binary payload round trip: %x", m.Payload)
	}
	reqs := f.requests()
	want := []string{
		`{"id":"a","payload":"héllo","headers":{"k":"v"},"deliver_at":"2030-01-02T02:04:05.002Z","max_attempts":3}`,
		`{"id":"b","payload_base64":"/wD+","delay":"1.5s"}`,
	}
	for i, w := range want {
		if got := string(reqs[i].Body); got != w {
			t.Errorf("body %d:\n got %s\nwant %s", i, got, w)
		}
		if reqs[i].Method != "POST" || reqs[i].Path != "/v1/topics/orders/messages" || reqs[i].Auth != "Bearer s3cret" {
			t.Errorf("request %d: %+v", i, reqs[i])
		}
	}
}

func TestClientRequestShapes(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		switch {
		case strings.HasSuffix(r.URL.Path, "/lease"):
			writeJSON(w, 200, wire.MessagesResponse{Messages: []*wire.Message{}})
		case strings.HasSuffix(r.URL.Path, "/dead") && r.Method == "GET":
			writeJSON(w, 200, wire.DeadPage{Messages: []*wire.Message{}, Next: "c2"})
		case strings.HasSuffix(r.URL.Path, "/dead/replay"), strings.HasSuffix(r.URL.Path, "/dead"):
			writeJSON(w, 200, wire.CountResponse{Count: 7})
		case strings.HasSuffix(r.URL.Path, "/acks"):
			writeJSON(w, 200, wire.AckBatchResponse{Results: []wire.AckResult{{ID: "a", OK: true}, {ID: "b", Error: &wire.ErrorBody{Code: wire.CodeConflict, Message: "stale"}}}})
		case r.Method == "DELETE":
			writeJSON(w, 200, wire.CancelResponse{Cancelled: true, PriorState: "ready", Message: &wire.Message{ID: "a", Topic: "t", State: "ready"}})
		default:
			writeJSON(w, 200, wire.Message{ID: "a", Topic: "t"})
		}
	})
	c := f.client(t)
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	_, err := c.Lease(ctx, "t", LeaseRequest{Max: 5, Lease: time.Minute, Wait: 10 * time.Millisecond})
	must(err)
	_, err = c.Nack(ctx, "t", "a", "r", NackRequest{HasDelay: true, Delay: 0, Reason: "boom"})
	must(err)
	_, err = c.Extend(ctx, "t", "a", "r", 45*time.Second)
	must(err)
	_, err = c.Reschedule(ctx, "t", "a", When{Delay: time.Hour})
	must(err)
	m, err := c.Cancel(ctx, "t", "a")
	must(err)
	if m.State != StateReady {
		t.Errorf("cancel state %q", m.State)
	}
	errs, err := c.AckBatch(ctx, "t", []AckRequest{{ID: "a", Receipt: "r1"}, {ID: "b", Receipt: "r2"}})
	must(err)
	if errs[0] != nil || !errors.Is(errs[1], ErrConflict) {
		t.Errorf("batch ack errs %v", errs)
	}
	page, err := c.DeadList(ctx, "t", DeadListRequest{Limit: 10, Cursor: "c1"})
	must(err)
	if page.Next != "c2" {
		t.Errorf("next %q", page.Next)
	}
	n, err := c.DeadReplayAll(ctx, "t")
	must(err)
	n2, err := c.DeadPurge(ctx, "t")
	must(err)
	if n != 7 || n2 != 7 {
		t.Errorf("counts %d %d", n, n2)
	}

	got := []string{}
	for _, r := range f.requests() {
		s := r.Method + " " + r.Path
		if r.Query != "" {
			s += "?" + r.Query
		}
		if len(r.Body) > 0 {
			s += " " + string(r.Body)
		}
		got = append(got, s)
	}
	want := []string{
		`POST /v1/topics/t/lease {"max":5,"lease":"1m0s","wait":"10ms"}`,
		`POST /v1/topics/t/messages/a/nack {"receipt":"r","delay":"0s","reason":"boom"}`,
		`POST /v1/topics/t/messages/a/extend {"receipt":"r","lease":"45s"}`,
		`PATCH /v1/topics/t/messages/a {"delay":"1h0m0s"}`,
		`DELETE /v1/topics/t/messages/a`,
		`POST /v1/topics/t/acks {"acks":[{"id":"a","receipt":"r1"},{"id":"b","receipt":"r2"}]}`,
		`GET /v1/topics/t/dead?cursor=c1&limit=10`,
		`POST /v1/topics/t/dead/replay`,
		`DELETE /v1/topics/t/dead`,
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

func TestClientLeaseWaitOutlastsTimeout(t *testing.T) {
	t.Parallel()
	f := newFake(t, func(w http.ResponseWriter, r *http.Request, body []byte, n int) {
		time.Sleep(300 * time.Millisecond) // a long-poll that finds nothing
		writeJSON(w, 200, wire.MessagesResponse{})
	})
	// Both the per-attempt timeout and the http.Client's are shorter than
	// the long-poll; Lease must extend them by Wait. Wait leaves the
	// answer most of a second to arrive: a busy machine running the
	// whole suite once held it back past a 150 ms margin.
	c := f.client(t, WithTimeout(50*time.Millisecond), WithHTTPClient(&http.Client{Timeout: 50 * time.Millisecond}))
	msgs, err := c.Lease(context.Background(), "t", LeaseRequest{Wait: time.Second})
	if err != nil || len(msgs) != 0 {
		t.Fatalf("lease: %v %v", msgs, err)
	}
}

func TestClientValidatesPathNames(t *testing.T) {
	t.Parallel()
	c, err := NewClient("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Get(context.Background(), "orders", "../x")
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "id" {
		t.Fatalf("err = %v", err)
	}
	_, err = c.Topic(context.Background(), "a/b")
	if !errors.As(err, &ie) || ie.Field != "topic" {
		t.Fatalf("err = %v", err)
	}
}

// TestAckAndLeaseRefusesTooManyAcks: more acks than a lease carries is the
// caller's error, named before any call (a server would answer it as 400
// field "acks", which is also how one older than the field refuses it).
func TestAckAndLeaseRefusesTooManyAcks(t *testing.T) {
	t.Parallel()
	c, err := NewClient("http://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = c.AckAndLease(context.Background(), "orders", make([]AckRequest, MaxBatch+1), LeaseRequest{Max: 1})
	var ie *InvalidError
	if !errors.As(err, &ie) || ie.Field != "acks" || errors.Is(err, ErrAcksWithLeaseUnsupported) {
		t.Fatalf("err = %v, want an InvalidError naming acks", err)
	}
}

func TestNewClientRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "ftp://x", "http://", "http://h/?q=1", "http://h:%zz", "h:%zz"} {
		_, err := NewClient(u)
		if err == nil {
			t.Errorf("NewClient(%q) succeeded", u)
		} else if strings.Contains(err.Error(), "parse") {
			t.Errorf("NewClient(%q): %v; want our words, not the URL parser's", u, err)
		}
	}
	// host:port, as serve --addr takes it, is http://host:port.
	c, err := NewClient("127.0.0.1:7070")
	if err != nil || c.base != "http://127.0.0.1:7070" {
		t.Fatalf("host:port: %v %v", c, err)
	}
	c, err = NewClient("https://example.com/delayq/")
	if err != nil || c.base != "https://example.com/delayq" {
		t.Fatalf("prefix: %v %q", err, c.base)
	}
}

func sentIDs(t *testing.T, reqs []recorded) []string {
	t.Helper()
	var ids []string
	for _, r := range reqs {
		var w wire.SendRequest
		if err := json.Unmarshal(r.Body, &w); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, deref(w.ID))
	}
	return ids
}
