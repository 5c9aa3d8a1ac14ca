// Package auth holds delayq's bearer tokens: their configuration format,
// constant-time lookup and the scope check per topic pattern.
//
// # Token format
//
// One token per flag value (--token) or per line of a tokens file:
//
//		NAME:SECRET:SCOPES:PATTERNS
//
//	  - NAME: 1–64 chars of [A-Za-z0-9._-]; it appears in logs, the secret never does.
//	  - SECRET: 16–512 chars of [A-Za-z0-9._~+/=-] (RFC 6750 b64token), unique per token.
//	  - SCOPES: comma-separated produce, consume, admin. admin implies produce
//	    and consume on the same topics.
//	  - PATTERNS: comma-separated topic globs; "*" matches any run of characters
//	    (dots included), so "orders.*" matches "orders.eu" and "orders.eu.late",
//	    and "*" matches every topic. Other characters are literal.
//
// In a tokens file, blank lines and lines starting with "#" are ignored.
// Example:
//
//	# name    secret                      scopes           topics
//	billing:s3cr3t-billing-0123456789:produce,consume:billing.*,invoices
//	ops:0p5-token-0123456789abcdef:admin:*
//
// Clients send "Authorization: Bearer SECRET". The scheme is matched without
// regard to case and may be followed by one or more spaces. Tokens in query
// strings are never read.
package auth

import (
	"bufio"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/delayq/delayq/internal/domain"
)

// Scope is a set of permissions (a bit mask).
type Scope uint8

// Scopes. Admin implies Produce and Consume (see Token.Allows).
const (
	Produce Scope = 1 << iota
	Consume
	Admin
)

var scopeNames = map[string]Scope{"produce": Produce, "consume": Consume, "admin": Admin}

// String lists the scopes, comma-separated.
func (s Scope) String() string {
	var parts []string
	for _, n := range []string{"produce", "consume", "admin"} {
		if s&scopeNames[n] != 0 {
			parts = append(parts, n)
		}
	}
	return strings.Join(parts, ",")
}

// Errors of Authenticate. Both match nothing in package delayq on purpose:
// the server maps them to 401.
var (
	// ErrMissing: no Authorization header.
	ErrMissing = errors.New("missing bearer token: send Authorization: Bearer <token>")
	// ErrMalformed: the header is not one "Bearer <token>".
	ErrMalformed = errors.New("malformed Authorization header: want Bearer <token>")
	// ErrUnknown: no configured token has this secret.
	ErrUnknown = errors.New("unknown bearer token")
	// ErrWholeSpec: the credential is a whole NAME:SECRET:SCOPES:PATTERNS
	// spec, as the server is configured with, instead of its secret.
	ErrWholeSpec = errors.New("the bearer token is a whole NAME:SECRET:SCOPES:PATTERNS spec: pass only the SECRET part (Authorization: Bearer SECRET, delayq --token SECRET)")
)

// Token is one configured credential. It is immutable after parsing.
type Token struct {
	Name     string
	Scopes   Scope
	Patterns []string
	hash     [sha256.Size]byte
}

// SecretDigest is the SHA-256 of the token's secret. Credentials derived
// from a login (the dashboard's signed session cookies) fold it into
// their signature, so changing a token's secret ends them. It must not
// leave the server.
func (t *Token) SecretDigest() [sha256.Size]byte { return t.hash }

// Allows reports whether the token grants any scope of want on topic.
// Admin implies Produce and Consume.
func (t *Token) Allows(want Scope, topic string) bool {
	if !t.Has(want) {
		return false
	}
	for _, p := range t.Patterns {
		if Match(p, topic) {
			return true
		}
	}
	return false
}

// AllowsEverywhere reports whether the token grants a scope of want on
// every topic (a "*" pattern), for endpoints that expose all topics.
func (t *Token) AllowsEverywhere(want Scope) bool {
	if !t.Has(want) {
		return false
	}
	for _, p := range t.Patterns {
		if p == "*" {
			return true
		}
	}
	return false
}

// MaySetPushURL reports whether tok may make a topic push to newURL when
// it pushes to oldURL now ("" for none). A push URL makes the server send
// requests from its own network position (SSRF), so pointing a topic at a
// new URL needs admin on "*"; keeping the URL while changing other
// settings, or removing it, needs only admin on the topic (checked by
// the caller). A nil tok means auth is off: everything is allowed.
func MaySetPushURL(tok *Token, oldURL, newURL string) bool {
	return tok == nil || newURL == "" || newURL == oldURL || tok.AllowsEverywhere(Admin)
}

// Has reports whether the token holds any scope of want on some topic.
func (t *Token) Has(want Scope) bool {
	eff := t.Scopes
	if eff&Admin != 0 {
		eff |= Produce | Consume
	}
	return eff&want != 0
}

// ParseToken parses NAME:SECRET:SCOPES:PATTERNS. Errors never quote the secret.
func ParseToken(spec string) (*Token, error) {
	parts := strings.SplitN(strings.TrimSpace(spec), ":", 4)
	if len(parts) != 4 {
		return nil, errors.New("token: want NAME:SECRET:SCOPES:PATTERNS")
	}
	name, secret, scopes, patterns := parts[0], parts[1], parts[2], parts[3]
	if err := checkChars("name", name, 1, 64, "A-Za-z0-9._-", func(c byte) bool { return isAlnum(c) || strings.IndexByte("._-", c) >= 0 }); err != nil {
		return nil, err
	}
	if err := checkChars("secret of "+name, secret, 16, 512, "A-Za-z0-9._~+/=-", isSecretByte); err != nil {
		return nil, err
	}
	t := &Token{Name: name, hash: sha256.Sum256([]byte(secret))}
	for _, s := range strings.Split(scopes, ",") {
		sc, ok := scopeNames[strings.TrimSpace(s)]
		if !ok {
			return nil, fmt.Errorf("token %s: unknown scope %q (want produce, consume or admin)", name, s)
		}
		t.Scopes |= sc
	}
	for _, p := range strings.Split(patterns, ",") {
		p = strings.TrimSpace(p)
		// A pattern is a topic name in which '*' matches any run of bytes.
		if err := checkChars("pattern of "+name, p, 1, domain.MaxNameLen, "A-Za-z0-9._:-*", func(c byte) bool { return domain.IsTopicByte(c) || c == '*' }); err != nil {
			return nil, err
		}
		t.Patterns = append(t.Patterns, p)
	}
	return t, nil
}

// ParseFile reads a tokens file (see the package doc).
func ParseFile(path string) ([]*Token, error) {
	f, err := os.Open(path) // #nosec G304 -- path is the operator's --tokens-file flag; reading that file is the point
	if err != nil {
		return nil, fmt.Errorf("tokens file: %w", err)
	}
	defer f.Close()
	toks, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("tokens file %s: %w", path, err)
	}
	return toks, nil
}

// Parse reads tokens, one per line; blank and "#" lines are skipped.
func Parse(r io.Reader) ([]*Token, error) {
	var toks []*Token
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		t, err := ParseToken(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", n, err)
		}
		toks = append(toks, t)
	}
	return toks, sc.Err()
}

// Set is the configured tokens. The zero Set (or one with no tokens) means
// authentication is off. A Set is immutable and safe for concurrent use.
type Set struct {
	tokens []*Token
}

// NewSet checks that names and secrets are unique.
func NewSet(tokens []*Token) (*Set, error) {
	names := map[string]bool{}
	hashes := map[[sha256.Size]byte]bool{}
	for _, t := range tokens {
		if names[t.Name] {
			return nil, fmt.Errorf("token name %q is configured twice", t.Name)
		}
		if hashes[t.hash] {
			return nil, fmt.Errorf("token %q reuses another token's secret", t.Name)
		}
		names[t.Name], hashes[t.hash] = true, true
	}
	return &Set{tokens: tokens}, nil
}

// Enabled reports whether any token is configured.
func (s *Set) Enabled() bool { return s != nil && len(s.tokens) > 0 }

// Lookup returns the token named name, or nil.
func (s *Set) Lookup(name string) *Token {
	if s == nil {
		return nil
	}
	for _, t := range s.tokens {
		if t.Name == name {
			return t
		}
	}
	return nil
}

// Authenticate finds the token of a request's Authorization header. It
// compares SHA-256 hashes (equal length, so the secret's length does not
// leak) with crypto/subtle against every token, without early exit.
func (s *Set) Authenticate(h http.Header) (*Token, error) {
	vals := h.Values("Authorization")
	if len(vals) == 0 {
		return nil, ErrMissing
	}
	if len(vals) > 1 {
		return nil, ErrMalformed
	}
	secret, ok := bearer(vals[0])
	if !ok {
		if LooksLikeSpec(strings.TrimSpace(vals[0][strings.IndexByte(vals[0]+" ", ' '):])) {
			return nil, ErrWholeSpec
		}
		return nil, ErrMalformed
	}
	sum := sha256.Sum256([]byte(secret))
	var found *Token
	for _, t := range s.tokens {
		if subtle.ConstantTimeCompare(sum[:], t.hash[:]) == 1 {
			found = t
		}
	}
	if found == nil {
		return nil, ErrUnknown
	}
	return found, nil
}

// LooksLikeSpec reports whether s is a token spec NAME:SECRET:SCOPES:PATTERNS
// rather than a secret (secrets never hold a colon).
func LooksLikeSpec(s string) bool {
	return strings.Count(s, ":") >= 3 && !strings.ContainsAny(s, " \t")
}

// bearer extracts the credential of "Bearer <b64token>" (RFC 6750 §2.1:
// scheme case-insensitive, one or more spaces).
func bearer(v string) (string, bool) {
	scheme, rest, ok := strings.Cut(v, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	rest = strings.TrimLeft(rest, " ")
	if rest == "" || len(rest) > 512 {
		return "", false
	}
	for i := 0; i < len(rest); i++ {
		if !isSecretByte(rest[i]) {
			return "", false
		}
	}
	return rest, true
}

// Match reports whether topic matches the glob pattern, where "*" matches
// any run of characters (possibly empty) and everything else is literal.
func Match(pattern, topic string) bool {
	p, t := 0, 0
	star, mark := -1, 0
	for t < len(topic) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, t
			p++
		case p < len(pattern) && pattern[p] == topic[t]:
			p++
			t++
		case star >= 0:
			p = star + 1
			mark++
			t = mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

func checkChars(what, s string, min, max int, allowed string, ok func(byte) bool) error {
	if len(s) < min || len(s) > max {
		return fmt.Errorf("token %s: must be %d–%d characters", what, min, max)
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return fmt.Errorf("token %s: character %d is not one of %s", what, i+1, allowed)
		}
	}
	return nil
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}

func isSecretByte(c byte) bool { return isAlnum(c) || strings.IndexByte("._~+/=-", c) >= 0 }
