package httpapi

import (
	"errors"
	"fmt"
	"maps"
	"mime"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/delayq/delayq/internal/domain"
)

// hostPolicy decides which Host header values the server answers. A web
// page can make the operator's browser talk to a local port under the
// page's own name (DNS rebinding: rebind.attacker.example resolving to
// 127.0.0.1), and the browser then treats our answers as the page's own.
// Such a request always carries the attacker's name in Host, so answering
// only names we know closes that door.
type hostPolicy struct {
	any      bool            // every Host (an explicit "*", or tokens on a public address)
	literals bool            // any IP address literal: no DNS involved, so no rebinding
	names    map[string]bool // exact host names or IPs (lower case, no port, no trailing dot)
	ports    map[string]bool // "name:port" entries
	suffixes []string        // ".example.com" from "*.example.com"
}

// newHostPolicy builds the policy for the AllowedHosts list. Loopback
// names (localhost, 127.0.0.0/8, ::1) are always allowed: no attacker can
// give a page such an origin. With no list, the default depends on where
// the server listens:
//   - loopback: loopback names only;
//   - elsewhere with tokens: any Host, since a bearer token is never sent
//     by a browser on its own (the dashboard's cookie session still checks
//     Origin against Host, which is then an allowed one);
//   - elsewhere without tokens (Insecure): loopback names and IP literals;
//     DNS names must be listed.
func newHostPolicy(list []string, addr string, authOn bool) (*hostPolicy, error) {
	p := &hostPolicy{names: map[string]bool{}, ports: map[string]bool{}}
	for _, e := range list {
		e = strings.ToLower(strings.TrimSpace(e))
		switch {
		case e == "":
			continue
		case e == "*":
			p.any = true
			continue
		case strings.HasPrefix(e, "*."):
			if !validHostName(e[2:]) {
				return nil, fmt.Errorf("allowed host %q: want a host name, host:port, [IPv6], *.domain or *", e)
			}
			p.suffixes = append(p.suffixes, strings.TrimSuffix(e[1:], "."))
			continue
		}
		host, port, err := splitHost(e)
		if err != nil || !validHostName(host) {
			return nil, fmt.Errorf("allowed host %q: want a host name, host:port, [IPv6], *.domain or *", e)
		}
		if port != "" {
			p.ports[net.JoinHostPort(host, port)] = true
		} else {
			p.names[host] = true
		}
	}
	if len(list) > 0 && (p.any || len(p.names)+len(p.ports)+len(p.suffixes) > 0) {
		return p, nil
	}
	if isLoopbackAddr(addr) {
		return p, nil
	}
	if authOn {
		p.any = true
	} else {
		p.literals = true
	}
	return p, nil
}

// CheckAllowedHosts checks the syntax of an AllowedHosts list.
func CheckAllowedHosts(list []string) error {
	_, err := newHostPolicy(list, DefaultAddr, false)
	return err
}

// allows reports whether a request's Host may be answered. An empty Host
// (HTTP/1.0 without one) is not from a browser and is allowed.
func (p *hostPolicy) allows(hostport string) bool {
	if p.any || hostport == "" {
		return true
	}
	host, port, err := splitHost(strings.ToLower(hostport))
	if err != nil {
		return false
	}
	if isLoopbackHost(host) || p.names[host] || (port != "" && p.ports[net.JoinHostPort(host, port)]) {
		return true
	}
	if p.literals && net.ParseIP(host) != nil {
		return true
	}
	for _, s := range p.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// describe says what the policy accepts, for the startup log.
func (p *hostPolicy) describe() string {
	if p.any {
		return "any"
	}
	parts := []string{"loopback names"}
	if p.literals {
		parts = append(parts, "IP literals")
	}
	parts = append(parts, slices.Sorted(maps.Keys(p.names))...)
	parts = append(parts, slices.Sorted(maps.Keys(p.ports))...)
	for _, s := range p.suffixes {
		parts = append(parts, "*"+s)
	}
	return strings.Join(parts, ", ")
}

// splitHost splits "name", "name:port", "[v6]" or "[v6]:port" into a host
// (brackets removed, trailing dot removed) and a port ("" if none).
func splitHost(s string) (host, port string, err error) {
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return "", "", errors.New("missing ]")
		}
		host, rest := s[1:end], s[end+1:]
		if rest != "" {
			if rest[0] != ':' || !validPort(rest[1:]) {
				return "", "", errors.New("bad port")
			}
			port = rest[1:]
		}
		if net.ParseIP(host) == nil {
			return "", "", errors.New("bad IPv6 address")
		}
		return host, port, nil
	case strings.Count(s, ":") > 1:
		// A bare IPv6 address (never valid in Host, but fine in a list).
		if net.ParseIP(s) == nil {
			return "", "", errors.New("bad address")
		}
		return s, "", nil
	}
	host, port, found := strings.Cut(s, ":")
	if found && !validPort(port) {
		return "", "", errors.New("bad port")
	}
	return strings.TrimSuffix(host, "."), port, nil
}

func validPort(p string) bool {
	if p == "" || len(p) > 5 {
		return false
	}
	for _, c := range p {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// validHostName accepts DNS names and IP addresses: letters, digits, '-',
// '.', '_' (and ':' inside an IPv6 address).
func validHostName(h string) bool {
	if h == "" || len(h) > 253 {
		return false
	}
	if net.ParseIP(h) != nil {
		return true
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return false
		}
	}
	return true
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// hstsValue is sent on every answer over TLS: browsers then use HTTPS
// only for this name for a year, so a network attacker cannot strip TLS
// from a later visit (to the dashboard, say). Behind a TLS-terminating
// proxy the server sees plain HTTP; the proxy should send it.
const hstsValue = "max-age=31536000"

// isLocalhostName reports whether a Host header names localhost (or a
// subdomain of it): HSTS is per name, not per port, so pinning it would
// force HTTPS on every other local development server for a year. IP
// literals need no exception (browsers ignore HSTS for them).
func isLocalhostName(hostport string) bool {
	host, _, err := splitHost(strings.ToLower(hostport))
	return err == nil && (host == "localhost" || strings.HasSuffix(host, ".localhost"))
}

// isLoopbackAddr reports whether a listen address is on loopback only.
func isLoopbackAddr(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	return err == nil && isLoopbackHost(strings.ToLower(host))
}

// hostError is a request for a Host the server does not answer (403).
type hostError struct{ host string }

func (e *hostError) Error() string {
	h := e.host
	if len(h) > 100 {
		h = h[:100] + "…"
	}
	return fmt.Sprintf("Host %q is not allowed; add it with --allowed-hosts (Config.AllowedHosts)", h)
}

func (e *hostError) Unwrap() error { return domain.ErrForbidden }

// errCrossOrigin is a browser request sent by a page of another origin.
var errCrossOrigin = fmt.Errorf("%w: cross-origin request refused: a browser sent it from a page of another origin (Origin or Sec-Fetch-Site); the API takes no requests from web pages", domain.ErrForbidden)

// crossOrigin reports a request a browser sent for a page of another
// origin. Browsers add Sec-Fetch-Site and Origin to such requests, even to
// the "simple" POSTs a page may send without asking first (a form, or a
// fetch with a text/plain or empty body); API clients send neither. Such a
// request must never act: the API has no cookies, but with auth off the
// port itself is the credential.
func crossOrigin(r *http.Request) bool {
	switch r.Header.Get("Sec-Fetch-Site") {
	case "", "same-origin", "none":
	default:
		return true
	}
	o := r.Header.Get("Origin")
	if o == "" {
		return false
	}
	u, err := url.Parse(o)
	return err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host)
}

// errMediaType is a body that is not declared as JSON (415).
var errMediaType = errors.New("unsupported media type")

// checkJSONType requires Content-Type application/json (charset utf-8 at
// most) on a request with a body. Browsers let any page send a body as
// text/plain, a form or multipart without asking the server first; only a
// JSON content type needs a CORS preflight, which this server never
// grants.
func checkJSONType(r *http.Request) error {
	if r.ContentLength == 0 {
		return nil // no body: nothing to misread
	}
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return fmt.Errorf("%w: the request has a body but no Content-Type; send Content-Type: application/json (curl: -H 'content-type: application/json')", errMediaType)
	}
	mt, params, err := mime.ParseMediaType(ct)
	if err == nil && mt == "application/json" {
		cs, hasCS := params["charset"]
		if len(params) == 0 || (len(params) == 1 && hasCS && strings.EqualFold(cs, "utf-8")) {
			return nil
		}
	}
	if len(ct) > 100 {
		ct = ct[:100] + "…"
	}
	return fmt.Errorf("%w: Content-Type %q; the API takes only application/json (optionally with charset=utf-8)", errMediaType, ct)
}
