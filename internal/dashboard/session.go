package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/auth"
)

// Cookie names. Both are HttpOnly, SameSite=Strict, Path /ui/, and Secure
// when the request came over TLS.
const (
	// sessionCookie holds a random session id; the server maps its
	// SHA-256 to the token's identity and an expiry. The token's secret
	// is never stored in a cookie or in memory after login.
	sessionCookie = "delayq_session"
	// visitorCookie holds a random id given to every browser, so forms
	// shown before login (the login form itself) and every form when auth
	// is off carry a CSRF token bound to this browser.
	visitorCookie = "delayq_visitor"
	csrfField     = "csrf"
)

// session is a logged-in browser.
type session struct {
	token   *auth.Token
	expires time.Time
}

type sessionKey = [sha256.Size]byte

// sessionStore maps hashed session ids to sessions. It holds at most
// perToken sessions per token (by name): a login beyond that ends the
// token's oldest session, never another token's, so one token holder
// logging in over and over cannot log everybody else out. It holds at
// most max sessions in all: when full, expired ones are dropped, then the
// oldest session of the token holding the most. Safe for concurrent use.
type sessionStore struct {
	now      func() time.Time
	ttl      time.Duration
	max      int
	perToken int

	mu      sync.Mutex
	m       map[sessionKey]*session
	byToken map[string][]sessionKey // oldest first (one TTL for all: expiry order)
}

func newSessionStore(now func() time.Time, ttl time.Duration, max, perToken int) *sessionStore {
	return &sessionStore{
		now: now, ttl: ttl, max: max, perToken: perToken,
		m: make(map[sessionKey]*session), byToken: make(map[string][]sessionKey),
	}
}

// create starts a session for tok and returns its id.
func (s *sessionStore) create(tok *auth.Token) string {
	id := randomID()
	k := sha256.Sum256([]byte(id))
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if own := s.byToken[tok.Name]; len(own) > 0 && len(own) >= s.perToken {
		s.remove(own[0])
	}
	if len(s.m) >= s.max {
		s.evict(now)
	}
	s.m[k] = &session{token: tok, expires: now.Add(s.ttl)}
	s.byToken[tok.Name] = append(s.byToken[tok.Name], k)
	return id
}

// remove forgets a session. s.mu held.
func (s *sessionStore) remove(k sessionKey) {
	ss := s.m[k]
	if ss == nil {
		return
	}
	delete(s.m, k)
	name := ss.token.Name
	own := s.byToken[name]
	for i, o := range own {
		if o == k {
			own = append(own[:i], own[i+1:]...)
			break
		}
	}
	if len(own) == 0 {
		delete(s.byToken, name) // names of tokens nobody uses cost nothing
	} else {
		s.byToken[name] = own
	}
}

// evict drops expired sessions, and if none was, the oldest session of
// the token holding the most. s.mu held.
func (s *sessionStore) evict(now time.Time) {
	n := len(s.m)
	for k, v := range s.m {
		if !now.Before(v.expires) {
			s.remove(k)
		}
	}
	if len(s.m) < n {
		return
	}
	var most []sessionKey
	for _, own := range s.byToken {
		if len(own) > len(most) {
			most = own
		}
	}
	if len(most) > 0 {
		s.remove(most[0])
	}
}

// get returns the live session of id, or nil. The lookup is by the id's
// hash, so map timing reveals nothing about stored ids.
func (s *sessionStore) get(id string) *session {
	if id == "" {
		return nil
	}
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[k]
	if ss == nil {
		return nil
	}
	if !s.now().Before(ss.expires) {
		s.remove(k)
		return nil
	}
	return ss
}

func (s *sessionStore) delete(id string) {
	s.mu.Lock()
	s.remove(sha256.Sum256([]byte(id)))
	s.mu.Unlock()
}

func (s *sessionStore) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// randomID is 256 random bits, URL-safe.
func randomID() string {
	b := make([]byte, 32)
	rand.Read(b) // never fails (crypto/rand panics rather than return short)
	return base64.RawURLEncoding.EncodeToString(b)
}

// csrfToken binds a form to a session or visitor id: HMAC-SHA256 with the
// dashboard's key, so it needs no storage and cannot be forged without
// the key, and a token for one id is useless with another.
func csrfToken(key []byte, kind, id string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(kind + ":" + id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// csrfOK compares a submitted token in constant time.
func csrfOK(want, got string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(want), []byte(got)) == 1
}

// sameOrigin is the Origin check of every POST: a browser's
// Sec-Fetch-Site, Origin or Referer, whichever it sends, must say the
// request comes from this host. A request with none of them (not from a
// browser) passes this check and still needs the CSRF token. The scheme
// is not compared, so a TLS-terminating proxy in front needs no setting.
func sameOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return false
	}
	src := r.Header.Get("Origin")
	if src == "" {
		src = r.Header.Get("Referer")
	}
	if src == "" {
		return true
	}
	u, err := url.Parse(src)
	return err == nil && u.Host != "" && u.Host == r.Host
}

func setCookie(w http.ResponseWriter, r *http.Request, name, value string, maxAge int) {
	// #nosec G124 -- HttpOnly and SameSite=Strict always; Secure whenever the
	// request came over TLS (plain HTTP is the loopback default, where a
	// Secure cookie would never come back).
	http.SetCookie(w, &http.Cookie{
		Name: name, Value: value, Path: "/ui/", MaxAge: maxAge,
		HttpOnly: true, Secure: r.TLS != nil, SameSite: http.SameSiteStrictMode,
	})
}

func cookieValue(r *http.Request, name string) string {
	c, err := r.Cookie(name)
	if err != nil || len(c.Value) > 64 {
		return ""
	}
	return c.Value
}
