package httpapi

import (
	"net/http"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/metrics"
	"github.com/delayq/delayq/internal/wire"
)

const (
	prodSecret  = "produce-secret-0123456789"
	consSecret  = "consume-secret-0123456789"
	adminSecret = "admin-secret-0123456789abc"
	otherSecret = "other-secret-0123456789ab"
)

func tokenSet(t *testing.T) *auth.Set {
	t.Helper()
	var toks []*auth.Token
	for _, spec := range []string{
		"prod:" + prodSecret + ":produce:orders.*",
		"cons:" + consSecret + ":consume:orders.*",
		"admin:" + adminSecret + ":admin:*",
		"other:" + otherSecret + ":produce,consume:billing.*",
	} {
		tok, err := auth.ParseToken(spec)
		if err != nil {
			t.Fatal(err)
		}
		toks = append(toks, tok)
	}
	set, err := auth.NewSet(toks)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestAuthMatrix is S25: every endpoint × every credential variant. 401s
// and 403s reach no queue method and change nothing.
func TestAuthMatrix(t *testing.T) {
	m := metrics.New()
	b := setup(t, func(c *Config) { c.Tokens = tokenSet(t); c.Metrics = m.Handler() })
	admin := []string{"Authorization", "Bearer " + adminSecret}
	want(t, b.do(t, "POST", "/v1/topics/orders.eu/messages", `{"id":"m1","payload":"x","delay":"1h"}`, admin...), 201)
	before := b.snapshot(t, [2]string{"orders.eu", "m1"})
	mutations := b.spy.Mutations()

	const (
		open = iota
		produce
		consume
		read // produce or consume
		list // consume, on any topic
		adm
		admAll // admin on "*"
	)
	const tp = "/v1/topics/orders.eu"
	endpoints := []struct {
		method, path, body string
		need               int
	}{
		{"POST", tp + "/messages", `{"payload":"x"}`, produce},
		{"POST", tp + "/messages:batch", `{"messages":[{"payload":"x"}]}`, produce},
		{"GET", tp + "/messages/m1", ``, read},
		{"DELETE", tp + "/messages/m1", ``, produce},
		{"PATCH", tp + "/messages/m1", `{"delay":"1s"}`, produce},
		{"POST", tp + "/lease", `{}`, consume},
		{"POST", tp + "/messages/m1/ack", `{"receipt":"r"}`, consume},
		{"POST", tp + "/acks", `{"acks":[{"id":"m1","receipt":"r"}]}`, consume},
		{"POST", tp + "/messages/m1/nack", `{"receipt":"r"}`, consume},
		{"POST", tp + "/messages/m1/extend", `{"receipt":"r","lease":"1s"}`, consume},
		{"GET", "/v1/topics", ``, list},
		{"GET", tp, ``, consume},
		{"PUT", tp, `{"max_attempts":3}`, adm},
		{"GET", tp + "/dead", ``, consume},
		{"DELETE", tp + "/dead", ``, adm},
		{"POST", tp + "/dead/replay", ``, adm},
		{"POST", tp + "/dead/m1/replay", ``, adm},
		{"DELETE", tp + "/dead/m1", ``, adm},
		{"PUT", "/v1/schedules/nightly", `{}`, admAll},
		{"GET", "/v1/schedules", ``, admAll},
		{"GET", "/metrics", ``, admAll},
		{"GET", "/v1/admin/backup", ``, admAll},
		{"GET", "/healthz", ``, open},
		{"GET", "/readyz", ``, open},
	}
	// allowed[need] per token name.
	allowed := map[string][]bool{
		"prod":  {true, true, false, true, false, false, false},
		"cons":  {true, false, true, true, true, false, false},
		"admin": {true, true, true, true, true, true, true},
		"other": {true, false, false, false, true, false, false},
	}
	secrets := map[string]string{"prod": prodSecret, "cons": consSecret, "admin": adminSecret, "other": otherSecret}
	unauth := []struct {
		name  string
		hdr   []string
		query string
	}{
		{name: "no token"},
		{name: "empty bearer", hdr: []string{"Authorization", "Bearer"}},
		{name: "basic scheme", hdr: []string{"Authorization", "Basic " + adminSecret}},
		{name: "no scheme", hdr: []string{"Authorization", adminSecret}},
		{name: "two credentials", hdr: []string{"Authorization", "Bearer " + adminSecret + " x"}},
		{name: "tab separator", hdr: []string{"Authorization", "Bearer\t" + adminSecret}},
		{name: "wrong secret", hdr: []string{"Authorization", "Bearer " + strings.Repeat("x", len(adminSecret))}},
		{name: "secret prefix", hdr: []string{"Authorization", "Bearer " + adminSecret[:10]}},
		{name: "duplicate headers", hdr: []string{"Authorization", "Bearer " + adminSecret, "Authorization", "Bearer " + adminSecret}},
		{name: "token in query", query: "access_token=" + adminSecret},
		{name: "token in other header", hdr: []string{"X-Auth-Token", adminSecret}},
	}
	for _, ep := range endpoints {
		for _, u := range unauth {
			t.Run(ep.method+" "+ep.path+"/"+u.name, func(t *testing.T) {
				path := ep.path
				if u.query != "" {
					path += "?" + u.query
				}
				r := b.do(t, ep.method, path, ep.body, u.hdr...)
				if ep.need == open {
					if r.status != 200 && !(u.query != "" && r.status == 400) { // unknown query: 400
						t.Fatalf("open endpoint: %d %s", r.status, r.raw)
					}
					return
				}
				if r.status != 401 || r.err.Code != wire.CodeUnauthenticated || !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
					t.Fatalf("got %d %v %s, want 401 with WWW-Authenticate", r.status, r.header, r.raw)
				}
			})
		}
		for name, secret := range secrets {
			if allowed[name][ep.need] {
				continue
			}
			t.Run(ep.method+" "+ep.path+"/"+name, func(t *testing.T) {
				r := b.do(t, ep.method, ep.path, ep.body, "Authorization", "Bearer "+secret)
				if r.status != 403 || r.err.Code != wire.CodeForbidden {
					t.Fatalf("got %d %s, want 403", r.status, r.raw)
				}
			})
		}
	}
	if n := b.spy.Mutations(); n != mutations {
		t.Fatalf("401/403 requests made %d queue calls", n-mutations)
	}
	if after := b.snapshot(t, [2]string{"orders.eu", "m1"}); !before.equal(after) {
		t.Fatalf("401/403 requests changed the queue:\nbefore %+v\nafter  %+v", before, after)
	}

	// Allowed read-only calls pass, with scheme and header-name variants.
	for _, h := range [][]string{
		{"Authorization", "bearer " + consSecret},
		{"Authorization", "BEARER " + consSecret},
		{"Authorization", "Bearer   " + consSecret},
	} {
		want(t, b.do(t, "GET", tp+"/messages/m1", "", h...), 200)
	}
	req, _ := http.NewRequest("GET", b.ts.URL+tp+"/messages/m1", nil)
	req.Header["authorization"] = []string{"Bearer " + prodSecret} // lower-case on the wire
	want(t, b.roundTrip(t, req), 200)
	want(t, b.do(t, "GET", "/metrics", "", admin...), 200)

	// Listing topics is filtered to what the token may read.
	r := b.do(t, "GET", "/v1/topics", "", "Authorization", "Bearer "+otherSecret)
	want(t, r, 200)
	if tr := into[wire.TopicsResponse](t, r); len(tr.Topics) != 0 {
		t.Fatalf("other tenant sees %s", r.raw)
	}
	r = b.do(t, "GET", "/v1/topics", "", "Authorization", "Bearer "+consSecret)
	if tr := into[wire.TopicsResponse](t, r); len(tr.Topics) != 1 {
		t.Fatalf("consumer sees %s", r.raw)
	}
	// And a permitted write works.
	want(t, b.do(t, "POST", tp+"/messages", `{"payload":"x"}`, "Authorization", "Bearer "+prodSecret), 201)
}

// TestPushURLNeedsGlobalAdmin: pointing a topic at a URL makes the server
// send requests from its own network position (SSRF), so setting or
// changing push.url needs admin on "*". An admin of some topics only
// ("orders.*") may still change the other settings, keeping the push URL
// as it is, and may remove it.
func TestPushURLNeedsGlobalAdmin(t *testing.T) {
	tadmin, err := auth.ParseToken("tadmin:tadmin-secret-0123456789a:admin:orders.*")
	if err != nil {
		t.Fatal(err)
	}
	global, _ := auth.ParseToken("admin:" + adminSecret + ":admin:*")
	set, err := auth.NewSet([]*auth.Token{tadmin, global})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tokens = set })
	const tp = "/v1/topics/orders.eu"
	asT := []string{"Authorization", "Bearer tadmin-secret-0123456789a"}
	asG := []string{"Authorization", "Bearer " + adminSecret}
	pushURL := func() string {
		t.Helper()
		r := b.do(t, "GET", tp, "", asG...)
		if r.status == 404 {
			return "" // no settings at all
		}
		want(t, r, 200)
		if p := into[wire.Topic](t, r).Settings.Push; p != nil {
			return p.URL
		}
		return ""
	}

	r := b.do(t, "PUT", tp, `{"push":{"url":"http://169.254.169.254/latest"}}`, asT...)
	if r.status != 403 || r.err.Code != wire.CodeForbidden || !strings.Contains(r.err.Message, `admin on "*"`) {
		t.Fatalf("topic admin sets a push URL: %d %s, want 403 naming admin on \"*\"", r.status, r.raw)
	}
	if u := pushURL(); u != "" {
		t.Fatalf("refused PUT stored push URL %q", u)
	}
	want(t, b.do(t, "PUT", tp, `{"push":{"url":"http://hooks.example/in"}}`, asG...), 200)
	// Same URL, other settings: allowed.
	want(t, b.do(t, "PUT", tp, `{"max_attempts":3,"push":{"url":"http://hooks.example/in","timeout":"5s"}}`, asT...), 200)
	r = b.do(t, "PUT", tp, `{"push":{"url":"http://10.0.0.1/admin"}}`, asT...)
	if r.status != 403 {
		t.Fatalf("topic admin changes the push URL: %d %s, want 403", r.status, r.raw)
	}
	if u := pushURL(); u != "http://hooks.example/in" {
		t.Fatalf("push URL %q after a refused change", u)
	}
	// Removing the push target sends nothing anywhere: allowed.
	want(t, b.do(t, "PUT", tp, `{"max_attempts":3}`, asT...), 200)
	if u := pushURL(); u != "" {
		t.Fatalf("push URL %q after removal", u)
	}
}
