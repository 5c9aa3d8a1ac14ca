package dashboard_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// pagesToProbe are every GET page, with a query that would show data.
var pagesToProbe = []string{
	"/ui/", "/ui/topics/orders", "/ui/upcoming", "/ui/upcoming?topic=orders",
	"/ui/timeliness", "/ui/message?topic=orders&id=order-42", "/ui/dead?topic=orders",
}

// actions are every POST, with a form that would change something.
func actions() map[string]url.Values {
	return map[string]url.Values{
		"/ui/message/cancel":         {"topic": {"orders"}, "id": {"order-42"}},
		"/ui/message/reschedule":     {"topic": {"orders"}, "id": {"order-42"}, "delay": {"1s"}},
		"/ui/dead/replay":            {"topic": {"orders"}, "id": {"dead-1"}},
		"/ui/dead/delete":            {"topic": {"orders"}, "id": {"dead-1"}},
		"/ui/dead/replay-all":        {"topic": {"orders"}},
		"/ui/dead/purge":             {"topic": {"orders"}},
		"/ui/topics/orders/settings": {"max_attempts": {"3"}},
		"/ui/topics/orders/pause":    {},
	}
}

// seed makes one scheduled message and one dead letter in "orders".
func seed(t *testing.T, b *bundle) {
	t.Helper()
	b.send(t, "orders", "order-42", time.Hour)
	b.kill(t, "orders", "dead-1", "boom: card declined")
}

// unchanged checks that seed's state is intact.
func unchanged(t *testing.T, b *bundle) {
	t.Helper()
	if s := b.state(t, "orders", "order-42"); s != domain.StateScheduled {
		t.Errorf("order-42 is %s, want scheduled", s)
	}
	if s := b.state(t, "orders", "dead-1"); s != domain.StateDead {
		t.Errorf("dead-1 is %s, want dead", s)
	}
	ti, err := b.eng.Topic(t.Context(), "orders")
	if err != nil || ti.Settings.MaxAttempts == 3 || ti.Paused {
		t.Errorf("settings changed: %+v %v", ti, err)
	}
}

func TestUnauthenticatedSeesNothingAndChangesNothing(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	br := b.browser(t)
	for _, path := range pagesToProbe {
		p := br.get(path)
		if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/login" {
			t.Errorf("GET %s: %d to %q, want 303 to /ui/login", path, p.status, p.header.Get("Location"))
		}
		wantNotBody(t, p, "orders", "order-42", "card declined")
	}
	login := br.get("/ui/login")
	wantStatus(t, login, http.StatusOK)
	wantNotBody(t, login, "orders", "Topics</a>")
	for path, form := range actions() {
		// With the visitor's valid CSRF token and a same-origin header: only the session is missing.
		p := br.post(path, form)
		if p.status != http.StatusUnauthorized {
			t.Errorf("POST %s without a session: %d, want 401", path, p.status)
		}
		wantNotBody(t, p, "order-42", "card declined")
	}
	// A forged session cookie is no session.
	u, _ := url.Parse(b.ts.URL + "/ui/")
	br.c.Jar.SetCookies(u, []*http.Cookie{{Name: "delayq_session", Value: "forged-session-id", Path: "/ui/"}})
	if p := br.get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("forged session: %d, want 303", p.status)
	}
	unchanged(t, b)
}

func TestLogin(t *testing.T) {
	b := setup(t, setupOpts{})
	br := b.browser(t)
	br.get("/ui/login")
	bad := br.post("/ui/login", url.Values{"token": {"not-a-token-0123456789"}})
	wantStatus(t, bad, http.StatusUnauthorized)
	wantBody(t, bad, "not configured")

	p := br.post("/ui/login", url.Values{"token": {opsSecret}})
	wantStatus(t, p, http.StatusSeeOther)
	var sc *http.Cookie
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if c.Name == "delayq_session" {
			sc = c
		}
	}
	switch {
	case sc == nil:
		t.Fatal("no session cookie")
	case !sc.HttpOnly || sc.SameSite != http.SameSiteStrictMode || sc.Secure:
		t.Errorf("cookie flags: %+v (want HttpOnly, SameSite=Strict, not Secure over plain HTTP)", sc)
	case strings.Contains(sc.Value, opsSecret) || len(sc.Value) < 40:
		t.Errorf("cookie value %q must be a signed session, not the token", sc.Value)
	}
	home := br.get("/ui/")
	wantStatus(t, home, http.StatusOK)
	wantBody(t, home, "ops", "admin", "Log out")

	// Logging out clears the cookie and revokes the session on this
	// server: a copy of the old cookie is refused here.
	old := sc.Value
	wantStatus(t, br.post("/ui/logout", nil), http.StatusSeeOther)
	replay := b.browser(t)
	u, _ := url.Parse(b.ts.URL + "/ui/")
	replay.c.Jar.SetCookies(u, []*http.Cookie{{Name: "delayq_session", Value: old, Path: "/ui/"}})
	if p := replay.get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("session after logout: %d, want 303 to login", p.status)
	}
}

func TestLoginCookieSecureOverTLS(t *testing.T) {
	b := setup(t, setupOpts{tls: true})
	br := b.browser(t)
	br.get("/ui/login")
	p := br.post("/ui/login", url.Values{"token": {opsSecret}})
	wantStatus(t, p, http.StatusSeeOther)
	for _, c := range (&http.Response{Header: p.header}).Cookies() {
		if !c.Secure || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
			t.Errorf("cookie %s over TLS: %+v", c.Name, c)
		}
	}
}

func TestReadOnlyTokenCannotAct(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	br := b.login(t, viewerSecret)
	home := br.get("/ui/")
	wantBody(t, home, "viewer", "read-only", "orders")
	msg := br.get("/ui/message?topic=orders&id=order-42")
	wantStatus(t, msg, http.StatusOK)
	wantBody(t, msg, "order-42", "scheduled")
	wantNotBody(t, msg, `id="cancel"`, `id="reschedule"`)
	dead := br.get("/ui/dead?topic=orders")
	wantBody(t, dead, "dead-1", "card declined")
	wantNotBody(t, dead, "Replay", "Purge")
	topic := br.get("/ui/topics/orders")
	wantBody(t, topic, "Read-only")
	wantNotBody(t, topic, "Save settings")
	for path, form := range actions() {
		p := br.post(path, form) // valid session and CSRF token: only the scope is missing
		if p.status != http.StatusForbidden {
			t.Errorf("POST %s as viewer: %d, want 403", path, p.status)
		}
	}
	unchanged(t, b)
}

func TestTopicScopes(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	b.send(t, "billing.invoices", "inv-1", time.Hour)
	br := b.login(t, billingSecret)
	home := br.get("/ui/")
	wantBody(t, home, "billing.invoices")
	wantNotBody(t, home, `>orders<`)
	for _, path := range []string{"/ui/topics/orders", "/ui/upcoming?topic=orders", "/ui/dead?topic=orders", "/ui/message?topic=orders&id=order-42", "/ui/timeliness?topic=orders"} {
		if p := br.get(path); p.status != http.StatusForbidden {
			t.Errorf("GET %s as billing: %d, want 403", path, p.status)
		}
	}
	// Admin on billing.* acts there, not elsewhere.
	wantStatus(t, br.post("/ui/message/cancel", url.Values{"topic": {"orders"}, "id": {"order-42"}}), http.StatusForbidden)
	wantStatus(t, br.post("/ui/message/cancel", url.Values{"topic": {"billing.invoices"}, "id": {"inv-1"}}), http.StatusSeeOther)
	if s := b.state(t, "billing.invoices", "inv-1"); s != "absent" {
		t.Errorf("inv-1 is %s after cancel", s)
	}
	unchanged(t, b)

	// A produce-only token may look a message up, but not read topic stats.
	pr := b.login(t, producerSecret)
	wantStatus(t, pr.get("/ui/message?topic=orders&id=order-42"), http.StatusOK)
	wantStatus(t, pr.get("/ui/topics/orders"), http.StatusForbidden)
	wantNotBody(t, pr.get("/ui/"), "order-42", `>orders<`)
}

func TestCSRF(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	br := b.login(t, opsSecret)
	other := b.login(t, opsSecret) // a second session has its own token
	form := func() url.Values { return url.Values{"topic": {"orders"}, "id": {"order-42"}} }
	cases := []struct {
		name string
		csrf *string
		hdr  []string
	}{
		{"no token", new(string), nil},
		{"wrong token", ptr("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"), nil},
		{"another session's token", &other.csrf, nil},
		{"cross-site Origin", nil, []string{"Origin", "https://evil.example"}},
		{"null Origin", nil, []string{"Origin", "null"}},
		{"cross-site Referer", nil, []string{"Origin", "", "Referer", "https://evil.example/page"}},
		{"Sec-Fetch-Site cross-site", nil, []string{"Sec-Fetch-Site", "cross-site"}},
		{"Sec-Fetch-Site same-site", nil, []string{"Sec-Fetch-Site", "same-site"}},
	}
	for _, c := range cases {
		f := form()
		if c.csrf != nil {
			f.Set("csrf", *c.csrf)
		}
		p := br.post("/ui/message/cancel", f, c.hdr...)
		if p.status != http.StatusForbidden {
			t.Errorf("%s: %d, want 403", c.name, p.status)
		}
	}
	unchanged(t, b)
	// The same request from the page itself works (also without Origin:
	// a non-browser client still needs the token).
	wantStatus(t, br.post("/ui/message/cancel", form(), "Origin", ""), http.StatusSeeOther)
	if s := b.state(t, "orders", "order-42"); s != "absent" {
		t.Errorf("order-42 is %s after cancel", s)
	}
}

func ptr[T any](v T) *T { return &v }

func TestAuthOffIsOpenButCSRFProtected(t *testing.T) {
	b := setup(t, setupOpts{noAuth: true})
	seed(t, b)
	br := b.browser(t)
	home := br.get("/ui/")
	wantStatus(t, home, http.StatusOK)
	wantBody(t, home, "auth off", "orders")
	if p := br.get("/ui/login"); p.status != http.StatusSeeOther {
		t.Errorf("login page with auth off: %d, want redirect", p.status)
	}
	f := url.Values{"topic": {"orders"}, "id": {"order-42"}}
	wantStatus(t, br.post("/ui/message/cancel", url.Values{"topic": {"orders"}, "id": {"order-42"}, "csrf": {""}}), http.StatusForbidden)
	stranger := b.browser(t) // another browser's token does not work here
	stranger.get("/ui/")
	wantStatus(t, br.post("/ui/message/cancel", url.Values{"topic": {"orders"}, "id": {"order-42"}, "csrf": {stranger.csrf}}), http.StatusForbidden)
	wantStatus(t, br.post("/ui/message/cancel", f, "Origin", "http://evil.example"), http.StatusForbidden)
	unchanged(t, b)
	br.get("/ui/message?topic=orders&id=order-42") // the page with the cancel form
	wantStatus(t, br.post("/ui/message/cancel", f), http.StatusSeeOther)
}

func TestSecurityHeaders(t *testing.T) {
	b := setup(t, setupOpts{noAuth: true})
	p := b.browser(t).get("/ui/")
	csp := p.header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "default-src 'none'") || strings.Contains(csp, "script-src") {
		t.Errorf("CSP %q must forbid scripts", csp)
	}
	if p.header.Get("X-Frame-Options") != "DENY" || p.header.Get("Cache-Control") != "no-store" {
		t.Errorf("headers: %v", p.header)
	}
	if strings.Contains(p.body, "<script") {
		t.Error("the dashboard must not use scripts")
	}
}

// TestStaticNoDirectoryListing: the static directory is not listed (it
// would reveal the embedded file names), and files are still served.
func TestStaticNoDirectoryListing(t *testing.T) {
	b := setup(t, setupOpts{})
	br := b.browser(t)
	for _, path := range []string{"/ui/static/", "/ui/static", "/ui/static/.", "/ui/static//", "/ui/static/style.css/"} {
		p := br.get(path)
		if p.status == http.StatusOK || strings.Contains(p.body, `href="style.css"`) {
			t.Errorf("GET %s: %d, a listing of the static files:\n%s", path, p.status, p.body)
		}
	}
	p := br.get("/ui/static/")
	wantStatus(t, p, http.StatusNotFound)
	if p.header.Get("Cache-Control") != "no-store" {
		t.Errorf("a 404 is cached: Cache-Control %q", p.header.Get("Cache-Control"))
	}
	wantStatus(t, br.get("/ui/static/style.css"), http.StatusOK)
	wantStatus(t, br.get("/ui/static/nope.css"), http.StatusNotFound)
}

// sessionCookieOf is the delayq_session cookie the browser holds.
func sessionCookieOf(t *testing.T, br *browser) *http.Cookie {
	t.Helper()
	u, _ := url.Parse(br.b.ts.URL + "/ui/")
	for _, c := range br.c.Jar.Cookies(u) {
		if c.Name == "delayq_session" {
			return c
		}
	}
	t.Fatal("the browser holds no session cookie")
	return nil
}

// withCookie is a fresh browser on b holding only the session cookie value.
func withCookie(t *testing.T, b *bundle, value string) *browser {
	br := b.browser(t)
	u, _ := url.Parse(b.ts.URL + "/ui/")
	br.c.Jar.SetCookies(u, []*http.Cookie{{Name: "delayq_session", Value: value, Path: "/ui/"}})
	return br
}

// TestSessionsAcrossServers: two servers (own engines, own processes'
// worth of state) configured with the same session key and tokens, as
// behind a load balancer without sticky sessions. A login on one works on
// the other, forms shown by one post to the other (CSRF), and a server
// with another key refuses the cookie; a tampered cookie is no session.
func TestSessionsAcrossServers(t *testing.T) {
	key := []byte("shared-session-key-0123456789abcdef")
	a := setup(t, setupOpts{sessionKeys: [][]byte{key}})
	b := setup(t, setupOpts{sessionKeys: [][]byte{[]byte("rotated-key-0123456789abcdef012345"), key}})
	other := setup(t, setupOpts{sessionKeys: [][]byte{[]byte("another-key-0123456789abcdef012345")}})
	seed(t, b)

	br := a.login(t, opsSecret) // on a
	cookie := sessionCookieOf(t, br).Value
	// The same browser on b: a cookie jar sends 127.0.0.1's cookies to
	// any port, as a browser sends them to any server behind one name.
	br.b = b
	home := br.get("/ui/topics/orders")
	wantStatus(t, home, http.StatusOK)
	wantBody(t, home, "ops", "Log out")
	// The form token a's page gave works on b, and b's page's on b.
	br.b = a
	br.get("/ui/")
	br.b = b
	wantStatus(t, br.post("/ui/topics/orders/pause", nil), http.StatusSeeOther)
	if ti, err := b.eng.Topic(t.Context(), "orders"); err != nil || !ti.Paused {
		t.Fatalf("pause through b with a's session and form token: %+v %v", ti, err)
	}
	// A CSRF token is still required: a wrong one is refused on b.
	if p := br.post("/ui/topics/orders/resume", url.Values{"csrf": {"forged"}}); p.status != http.StatusForbidden {
		t.Errorf("resume with a forged CSRF token: %d, want 403", p.status)
	}
	// A server with another key: no session.
	if p := withCookie(t, other, cookie).get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("server with another key: %d, want 303 to login", p.status)
	}
	// Tampered: the token name swapped for another's, one MAC character changed.
	parts := strings.SplitN(cookie, ".", 5)
	renamed := strings.Join(append(parts[:4:4], "viewer"), ".")
	mac := []byte(parts[3])
	mac[0] ^= 1
	flipped := strings.Join([]string{parts[0], parts[1], parts[2], string(mac), parts[4]}, ".")
	for _, bad := range []string{renamed, flipped} {
		if p := withCookie(t, b, bad).get("/ui/"); p.status != http.StatusSeeOther {
			t.Errorf("tampered cookie %q: %d, want 303 to login", bad, p.status)
		}
	}
	// Logout on b clears the cookie and revokes it on b; a keeps
	// accepting a copy until it expires (documented).
	wantStatus(t, br.post("/ui/logout", nil), http.StatusSeeOther)
	if p := withCookie(t, b, cookie).get("/ui/"); p.status != http.StatusSeeOther {
		t.Errorf("b after logout on b: %d, want 303 to login", p.status)
	}
	if p := withCookie(t, a, cookie).get("/ui/"); p.status != http.StatusOK {
		t.Errorf("a copy of the cookie on a after logout on b: %d (a keeps no shared state; 200 expected)", p.status)
	}
}

// TestLoginFloodKeepsOtherIdentitiesSessions: any token holder can log in
// again and again; that must not log out the users of other tokens.
// Sessions are signed cookies, not server state, so a flood has nothing
// to fill.
func TestLoginFloodKeepsOtherIdentitiesSessions(t *testing.T) {
	b := setup(t, setupOpts{})
	victim := b.login(t, opsSecret)
	wantStatus(t, victim.get("/ui/"), http.StatusOK)
	var first, last string
	for i := range 300 {
		br := b.login(t, producerSecret)
		v := sessionCookieOf(t, br).Value
		if i == 0 {
			first = v
		}
		last = v
	}
	if s := victim.get("/ui/").status; s != http.StatusOK {
		t.Errorf("another token's login flood logged the ops user out: GET /ui/ %d, want 200", s)
	}
	for _, v := range []string{first, last} {
		if s := withCookie(t, b, v).get("/ui/").status; s != http.StatusOK {
			t.Errorf("a flooder's session: %d, want 200", s)
		}
	}
}

// TestPushURLNeedsGlobalAdmin: in the dashboard as in the API, only an
// admin on "*" may point a topic at a push URL; an admin of billing.*
// may save the other settings with the URL unchanged.
func TestPushURLNeedsGlobalAdmin(t *testing.T) {
	b := setup(t, setupOpts{})
	ctx := context.Background()
	pushURL := func() string {
		ti, err := b.eng.Topic(ctx, "billing.eu")
		if err != nil || ti.Settings.Push == nil {
			return ""
		}
		return ti.Settings.Push.URL
	}
	billing := b.login(t, billingSecret)
	billing.get("/ui/topics/billing.eu")
	p := billing.post("/ui/topics/billing.eu/settings", url.Values{"push_url": {"http://169.254.169.254/latest"}})
	wantStatus(t, p, http.StatusForbidden)
	wantBody(t, p, `admin on &#34;*&#34;`)
	if u := pushURL(); u != "" {
		t.Fatalf("refused save stored push URL %q", u)
	}

	ops := b.login(t, opsSecret)
	ops.get("/ui/topics/billing.eu")
	wantStatus(t, ops.post("/ui/topics/billing.eu/settings", url.Values{"push_url": {"http://hooks.example/in"}}), http.StatusSeeOther)

	// The form shows billing the URL read-only and it saves unchanged.
	page := billing.get("/ui/topics/billing.eu")
	wantBody(t, page, `name="push_url" value="http://hooks.example/in" readonly`)
	wantStatus(t, billing.post("/ui/topics/billing.eu/settings", url.Values{"max_attempts": {"5"}, "push_url": {"http://hooks.example/in"}}), http.StatusSeeOther)
	if ti, err := b.eng.Topic(ctx, "billing.eu"); err != nil || ti.Settings.MaxAttempts != 5 || pushURL() != "http://hooks.example/in" {
		t.Fatalf("topic admin's save: %+v %v", ti, err)
	}
	billing.get("/ui/topics/billing.eu")
	wantStatus(t, billing.post("/ui/topics/billing.eu/settings", url.Values{"push_url": {"http://10.0.0.1/"}}), http.StatusForbidden)
	if u := pushURL(); u != "http://hooks.example/in" {
		t.Fatalf("push URL %q after a refused change", u)
	}
	wantNotBody(t, ops.get("/ui/topics/billing.eu"), "readonly")
}
