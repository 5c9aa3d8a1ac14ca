package dashboard

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/auth"
)

// Cookie names. Both are HttpOnly, SameSite=Strict, Path /ui/, and Secure
// when the request came over TLS.
const (
	// sessionCookie holds a signed session: the token's name, an expiry
	// and a random nonce, with an HMAC-SHA256 over them and the token
	// secret's digest (sessionSigner). Any server with the same keys and
	// the same token accepts it; the secret itself is never in it.
	sessionCookie = "delayq_session"
	// visitorCookie holds a random id given to every browser, so forms
	// shown before login (the login form itself) and every form when auth
	// is off carry a CSRF token bound to this browser.
	visitorCookie = "delayq_visitor"
	csrfField     = "csrf"

	// sessionFormat is the first field of a session cookie: a later
	// format gets a new one, and cookies of another are no session.
	sessionFormat = "v1"
	// sessionCookieMax bounds what is parsed: the format, a Unix time,
	// a 128-bit nonce, a 256-bit MAC and a token name of up to 64 bytes.
	sessionCookieMax = 200
	// MinSessionKeyBytes is the shortest key Config.SessionKeys accepts.
	MinSessionKeyBytes = 32
)

// session is a logged-in browser.
type session struct {
	token   *auth.Token
	expires time.Time
	nonce   string
}

// sessionSigner issues and checks signed session cookies. It keeps no
// sessions: a cookie is valid while it is unexpired, its MAC verifies
// under one of keys, and its token is still configured with the same
// secret. keys[0] signs; the others only verify (key rotation).
//
// Logging out revokes a cookie on this server only (revoked), so a copy
// of the cookie stays valid on other servers until it expires.
type sessionSigner struct {
	keys    [][]byte
	tokens  *auth.Set
	now     func() time.Time
	ttl     time.Duration
	revoked *revokedSet
}

func sessionMAC(key []byte, exp, nonce, name string, digest [sha256.Size]byte) []byte {
	m := hmac.New(sha256.New, key)
	// Domain-separated from the CSRF tokens (csrfToken), which use the
	// same keys.
	m.Write([]byte("delayq-session\x00" + sessionFormat + "\x00" + exp + "\x00" + nonce + "\x00" + name + "\x00"))
	m.Write(digest[:])
	return m.Sum(nil)
}

// issue returns a new cookie value for tok.
func (s *sessionSigner) issue(tok *auth.Token) (string, time.Time) {
	expires := s.now().Add(s.ttl).Truncate(time.Second)
	exp := strconv.FormatInt(expires.Unix(), 10)
	nb := make([]byte, 16)
	rand.Read(nb) // never fails (crypto/rand panics rather than return short)
	nonce := base64.RawURLEncoding.EncodeToString(nb)
	mac := base64.RawURLEncoding.EncodeToString(sessionMAC(s.keys[0], exp, nonce, tok.Name, tok.SecretDigest()))
	// The name goes last: it may hold dots, the separator.
	return sessionFormat + "." + exp + "." + nonce + "." + mac + "." + tok.Name, expires
}

// verify returns the session of a cookie value, or nil.
func (s *sessionSigner) verify(value string) *session {
	parts := strings.SplitN(value, ".", 5)
	if len(parts) != 5 || parts[0] != sessionFormat {
		return nil
	}
	exp, nonce, name := parts[1], parts[2], parts[4]
	unix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return nil
	}
	got, err := base64.RawURLEncoding.DecodeString(parts[3])
	if err != nil || len(got) != sha256.Size {
		return nil
	}
	tok := s.tokens.Lookup(name)
	if tok == nil {
		return nil // the token was removed: its sessions end
	}
	ok := false
	for _, k := range s.keys {
		// hmac.Equal compares in constant time.
		if hmac.Equal(got, sessionMAC(k, exp, nonce, name, tok.SecretDigest())) {
			ok = true
		}
	}
	expires := time.Unix(unix, 0)
	if !ok || !s.now().Before(expires) || s.revoked.has(nonce, s.now()) {
		return nil
	}
	return &session{token: tok, expires: expires, nonce: nonce}
}

// revoke ends a session on this server (logout, or a new login).
func (s *sessionSigner) revoke(ss *session) { s.revoked.add(ss.nonce, ss.expires, s.now()) }

// revokedSet holds the nonces of sessions logged out on this server until
// they expire, at most max of them: beyond that the one expiring soonest
// is forgotten (its cookie, if someone kept a copy, works again until it
// expires). Safe for concurrent use.
type revokedSet struct {
	max   int
	mu    sync.Mutex
	m     map[string]time.Time
	order []string // insertion order (one TTL: about expiry order)
}

func newRevokedSet(max int) *revokedSet {
	return &revokedSet{max: max, m: make(map[string]time.Time)}
}

func (r *revokedSet) add(nonce string, expires, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[nonce]; ok {
		return
	}
	for len(r.order) > 0 && (len(r.order) >= r.max || !now.Before(r.m[r.order[0]])) {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
	r.m[nonce] = expires
	r.order = append(r.order, nonce)
}

func (r *revokedSet) has(nonce string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	exp, ok := r.m[nonce]
	return ok && now.Before(exp)
}

func (r *revokedSet) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
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

// csrfValid checks a submitted token against every key, so forms shown
// before a key rotation still post.
func csrfValid(keys [][]byte, kind, id, got string) bool {
	ok := false
	for _, k := range keys {
		if csrfOK(csrfToken(k, kind, id), got) {
			ok = true
		}
	}
	return ok
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

func cookieValue(r *http.Request, name string, max int) string {
	c, err := r.Cookie(name)
	if err != nil || len(c.Value) > max {
		return ""
	}
	return c.Value
}
