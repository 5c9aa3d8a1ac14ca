package httpapi

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// call is one request as a handler sees it: authenticated, with the path
// values checked and the body read (up to the route's limit).
type call struct {
	w     http.ResponseWriter
	r     *http.Request
	topic string // validated when the route has {topic}
	id    string // validated when the route has {id}
	token *auth.Token
	// body is reused for another request once the handler has returned
	// and its answer is written: whatever is kept must be copied out.
	body []byte
	held int64 // body bytes charged to the budget, released after the handler
}

// handlerFunc answers a call: status and a value to write as JSON, or an
// error for toHTTP. Status 0 with a nil value and error means the handler
// wrote the response itself.
type handlerFunc func(c *call) (int, any, error)

// wrap turns a route into an http.Handler: authentication and scope
// first (so a 401/403 reveals nothing and changes nothing), then query,
// path and body checks, then the handler.
func (s *Server) wrap(rt route) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = rt.pattern
		}
		c := &call{w: w, r: r}
		defer func() { s.budget.release(c.held); putBody(c.body) }()
		var err error
		if rt.access != open { // health checks are never rate limited
			err = s.limitIP(r)
		}
		if err == nil && crossOrigin(r) {
			err = errCrossOrigin
		}
		if err == nil {
			err = s.prepare(c, rt)
		}
		if sw, ok := w.(*statusWriter); ok && c.token != nil {
			sw.token = c.token.Name
		}
		var status int
		var v any
		if err == nil {
			status, v, err = rt.h(c)
		}
		switch {
		case err != nil:
			s.writeError(w, r, err)
		case v != nil:
			writeAnswer(w, status, v)
		}
	})
}

// named serves h outside the routing table (no bearer auth, no body
// checks), under a fixed route name for logs and metrics.
func named(route string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if sw, ok := w.(*statusWriter); ok {
			sw.route = route
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) prepare(c *call, rt route) error {
	r := c.r
	if err := s.authorize(c, rt); err != nil {
		return err
	}
	if err := s.limitToken(c); err != nil { // before reading the body
		return err
	}
	if err := checkQuery(r.URL, rt.query); err != nil {
		return err
	}
	if c.topic = r.PathValue("topic"); c.topic != "" || rt.access == topicScope {
		if err := domain.ValidateTopic(c.topic); err != nil {
			return err
		}
	}
	if c.id = r.PathValue("id"); c.id != "" {
		if err := domain.ValidateID(c.id); err != nil {
			return err
		}
	}
	if rt.limit > 0 {
		if err := checkJSONType(r); err != nil {
			return err
		}
		b, held, err := s.readBody(c.w, r, rt.limit)
		if err != nil {
			return err
		}
		c.body, c.held = b, held
	}
	return nil
}

// authorize checks the bearer token and the route's scope. With auth off
// everything is allowed.
func (s *Server) authorize(c *call, rt route) error {
	if rt.access == open || !s.cfg.Tokens.Enabled() {
		return nil
	}
	tok, err := s.cfg.Tokens.Authenticate(c.r.Header)
	if err != nil {
		return err
	}
	c.token = tok
	var ok bool
	switch rt.access {
	case topicScope:
		ok = tok.Allows(rt.scope, c.r.PathValue("topic"))
	case anyTopic:
		ok = tok.Has(rt.scope)
	case everywhere:
		ok = tok.AllowsEverywhere(rt.scope)
	}
	switch {
	case ok:
		return nil
	case !tok.Has(rt.scope):
		return fmt.Errorf("%w: token %q lacks the %s scope for this request", domain.ErrForbidden, tok.Name, rt.scope)
	case rt.access == topicScope:
		// The scope is there, the topic is not: say which, not "lacks the scope".
		return fmt.Errorf("%w: topic %q is outside the topics of token %q (%s)", domain.ErrForbidden, c.r.PathValue("topic"), tok.Name, strings.Join(tok.Patterns, ","))
	default:
		return fmt.Errorf("%w: token %q has the %s scope on some topics only (%s); this request needs it on every topic (\"*\")", domain.ErrForbidden, tok.Name, rt.scope, strings.Join(tok.Patterns, ","))
	}
}

// allowed reports whether the call's token (if any) may see topic with scope.
func (c *call) allowed(scope auth.Scope, topic string) bool {
	return c.token == nil || c.token.Allows(scope, topic)
}

// checkQuery rejects unknown, repeated or malformed query parameters: the
// API is strict about input, and tokens in query strings are never read.
func checkQuery(u *url.URL, allowed []string) error {
	if u.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return domain.Invalid("", "malformed query string")
	}
	for k, v := range q {
		if !slices.Contains(allowed, k) {
			return domain.Invalid(k, "is not a query parameter of this endpoint")
		}
		if len(v) > 1 {
			return domain.Invalid(k, "is given more than once")
		}
	}
	return nil
}

// serveHTTP is the outermost handler: the request id, panic recovery,
// security headers, the server span (with tracing on), request metrics and
// the per-request log line.
func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	h := w.Header()
	id := incomingRequestID(r.Header)
	if id == "" {
		id = s.requestIDs.Next(start.UnixMilli())
	}
	h[wire.HeaderRequestID] = []string{id} // canonical key: what Set would do, minus the canonicalization
	var span trace.Span
	if s.tracer != nil {
		r, span = s.startSpan(r, id)
	}
	sw := &statusWriter{ResponseWriter: w, srv: s, r: r}
	if o := s.cfg.RequestObserver; o != nil {
		o.RequestStarted()
		defer o.RequestDone()
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				if span != nil {
					span.End()
				}
				panic(p)
			}
			s.log.Error("panic serving request", "method", r.Method, "path", r.URL.Path, "request_id", id, "panic", p, "stack", string(debug.Stack()))
			if sw.status == 0 {
				s.writeError(sw, r, fmt.Errorf("panic: %v", p))
			}
		}
		method, route, code := metricMethod(r.Method), routePath(sw.route), sw.code()
		d := time.Since(start)
		if o := s.cfg.RequestObserver; o != nil {
			o.ObserveRequest(method, route, code, d)
		}
		if span != nil {
			endSpan(span, method, route, code)
		}
		if s.log.Enabled(r.Context(), slog.LevelDebug) { // else the arguments cost allocations for nothing
			s.log.DebugContext(r.Context(), "request", "method", r.Method, "route", route, "status", code,
				"duration", d, "bytes", sw.written, "remote", r.RemoteAddr, "token", sw.token, "request_id", id)
		}
	}()
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	if r.TLS != nil && !isLocalhostName(r.Host) {
		h.Set("Strict-Transport-Security", hstsValue)
	}
	if !s.hosts.allows(r.Host) {
		// Before routing: a rebound page learns nothing, not even which
		// paths exist.
		sw.route = "refused host"
		s.writeError(sw, r, &hostError{host: r.Host})
		return
	}
	s.mux.ServeHTTP(sw, r)
}

// statusWriter records the status for logs and metrics, and turns
// ServeMux's own plain-text 404/405 answers (written when no route
// matched, so route is still empty) into the API's JSON error shape.
type statusWriter struct {
	http.ResponseWriter
	srv     *Server
	r       *http.Request
	route   string // set by the matched route's wrapper, else "unmatched"
	status  int
	written int64
	swallow bool // ServeMux answered itself: its body is dropped
	token   string
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	if w.route == "" {
		w.route = "unmatched"
		var err error = errRouteNotFound
		if code == http.StatusMethodNotAllowed {
			err = &methodError{allow: w.Header().Get("Allow")}
		}
		w.Header().Del("Location") // ServeMux redirects non-canonical paths; we answer 404
		w.srv.writeError(w, w.r, err)
		w.swallow = true
		return
	}
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallow {
		return len(b), nil
	}
	n, err := w.ResponseWriter.Write(b)
	w.written += int64(n)
	return n, err
}

// Unwrap lets http.ResponseController reach the connection.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) code() int {
	if w.status == 0 {
		return http.StatusOK
	}
	return w.status
}
