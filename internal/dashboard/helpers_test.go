package dashboard_test

import (
	"context"
	"io"
	"maps"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/dashboard"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/httpapi"
	"github.com/delayq/delayq/internal/store/memstore"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// Token secrets of the test server. ops is admin everywhere, viewer reads
// everything, billing is admin on billing.* only, producer only produces.
const (
	opsSecret      = "ops-secret-0123456789abcdef"
	viewerSecret   = "viewer-secret-0123456789ab"
	billingSecret  = "billing-secret-0123456789a"
	producerSecret = "producer-secret-0123456789"
)

func testTokens(t *testing.T) *auth.Set {
	t.Helper()
	var toks []*auth.Token
	for _, spec := range []string{
		"ops:" + opsSecret + ":admin:*",
		"viewer:" + viewerSecret + ":consume:*",
		"billing:" + billingSecret + ":admin:billing.*",
		"producer:" + producerSecret + ":produce:*",
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

// bundle is a full server: engine on a memstore, Recorder as observer,
// the API and the dashboard on one httptest server.
type bundle struct {
	eng  *engine.Engine
	q    domain.Queue // the queue the server and dashboard use: the engine
	rec  *dashboard.Recorder
	dash *dashboard.Dashboard
	ts   *httptest.Server
	api  *delayq.Client // an admin API client
}

type setupOpts struct {
	noAuth   bool
	tls      bool
	upcoming dashboard.UpcomingSource
	// plainQueue gives the dashboard no Upcoming source, as with a
	// remote queue, to test the Recorder's fallback.
	plainQueue bool
	// sessionKeys is Config.SessionKeys (nil: a random key).
	sessionKeys [][]byte
}

func setup(t *testing.T, o setupOpts) *bundle {
	t.Helper()
	st := memstore.New()
	// As a server does: a Recorder that counts upcoming messages only
	// for a dashboard with no other source.
	rec := dashboard.NewRecorder(dashboard.RecorderConfig{NoUpcoming: !o.plainQueue})
	eng, err := engine.Open(context.Background(), engine.Config{Store: st, Subscriptions: []engine.Subscription{rec.Subscription()}})
	if err != nil {
		t.Fatal(err)
	}
	b := &bundle{eng: eng, rec: rec, q: eng}
	upcoming := o.upcoming
	if upcoming == nil && !o.plainQueue {
		upcoming = eng
	}
	var tokens *auth.Set
	if !o.noAuth {
		tokens = testTokens(t)
	}
	b.dash, err = dashboard.New(dashboard.Config{Queue: b.q, Recorder: rec, Tokens: tokens, Upcoming: upcoming, SessionKeys: o.sessionKeys})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := httpapi.New(httpapi.Config{Queue: b.q, Ready: eng.Ready, Tokens: tokens, Dashboard: b.dash})
	if err != nil {
		t.Fatal(err)
	}
	if o.tls {
		b.ts = httptest.NewTLSServer(srv.Handler())
	} else {
		b.ts = httptest.NewServer(srv.Handler())
	}
	b.api, err = delayq.NewClient(b.ts.URL, delayq.WithToken(opsSecret), delayq.WithHTTPClient(b.ts.Client()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.ts.Close()
		eng.Close(context.Background())
		st.Close()
	})
	return b
}

// send schedules a message through the API.
func (b *bundle) send(t *testing.T, topic, id string, delay time.Duration) *domain.Message {
	t.Helper()
	m, err := b.api.Send(context.Background(), topic, domain.NewSendRequest([]byte(`{"order":42}`), domain.WithID(id), domain.After(delay)))
	if err != nil {
		t.Fatalf("send %s/%s: %v", topic, id, err)
	}
	return m
}

// kill makes a dead letter through the API: a one-attempt message, leased
// and nacked with reason.
func (b *bundle) kill(t *testing.T, topic, id, reason string) {
	t.Helper()
	ctx := context.Background()
	if _, err := b.api.Send(ctx, topic, domain.NewSendRequest([]byte("x"), domain.WithID(id), domain.WithMaxAttempts(1))); err != nil {
		t.Fatal(err)
	}
	ms, err := b.api.Lease(ctx, topic, domain.LeaseRequest{Max: 1, Wait: 5 * time.Second})
	if err != nil || len(ms) != 1 || ms[0].ID != id {
		t.Fatalf("lease %s/%s: %v %v", topic, id, ms, err)
	}
	m, err := b.api.Nack(ctx, topic, id, ms[0].Receipt, domain.NackRequest{Reason: reason})
	if err != nil || m.State != domain.StateDead {
		t.Fatalf("nack %s/%s: %+v %v", topic, id, m, err)
	}
}

func (b *bundle) state(t *testing.T, topic, id string) domain.State {
	t.Helper()
	m, err := b.eng.Get(context.Background(), topic, id)
	if err != nil {
		return "absent"
	}
	return m.State
}

// browser is a cookie-keeping HTTP client that does not follow redirects.
type browser struct {
	t    *testing.T
	b    *bundle
	c    *http.Client
	csrf string // from the last page that had a form
}

func (b *bundle) browser(t *testing.T) *browser {
	jar, _ := cookiejar.New(nil)
	c := *b.ts.Client()
	c.Jar = jar
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &browser{t: t, b: b, c: &c}
}

// page is an answer.
type page struct {
	status int
	header http.Header
	body   string
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func (br *browser) do(req *http.Request) page {
	br.t.Helper()
	res, err := br.c.Do(req)
	if err != nil {
		br.t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	p := page{status: res.StatusCode, header: res.Header, body: string(raw)}
	if m := csrfRe.FindStringSubmatch(p.body); m != nil {
		br.csrf = m[1]
	}
	return p
}

func (br *browser) get(path string) page {
	br.t.Helper()
	req, _ := http.NewRequest("GET", br.b.ts.URL+path, nil)
	return br.do(req)
}

// post submits a form as the dashboard's own page would: same Origin,
// with the CSRF token of the last page (unless form sets csrf).
func (br *browser) post(path string, form url.Values, hdr ...string) page {
	br.t.Helper()
	form = maps.Clone(form)
	if form == nil {
		form = url.Values{}
	}
	if _, ok := form["csrf"]; !ok {
		form.Set("csrf", br.csrf)
	}
	req, _ := http.NewRequest("POST", br.b.ts.URL+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", br.b.ts.URL)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	return br.do(req)
}

// login logs in with secret and returns the browser.
func (b *bundle) login(t *testing.T, secret string) *browser {
	t.Helper()
	br := b.browser(t)
	br.get("/ui/login")
	p := br.post("/ui/login", url.Values{"token": {secret}})
	if p.status != http.StatusSeeOther || p.header.Get("Location") != "/ui/" {
		t.Fatalf("login: %d %s", p.status, p.body)
	}
	br.get("/ui/") // picks up the session's CSRF token
	return br
}

func wantStatus(t *testing.T, p page, status int) {
	t.Helper()
	if p.status != status {
		t.Fatalf("status %d, want %d; body:\n%s", p.status, status, p.body)
	}
}

func wantBody(t *testing.T, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if !strings.Contains(p.body, s) {
			t.Errorf("page lacks %q; body:\n%s", s, p.body)
		}
	}
}

func wantNotBody(t *testing.T, p page, subs ...string) {
	t.Helper()
	for _, s := range subs {
		if strings.Contains(p.body, s) {
			t.Errorf("page shows %q but must not", s)
		}
	}
}
