package delayq_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

var (
	topicRE = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)
	idRE    = regexp.MustCompile(`^[A-Za-z0-9._:@+=-]{1,200}$`)
)

// FuzzValidateName: ValidateTopic and ValidateID accept exactly the names
// their documented regular expressions match; rejections are ErrInvalid.
func FuzzValidateName(f *testing.F) {
	for _, s := range []string{"orders.close", "a", "", "a b", "{x}", "}{", "a:b:c", "../x", "x\x00", "é", "order-42@x+y=z",
		strings.Repeat("a", 200), strings.Repeat("a", 201), "'; DROP TABLE q;--", "%00", "\r\n"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			name string
			fn   func(string) error
			re   *regexp.Regexp
		}{{"topic", delayq.ValidateTopic, topicRE}, {"id", delayq.ValidateID, idRE}} {
			err := c.fn(s)
			if (err == nil) != c.re.MatchString(s) {
				t.Fatalf("Validate %s(%q) = %v, regexp %s says %v", c.name, s, err, c.re, c.re.MatchString(s))
			}
			if err != nil && !errors.Is(err, delayq.ErrInvalid) {
				t.Fatalf("Validate %s(%q) = %v, not ErrInvalid", c.name, s, err)
			}
		}
	})
}

// cannedTransport answers every request with one canned response.
type cannedTransport struct {
	status int
	ctype  string
	body   []byte
}

func (c *cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		io.Copy(io.Discard, r.Body)
		r.Body.Close()
	}
	h := http.Header{}
	if c.ctype != "" {
		h.Set("Content-Type", c.ctype)
	}
	h.Set("Retry-After", "1")
	return &http.Response{StatusCode: c.status, Header: h, Body: io.NopCloser(bytes.NewReader(c.body)), Request: r}, nil
}

// FuzzClientResponse feeds arbitrary answers (status and body) to the
// client's parser through each kind of call. It must never panic; an
// answer ≥ 300 is always an error; an error answer in the API's shape
// maps to the sentinel its code names.
func FuzzClientResponse(f *testing.F) {
	seeds := []struct {
		op     uint8
		status int
		body   string
	}{
		{0, 201, `{"id":"a","topic":"t","payload":"x","deliver_at":"2030-01-01T00:00:00Z","state":"scheduled","attempt":0,"failures":0,"max_attempts":25,"created_at":"2030-01-01T00:00:00Z","updated_at":"2030-01-01T00:00:00Z"}`},
		{0, 200, `{"id":"a","payload_base64":"!!notbase64","duplicate":true}`},
		{1, 200, `{"messages":[{"id":"a","receipt":"r","lease_expires_at":"2030-01-01T00:00:00Z"}]}`},
		{1, 200, `{"messages":null}`},
		{2, 200, `{"results":[{"id":"a","ok":true},{"id":"b","ok":false,"error":{"code":"conflict","message":"stale"}}]}`},
		{2, 200, `{"results":[]}`},
		{3, 200, `{"topics":[{"name":"t","counts":{"scheduled":1},"oldest_ready_age_ms":-9223372036854775808}]}`},
		{4, 200, `{"messages":[],"next_cursor":"x"}`},
		{5, 200, `{"results":[{"message":{"id":"a"}},{"error":{"code":"invalid_argument","message":"invalid delay: x","field":"delay"}},{}]}`},
		{0, 400, `{"error":{"code":"invalid_argument","message":"invalid delay: bad","field":"delay"}}`},
		{0, 404, `{"error":{"code":"not_found","message":"nope"}}`},
		{0, 409, `{"error":{"code":"weird","message":"?"}}`},
		{0, 500, `<html>oops</html>`},
		{0, 503, ``},
		{0, 302, `{}`},
		{1, 200, `{"messages":[{"id":1}]}`},
		{1, 200, `{"messages":[`},
		{6, 200, `{"cancelled":true,"prior_state":"inflight","message":null}`},
	}
	for _, s := range seeds {
		f.Add(s.op, s.status, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, op uint8, status int, body []byte) {
		if status < 100 || status > 999 {
			status = 200 + (status%800+800)%800
		}
		tr := &cannedTransport{status: status, ctype: "application/json", body: body}
		c, err := delayq.NewClient("http://fuzz.invalid", delayq.WithRetry(0, 0), delayq.WithHTTPClient(&http.Client{Transport: tr}), delayq.WithTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		switch op % 8 {
		case 0:
			_, err = c.Send(ctx, "t", delayq.SendRequest{ID: "a", Payload: []byte("x")})
		case 1:
			_, err = c.Lease(ctx, "t", delayq.LeaseRequest{Max: 10})
		case 2:
			_, err = c.AckBatch(ctx, "t", []delayq.AckRequest{{ID: "a", Receipt: "r"}, {ID: "b", Receipt: "r"}})
		case 3:
			_, err = c.Topics(ctx)
		case 4:
			_, err = c.DeadList(ctx, "t", delayq.DeadListRequest{Limit: 10})
		case 5:
			_, err = c.SendBatch(ctx, "t", []delayq.SendRequest{{ID: "a", Payload: []byte("x")}, {ID: "b", Payload: []byte("y")}, {ID: "c", Payload: []byte("z")}})
		case 6:
			_, err = c.Cancel(ctx, "t", "a")
		case 7:
			err = c.Ack(ctx, "t", "a", "r")
		}
		if status >= 300 {
			if err == nil {
				t.Fatalf("status %d answered no error", status)
			}
			var ae *delayq.APIError
			if !errors.As(err, &ae) || ae.StatusCode != status {
				t.Fatalf("status %d: error %v is not an *APIError with that status", status, err)
			}
			_ = ae.Error()
			if ae.Code == "not_found" && !errors.Is(err, delayq.ErrNotFound) {
				t.Fatalf("code not_found does not match ErrNotFound: %v", err)
			}
			if ae.Code == "" && status == 404 && !errors.Is(err, delayq.ErrNotFound) {
				t.Fatalf("bare 404 does not match ErrNotFound: %v", err)
			}
		}
		if err != nil {
			_ = err.Error()
		}
	})
}
