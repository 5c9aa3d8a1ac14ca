package dashboard

import (
	"bytes"
	"cmp"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// Defaults of Config.
const (
	DefaultSessionTTL         = 8 * time.Hour
	DefaultMaxRevokedSessions = 10000
	// formBodyBytes bounds a form post (settings are the largest).
	formBodyBytes = 64 << 10
)

//go:embed templates/*.html static/*
var assets embed.FS

// Config configures a Dashboard. The zero value of each field means its
// default, stated on the field.
type Config struct {
	// Queue is read and acted on: the engine. Required. Its events, the
	// dashboard's own actions included, reach the Recorder through the
	// engine's event stream.
	Queue domain.Queue
	// Recorder supplies rates, lateness and message histories; it must
	// be subscribed to the engine's events (Recorder.Subscription).
	// Required.
	Recorder *Recorder
	// Upcoming counts scheduled messages by due time (the engine does).
	// Default: the Recorder's sends since start, labelled so on the page
	// (required when the Recorder was made with NoUpcoming).
	Upcoming UpcomingSource
	// Browse lists a topic's scheduled messages from the store's index,
	// soonest first, for the Upcoming page's list (the engine does).
	// Default: Queue, if it implements MessageBrowser; else no list.
	Browse MessageBrowser
	// Tokens are the API's tokens; nil or empty means auth is off and the
	// dashboard is open (still CSRF-protected).
	Tokens *auth.Set
	// Logger for failures. Default slog.Default().
	Logger *slog.Logger
	// Now reads the time. Default time.Now.
	Now func() time.Time
	// SessionTTL is how long a login lasts. Default 8 h.
	SessionTTL time.Duration
	// SessionKeys sign session cookies and CSRF tokens (HMAC-SHA256),
	// each at least MinSessionKeyBytes long. The first signs; all verify,
	// so a rotation lists the new key first and keeps the old one until
	// its sessions have expired (SessionTTL). Servers with the same keys
	// and tokens accept each other's logins and forms. Default: one
	// random key per process (a login works only on the server that made
	// it, and only until it restarts).
	SessionKeys [][]byte
	// MaxRevokedSessions bounds the logged-out sessions this server
	// remembers until they expire. Default 10000.
	MaxRevokedSessions int
}

// Dashboard is the operator web UI, an http.Handler for paths under /ui/.
// It is safe for concurrent use.
type Dashboard struct {
	cfg      Config
	log      *slog.Logger
	q        domain.Queue
	rec      *Recorder
	upcoming UpcomingSource
	fallback bool           // upcoming is the Recorder
	browse   MessageBrowser // nil: no list of upcoming messages
	pauser   Pauser         // nil: no pause and resume
	deleter  TopicDeleter   // nil: topics cannot be deleted
	sessions *sessionSigner
	pages    map[string]*template.Template
	mux      *http.ServeMux
	static   http.Handler
	staticFS fs.FS
}

// New checks cfg and builds the dashboard.
func New(cfg Config) (*Dashboard, error) {
	if cfg.Queue == nil || cfg.Recorder == nil {
		return nil, errors.New("dashboard: Config.Queue and Config.Recorder are required")
	}
	if cfg.Upcoming == nil && cfg.Recorder.cfg.NoUpcoming {
		return nil, errors.New("dashboard: Config.Upcoming is required with a Recorder made with NoUpcoming")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.SessionTTL = cmp.Or(cfg.SessionTTL, DefaultSessionTTL)
	cfg.MaxRevokedSessions = cmp.Or(cfg.MaxRevokedSessions, DefaultMaxRevokedSessions)
	for i, k := range cfg.SessionKeys {
		if len(k) < MinSessionKeyBytes {
			return nil, fmt.Errorf("dashboard: session key %d is %d bytes; want at least %d (e.g. openssl rand -base64 32)", i+1, len(k), MinSessionKeyBytes)
		}
	}
	if len(cfg.SessionKeys) == 0 {
		cfg.SessionKeys = [][]byte{[]byte(randomID())}
	}
	d := &Dashboard{
		cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()),
		q: cfg.Queue, rec: cfg.Recorder,
		sessions: &sessionSigner{keys: cfg.SessionKeys, tokens: cfg.Tokens, now: cfg.Now, ttl: cfg.SessionTTL,
			revoked: newRevokedSet(cfg.MaxRevokedSessions)},
	}
	d.upcoming, d.fallback = findUpcoming(cfg)
	d.browse = cfg.Browse
	if b, ok := cfg.Queue.(MessageBrowser); ok && d.browse == nil {
		d.browse = b
	}
	d.pauser, _ = cfg.Queue.(Pauser)
	d.deleter, _ = cfg.Queue.(TopicDeleter)
	var err error
	if d.pages, err = parsePages(); err != nil {
		return nil, err
	}
	d.staticFS, _ = fs.Sub(assets, "static")
	d.static = http.StripPrefix("/ui/static/", http.FileServerFS(d.staticFS))
	d.mux = http.NewServeMux()
	d.routes()
	return d, nil
}

// findUpcoming picks Config.Upcoming, else the Recorder's fallback.
func findUpcoming(cfg Config) (UpcomingSource, bool) {
	if cfg.Upcoming != nil {
		return cfg.Upcoming, false
	}
	return cfg.Recorder, true
}

// handler answers one page or action for an identified viewer. An error
// is shown as an error page with the status of statusOf.
type handler func(w http.ResponseWriter, r *http.Request, v *viewer) error

func (d *Dashboard) routes() {
	d.handle("GET /ui/{$}", d.topicsPage)
	d.handle("GET /ui/topics/{topic}", d.topicPage)
	d.handle("POST /ui/topics/{topic}/settings", d.saveSettings)
	d.handle("POST /ui/topics/{topic}/pause", d.pauseTopic)
	d.handle("POST /ui/topics/{topic}/resume", d.resumeTopic)
	d.handle("POST /ui/topics/{topic}/delete", d.deleteTopic)
	d.handle("GET /ui/upcoming", d.upcomingPage)
	d.handle("GET /ui/timeliness", d.timelinessPage)
	d.handle("GET /ui/message", d.messagePage)
	d.handle("POST /ui/message/cancel", d.cancelMessage)
	d.handle("POST /ui/message/reschedule", d.rescheduleMessage)
	d.handle("GET /ui/dead", d.deadPage)
	d.handle("POST /ui/dead/replay", d.deadReplay)
	d.handle("POST /ui/dead/delete", d.deadDelete)
	d.handle("POST /ui/dead/replay-all", d.deadReplayAll)
	d.handle("POST /ui/dead/purge", d.deadPurge)
	d.handle("GET /ui/login", d.loginPage)
	d.handle("POST /ui/login", d.login)
	d.handle("POST /ui/logout", d.logout)
	d.handle("/ui/", func(http.ResponseWriter, *http.Request, *viewer) error { return errPageNotFound })
}

func (d *Dashboard) handle(pattern string, h handler) {
	d.mux.Handle(pattern, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		v := viewerFrom(r)
		if err := h(w, r, v); err != nil {
			d.renderError(w, r, v, err)
		}
	}))
}

// ServeHTTP serves the dashboard: security headers, static files, then
// the gate (who is this, may they see anything, is a POST same-origin
// with a valid CSRF token), then the page.
func (d *Dashboard) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'self'; img-src 'self' data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
	h.Set("X-Frame-Options", "DENY")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	if name, ok := strings.CutPrefix(r.URL.Path, "/ui/static/"); ok {
		// Files only: http.FileServer would list a directory.
		if fi, err := fs.Stat(d.staticFS, name); err != nil || fi.IsDir() {
			h.Set("Cache-Control", "no-store")
			d.renderError(w, r, nil, errPageNotFound)
			return
		}
		h.Set("Cache-Control", "public, max-age=3600")
		d.static.ServeHTTP(w, r)
		return
	}
	h.Set("Cache-Control", "no-store")
	v, err := d.gate(w, r)
	if err != nil {
		d.renderError(w, r, v, err)
		return
	}
	if v == nil {
		return // gate answered (redirect to login)
	}
	d.mux.ServeHTTP(w, r.WithContext(withViewer(r.Context(), v)))
}

// gate identifies the viewer. It returns nil, nil after answering
// itself (a redirect), and an error when the request must be refused.
// Everything before a successful return reveals and changes nothing.
func (d *Dashboard) gate(w http.ResponseWriter, r *http.Request) (*viewer, error) {
	visitor := cookieValue(r, visitorCookie, 64)
	if visitor == "" {
		visitor = randomID()
		setCookie(w, r, visitorCookie, visitor, 0)
	}
	v := &viewer{authOff: !d.cfg.Tokens.Enabled()}
	csrfKind, csrfID := "visitor", visitor
	if !v.authOff {
		if sid := cookieValue(r, sessionCookie, sessionCookieMax); sid != "" {
			if s := d.sessions.verify(sid); s != nil {
				v.token, v.session, v.expires = s.token, s, s.expires
				csrfKind, csrfID = "session", sid
			}
		}
	}
	v.csrf = csrfToken(d.cfg.SessionKeys[0], csrfKind, csrfID)
	loginPath := r.URL.Path == "/ui/login"
	if r.Method == http.MethodPost {
		if !sameOrigin(r) {
			return v, errCrossSite
		}
		r.Body = http.MaxBytesReader(w, r.Body, formBodyBytes)
		if err := r.ParseForm(); err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return v, fmt.Errorf("form too large: %w", err)
			}
			return v, fmt.Errorf("%w: %v", domain.ErrInvalid, err)
		}
		if !csrfValid(d.cfg.SessionKeys, csrfKind, csrfID, r.PostForm.Get(csrfField)) {
			return v, errCSRF
		}
	}
	if v.authOff || v.token != nil || loginPath {
		return v, nil
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return v, errLoginRequired
	}
	http.Redirect(w, r, "/ui/login", http.StatusSeeOther)
	return nil, nil
}

// statusOf is the one place that maps an error to an HTTP status.
func statusOf(err error) int {
	var mbe *http.MaxBytesError
	switch {
	case errors.Is(err, errCrossSite), errors.Is(err, errCSRF), errors.Is(err, errReadOnly), errors.Is(err, domain.ErrForbidden):
		return http.StatusForbidden
	case errors.Is(err, errLoginRequired), errors.Is(err, domain.ErrUnauthorized):
		return http.StatusUnauthorized
	case errors.Is(err, domain.ErrInvalid):
		return http.StatusBadRequest
	case errors.Is(err, domain.ErrNotFound), errors.Is(err, errPageNotFound):
		return http.StatusNotFound
	case errors.Is(err, domain.ErrConflict):
		return http.StatusConflict
	case errors.As(err, &mbe), errors.Is(err, domain.ErrTooLarge):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, domain.ErrRateLimited):
		return http.StatusTooManyRequests
	case errors.Is(err, domain.ErrUnavailable):
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}

// renderError shows err on an error page. 500s are logged (a bug or an
// unexpected failure) and show no detail.
func (d *Dashboard) renderError(w http.ResponseWriter, r *http.Request, v *viewer, err error) {
	status := statusOf(err)
	msg := err.Error()
	if status == http.StatusInternalServerError {
		// The API's middleware gave the request its id (X-Request-Id).
		id := w.Header().Get(wire.HeaderRequestID)
		d.log.ErrorContext(r.Context(), "dashboard request failed", "method", r.Method, "path", r.URL.Path, "request_id", id, "err", err)
		msg = "internal error (logged on the server)"
		if id != "" {
			msg = "internal error (logged on the server, request " + id + ")"
		}
	}
	if v == nil {
		v = &viewer{}
	}
	d.render(w, status, "error", &page{Title: http.StatusText(status), V: v, Data: errorData{Status: status, Message: trimPrefix(msg)}})
}

type errorData struct {
	Status  int
	Message string
}

func trimPrefix(s string) string {
	const p = "delayq: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

// page is what every template gets.
type page struct {
	Title string
	Nav   string // which nav entry is current
	V     *viewer
	Flash string
	Now   time.Time
	Data  any
}

// render executes a page template into a buffer first, so a template
// failure becomes a clean 500 rather than half a page.
func (d *Dashboard) render(w http.ResponseWriter, status int, name string, p *page) {
	if p.Now.IsZero() {
		p.Now = d.cfg.Now()
	}
	var buf bytes.Buffer
	if err := d.pages[name].ExecuteTemplate(&buf, "layout.html", p); err != nil {
		d.log.Error("render dashboard page", "page", name, "err", err)
		http.Error(w, "internal error (logged on the server)", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes()) // the client went away: nothing left to tell it
}

// redirect answers a successful action: see-other to a page with a flash
// code (a fixed message chosen by code, never text from the URL).
func redirect(w http.ResponseWriter, r *http.Request, to string) error {
	http.Redirect(w, r, to, http.StatusSeeOther)
	return nil
}
