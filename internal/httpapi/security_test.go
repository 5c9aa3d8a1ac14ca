package httpapi

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/dashboard"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// The attacks of this file come from a web page in the operator's
// browser against a server in the default mode (loopback, no tokens):
// through DNS rebinding (the page's own name resolves to 127.0.0.1, so
// Host is the attacker's name) or as plain cross-site requests (Host is
// ours, but the body is text/plain or a form, or Origin is foreign).

const rebindHost = "rebind.attacker.example"

// withOrders is a server with message o42 in topic orders.
func withOrders(t *testing.T, mod func(*Config)) *bundle {
	t.Helper()
	b := setup(t, mod)
	if _, err := b.eng.Send(context.Background(), "orders", domain.SendRequest{ID: "o42", Payload: []byte("secret-payload-o42")}); err != nil {
		t.Fatal(err)
	}
	return b
}

// raw sends one request with exactly the given headers (Host included)
// over a fresh connection and returns the answer.
func raw(t *testing.T, b *bundle, method, path, host, body string, hdr ...string) resp {
	t.Helper()
	req, err := http.NewRequest(method, b.ts.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if body == "" {
		req.Body, req.ContentLength = nil, 0
	}
	req.Host = host
	req.Close = true
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return b.roundTrip(t, req)
}

func wantRefused(t *testing.T, r resp, status int, code string, msg ...string) {
	t.Helper()
	if r.status != status || r.err.Code != code {
		t.Fatalf("status %d code %q, want %d %q; body %s", r.status, r.err.Code, status, code, r.raw)
	}
	for _, m := range msg {
		if !strings.Contains(r.err.Message, m) {
			t.Errorf("message %q lacks %q", r.err.Message, m)
		}
	}
	if strings.Contains(string(r.raw), "secret-payload") {
		t.Errorf("refusal leaks the payload: %s", r.raw)
	}
}

// TestForeignHostRefused: a Host that is not a loopback name is refused on
// every route, reads and writes alike, before anything is read or changed.
func TestForeignHostRefused(t *testing.T) {
	b := withOrders(t, nil)
	port := b.ts.Listener.Addr().(*net.TCPAddr).Port
	before := b.spy.Mutations()
	for _, host := range []string{"evil.example", rebindHost, fmt.Sprintf("%s:%d", rebindHost, port), "0.0.0.0", "localhost.evil.example", "127.0.0.1.nip.io"} {
		t.Run(host, func(t *testing.T) {
			r := raw(t, b, "GET", "/v1/topics/orders/messages/o42", host, "")
			wantRefused(t, r, 403, wire.CodeForbidden, fmt.Sprintf("Host %q is not allowed", host), "--allowed-hosts")
			// Re-pointing the topic's push URL at the attacker.
			r = raw(t, b, "PUT", "/v1/topics/orders", host, `{"push":{"url":"https://`+rebindHost+`/hook"}}`, "Content-Type", "application/json")
			wantRefused(t, r, 403, wire.CodeForbidden, "is not allowed")
			r = raw(t, b, "POST", "/v1/topics/orders/lease", host, `{"max":1000,"lease":"12h"}`, "Content-Type", "application/json")
			wantRefused(t, r, 403, wire.CodeForbidden, "is not allowed")
			wantRefused(t, raw(t, b, "GET", "/nowhere", host, ""), 403, wire.CodeForbidden) // not even a 404
		})
	}
	if n := b.spy.Mutations(); n != before {
		t.Fatalf("%d queue calls from refused hosts", n-before)
	}
	if ti, err := b.eng.Topic(context.Background(), "orders"); err != nil || ti.Settings.Push != nil {
		t.Fatalf("push settings changed: %+v, %v", ti, err)
	}
	// The loopback names are answered, with or without a port.
	for _, host := range []string{"127.0.0.1", fmt.Sprintf("127.0.0.1:%d", port), "localhost", fmt.Sprintf("LocalHost:%d", port), "127.4.5.6", "[::1]", fmt.Sprintf("[::1]:%d", port)} {
		if r := raw(t, b, "GET", "/v1/topics/orders/messages/o42", host, ""); r.status != 200 {
			t.Errorf("Host %q: %d %s", host, r.status, r.raw)
		}
	}
}

// TestAllowedHostsConfig: a configured list is answered besides loopback
// names, and the defaults off loopback follow the documented rules.
func TestAllowedHostsConfig(t *testing.T) {
	b := withOrders(t, func(c *Config) { c.AllowedHosts = []string{"queue.example", "*.dq.example", "other.example:8443"} })
	for host, ok := range map[string]bool{
		"queue.example": true, "QUEUE.example:7070": true, "a.dq.example": true, "b.a.dq.example:1": true,
		"dq.example": false, "other.example:8443": true, "other.example": false, "other.example:8444": false,
		"127.0.0.1": true, "evil.example": false, "10.0.0.5": false,
	} {
		if r := raw(t, b, "GET", "/healthz", host, ""); (r.status == 200) != ok {
			t.Errorf("Host %q: %d, want allowed=%v", host, r.status, ok)
		}
	}
	for _, bad := range []string{"http://queue.example", "queue.example/ui", "a b", "[::1", "host:port"} {
		if _, err := New(Config{Queue: b.spy, AllowedHosts: []string{bad}}); err == nil {
			t.Errorf("AllowedHosts %q accepted", bad)
		}
	}
	cases := []struct {
		addr   string
		authOn bool
		host   string
		ok     bool
	}{
		{"0.0.0.0:7070", true, rebindHost, true},   // tokens: a bearer token is no ambient credential
		{"0.0.0.0:7070", false, rebindHost, false}, // insecure: names must be listed …
		{"0.0.0.0:7070", false, "10.1.2.3:7070", true},
		{"0.0.0.0:7070", false, "[2001:db8::1]:7070", true}, // … IP literals need no DNS
		{"127.0.0.1:7070", true, rebindHost, false},
		{"localhost:7070", false, "10.1.2.3", false},
	}
	for _, c := range cases {
		p, err := newHostPolicy(nil, c.addr, c.authOn)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.allows(c.host); got != c.ok {
			t.Errorf("listen %s auth %v: Host %q allowed=%v, want %v", c.addr, c.authOn, c.host, got, c.ok)
		}
	}
}

// TestSimpleCrossSiteRequestsRefused: bodies a page can send without a
// CORS preflight (text/plain, a form, multipart, no Content-Type) are 415
// and change nothing; so is any body type other than JSON.
func TestSimpleCrossSiteRequestsRefused(t *testing.T) {
	b := withOrders(t, nil)
	before := b.spy.Mutations()
	lease := `{"max":1000,"lease":"12h"}`
	send := `{"id":"x1","payload":"from a web page"}`
	for _, c := range []struct{ path, body, ctype string }{
		{"/v1/topics/orders/lease", lease, "text/plain"},
		{"/v1/topics/orders/lease", lease, "text/plain;charset=UTF-8"},
		{"/v1/topics/orders/messages", send, "text/plain"},
		{"/v1/topics/orders/messages", "payload=x", "application/x-www-form-urlencoded"},
		{"/v1/topics/orders/lease", "--b\r\nContent-Disposition: form-data; name=a\r\n\r\nb\r\n--b--\r\n", "multipart/form-data; boundary=b"},
		{"/v1/topics/orders/messages", send, ""},
		{"/v1/topics/orders/messages:batch", `{"messages":[` + send + `]}`, ""},
		{"/v1/topics/orders/messages", send, "application/json; charset=latin1"},
		{"/v1/topics/orders/messages", send, "application/jsonx"},
	} {
		r := raw(t, b, "POST", c.path, "127.0.0.1", c.body, "Content-Type", c.ctype)
		if c.ctype == "" {
			wantRefused(t, r, 415, wire.CodeMediaType, "no Content-Type", "application/json")
		} else {
			wantRefused(t, r, 415, wire.CodeMediaType, fmt.Sprintf("Content-Type %q", c.ctype), "application/json")
		}
	}
	if n := b.spy.Mutations(); n != before {
		t.Fatalf("%d queue calls from non-JSON bodies", n-before)
	}
	// JSON, with or without charset=utf-8, and requests without a body pass.
	want(t, raw(t, b, "POST", "/v1/topics/orders/messages", "127.0.0.1", `{"id":"j1","payload":"x"}`, "Content-Type", "application/json"), 201)
	want(t, raw(t, b, "POST", "/v1/topics/orders/messages", "127.0.0.1", `{"id":"j2","payload":"x"}`, "Content-Type", "application/json; charset=UTF-8"), 201)
	want(t, raw(t, b, "DELETE", "/v1/topics/orders/messages/j2", "127.0.0.1", ""), 200)
}

// TestCrossOriginRequestsRefused: a browser's cross-origin request is
// refused even when it needs no body (an empty POST leases or replays).
func TestCrossOriginRequestsRefused(t *testing.T) {
	b := withOrders(t, nil)
	before := b.spy.Mutations()
	for _, hdr := range [][]string{
		{"Origin", "http://evil.example"},
		{"Origin", "null"},
		{"Origin", "http://localhost:3000"},
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
	} {
		for _, path := range []string{"/v1/topics/orders/lease", "/v1/topics/orders/dead/replay"} {
			r := raw(t, b, "POST", path, "127.0.0.1", "", hdr...)
			wantRefused(t, r, 403, wire.CodeForbidden, "cross-origin")
		}
	}
	if n := b.spy.Mutations(); n != before {
		t.Fatalf("%d queue calls from cross-origin requests", n-before)
	}
	u, _ := url.Parse(b.ts.URL)
	r := raw(t, b, "POST", "/v1/topics/orders/lease", u.Host, "", "Origin", b.ts.URL, "Sec-Fetch-Site", "same-origin")
	want(t, r, 200)
	if ms := into[wire.MessagesResponse](t, r).Messages; len(ms) != 1 {
		t.Fatalf("same-origin lease got %s", r.raw)
	}
}

// TestDebugHandlerForeignHost: the profiling endpoints answer loopback
// names only.
func TestDebugHandlerForeignHost(t *testing.T) {
	h, err := DebugHandler(nil)
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(h)
	defer ts.Close()
	b := &bundle{ts: ts}
	r := raw(t, b, "GET", "/debug/pprof/cmdline", rebindHost, "")
	wantRefused(t, r, 403, wire.CodeForbidden, fmt.Sprintf("Host %q is not allowed", rebindHost))
	wantRefused(t, raw(t, b, "GET", "/debug/pprof/goroutine?debug=1", "evil.example", ""), 403, wire.CodeForbidden)
	if r := raw(t, b, "GET", "/debug/pprof/cmdline", "127.0.0.1", ""); r.status != 200 || len(r.raw) == 0 {
		t.Fatalf("loopback Host: %d %q", r.status, r.raw)
	}
	if _, err := DebugHandler([]string{"http://x"}); err == nil {
		t.Fatal("a bad allowed host was accepted")
	}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// TestDashboardRebinding: with auth off, a rebound page could read a
// dashboard form (its CSRF token and visitor cookie are then its own,
// and its Origin equals its Host) and post it. The Host check stops it
// at the first request. A foreign Origin on an allowed Host is refused
// by the dashboard's own check.
func TestDashboardRebinding(t *testing.T) {
	rec := dashboard.NewRecorder(dashboard.RecorderConfig{})
	var dash *dashboard.Dashboard
	b := withOrders(t, func(c *Config) {
		var err error
		if dash, err = dashboard.New(dashboard.Config{Queue: c.Queue, Recorder: rec}); err != nil {
			t.Fatal(err)
		}
		c.Dashboard = dash
	})
	jar, _ := cookiejar.New(nil)
	client := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	defer client.CloseIdleConnections()
	attack := func(host string) (getStatus, postStatus int) {
		req, _ := http.NewRequest("GET", b.ts.URL+"/ui/message?topic=orders&id=o42", nil)
		req.Host = host
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		page, _ := io.ReadAll(res.Body)
		res.Body.Close()
		getStatus = res.StatusCode
		csrf := ""
		if m := csrfField.FindSubmatch(page); m != nil {
			csrf = string(m[1])
		}
		form := url.Values{"csrf": {csrf}, "topic": {"orders"}, "id": {"o42"}}
		req, _ = http.NewRequest("POST", b.ts.URL+"/ui/message/cancel", strings.NewReader(form.Encode()))
		req.Host = host
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "http://"+host)
		req.Header.Set("Sec-Fetch-Site", "same-origin")
		// The jar holds cookies by URL (127.0.0.1); a browser would hold
		// them for the rebound name, which is the same thing here.
		res, err = client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode == http.StatusForbidden && strings.HasPrefix(res.Header.Get("Content-Type"), "application/json") &&
			!strings.Contains(string(body), "is not allowed") {
			t.Errorf("refusal does not say why: %s", body)
		}
		return getStatus, res.StatusCode
	}
	get, post := attack(rebindHost)
	if get != http.StatusForbidden || post != http.StatusForbidden {
		t.Fatalf("rebound dashboard: GET %d, POST %d; want 403 and 403", get, post)
	}
	if m, err := b.eng.Get(context.Background(), "orders", "o42"); err != nil || m.ID != "o42" {
		t.Fatalf("o42 after the attack: %+v, %v", m, err)
	}
	// Allowed Host, foreign Origin (a cross-site form): the dashboard's
	// own Origin check.
	u, _ := url.Parse(b.ts.URL)
	req, _ := http.NewRequest("POST", b.ts.URL+"/ui/message/cancel", strings.NewReader("topic=orders&id=o42"))
	req.Host = u.Host
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", "http://"+rebindHost)
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Fatalf("foreign Origin: %d, want 403", res.StatusCode)
	}
	if m, err := b.eng.Get(context.Background(), "orders", "o42"); err != nil || m.ID != "o42" {
		t.Fatalf("o42 after the cross-site post: %+v, %v", m, err)
	}
	// The operator's own browser, on the loopback name, still works.
	if get, post := attack(u.Host); get != http.StatusOK || post != http.StatusSeeOther {
		t.Fatalf("own dashboard: GET %d, POST %d; want 200 and 303", get, post)
	}
}

// TestHSTS: every answer over TLS tells browsers to use HTTPS only (so a
// network attacker cannot strip TLS from a later visit), errors and the
// dashboard included; plain HTTP and "localhost" (a name browsers would
// then pin to HTTPS for every local port) get no such header.
func TestHSTS(t *testing.T) {
	b := setup(t, func(c *Config) {
		c.Dashboard = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "dashboard") })
	})
	ts := httptest.NewTLSServer(b.srv.Handler())
	defer ts.Close()
	get := func(base, method, path, host string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, base+path, nil)
		if host != "" {
			req.Host = host
		}
		res, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res
	}
	for _, tc := range []struct{ method, path, host string }{
		{"GET", "/healthz", ""},
		{"GET", "/v1/topics", ""},
		{"GET", "/v1/no-such-route", ""},
		{"DELETE", "/v1/topics", ""},
		{"GET", "/ui/", ""},
		{"GET", "/v1/topics", "127.0.0.1"},
		{"GET", "/v1/topics", rebindHost}, // refused, still over TLS
	} {
		res := get(ts.URL, tc.method, tc.path, tc.host)
		if got := res.Header.Get("Strict-Transport-Security"); got != "max-age=31536000" {
			t.Errorf("%s %s (Host %q): %d, Strict-Transport-Security %q", tc.method, tc.path, tc.host, res.StatusCode, got)
		}
	}
	for _, host := range []string{"localhost", "localhost:7070"} {
		if got := get(ts.URL, "GET", "/healthz", host).Header.Get("Strict-Transport-Security"); got != "" {
			t.Errorf("Host %s: Strict-Transport-Security %q, want none", host, got)
		}
	}
	if got := get(b.ts.URL, "GET", "/healthz", "").Header.Get("Strict-Transport-Security"); got != "" {
		t.Errorf("plain HTTP: Strict-Transport-Security %q, want none", got)
	}
}
