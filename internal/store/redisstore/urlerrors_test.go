package redisstore

import (
	"net/url"
	"strings"
	"testing"
	"time"
)

// TestURLErrorsHideSecrets: a URL that does not parse is reported without
// its text. Each parser error used to quote the raw URL (or the part that
// failed, which for a password with an unescaped '/' or '?' is a piece of
// it), and `delayq serve --redis …` printed it.
func TestURLErrorsHideSecrets(t *testing.T) {
	const secret = "s3kr1t"
	for _, tc := range []struct{ url, fault string }{
		{"redis://:s3kr1t@127.0.0.1:bad/0", "invalid port"},
		{"redis://:s3k%r1t@127.0.0.1:6379/0", "invalid %-escape"},
		{"redis://:s3kr1t@[::1:6379/0", "without ']'"},
		{"rediss://u:s3kr1t@h:1/x", "invalid database number"},
		{"redis://:s3kr1t/x@h:1/0", "invalid port"},
		{"redis://:s3kr1t?x@h:1/0", "invalid port"},
		{"redis://h:1/0?password=s3kr1t&bogus=1", "unknown option"},
		{"redis+cluster://:s3kr1t@a:bad,b:2", "invalid port"},
		{"rediss+cluster://:s3kr1t@[::1,b:2", "without ']'"},
		{"redis+cluster://:s3kr1t/x@a:1,b:2", "invalid port"},
		{"redis+sentinel://:s3kr1t@a:bad/m/0", "invalid port"},
		{"redis+sentinel://:s3kr1t/m@a:1/m/0", "Sentinel address"},
		{"redis+sentinel://a:1/m/0?password=s3kr1t", "password= is not accepted"},
		{"redis+sentinel://a:1/m/x?sentinel_password=s3kr1t", "invalid database number"},
	} {
		_, err := newClient(tc.url, time.Second)
		if err == nil {
			t.Errorf("%s: parsed", redactURL(tc.url))
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, secret[:4]) || strings.Contains(msg, "r1t") {
			t.Errorf("%s: the error shows (part of) the password: %s", redactURL(tc.url), msg)
		}
		if !strings.Contains(msg, tc.fault) || !strings.Contains(msg, "percent-encode") {
			t.Errorf("%s: %q does not say %q and how to fix it", redactURL(tc.url), msg, tc.fault)
		}
		if r := redactURL(tc.url); strings.Contains(r, secret[:4]) || strings.Contains(r, "r1t") {
			t.Errorf("RedactURL(%q) = %q shows the password", tc.url, r)
		}
	}
	// A URL that cannot hold a password keeps the parser's own words.
	if _, err := newClient("redis://127.0.0.1:bad/0", time.Second); err == nil || !strings.Contains(err.Error(), `invalid port ":bad" after host`) {
		t.Errorf("no-secret URL: %v", err)
	}
	if _, err := newClient("127.0.0.1:6379", time.Second); err == nil || !strings.Contains(err.Error(), "no scheme") {
		t.Errorf("no scheme: %v", err)
	}
}

var urlSchemes = []string{"redis", "rediss", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel"}

// FuzzRedisURLErrors: a secret placed in a URL of any scheme — raw or
// escaped in user:pass@, or as password= / sentinel_password= — never
// shows in newClient's error nor in RedactURL (what errors, the startup
// line and logs print), whatever the rest of the URL.
func FuzzRedisURLErrors(f *testing.F) {
	f.Add(uint8(0), "", "secret", "127.0.0.1:bad", "/0", "", uint8(0))
	f.Add(uint8(1), "u", "se%cret", "h:1", "/0", "dial_timeout=1s", uint8(0))
	f.Add(uint8(0), "", "sec/ret", "[::1:6379", "/0", "", uint8(0))
	f.Add(uint8(2), "", "secret", "a:bad,b:2", "", "", uint8(0))
	f.Add(uint8(3), "u", "sec?ret#x", "[::1,b:2", "", "addr=c:3", uint8(0))
	f.Add(uint8(4), "", "se@cret", "a:bad", "/m/0", "", uint8(0))
	f.Add(uint8(5), "u", "secret", "a:1", "/m/x", "pool_size=3", uint8(3))
	f.Add(uint8(0), "u", "sec ret:&=", "h:1", "/0", "x=a@b", uint8(1))
	f.Add(uint8(1), "", "secret", "h:1", "/0", "bogus", uint8(2))
	f.Add(uint8(4), "", "secret", "a:1", "/m", "x#y", uint8(3))
	f.Fuzz(func(t *testing.T, sc uint8, user, tail, host, path, query string, place uint8) {
		for _, part := range []string{user, host, path, query} {
			if strings.Contains(strings.ToLower(part), "sekr") {
				return // the marker must come from the secret only
			}
		}
		var sb strings.Builder
		for _, c := range []byte(tail) {
			if c < '!' || c > '~' {
				c = '!' + c%('~'-'!'+1) // printable: %q would escape others, and hide a leak from Contains
			}
			if place%4 >= 2 && (c == '&' || c == '#') {
				continue // a raw '&' or '#' ends a query value: the rest is no longer the secret
			}
			sb.WriteByte(c)
		}
		secret := "SeKr" + sb.String() + "x9"
		scheme := urlSchemes[int(sc)%len(urlSchemes)]
		var raw string
		escaped := place&4 != 0
		switch place % 4 {
		case 0, 1: // user:pass@
			if escaped {
				raw = scheme + "://" + url.UserPassword(user, secret).String() + "@" + host + path
			} else {
				raw = scheme + "://" + user + ":" + secret + "@" + host + path
			}
			if query != "" {
				raw += "?" + query
			}
		case 2, 3:
			key := "password"
			if place%4 == 3 {
				key = "sentinel_password"
			}
			v := secret
			if escaped {
				v = url.QueryEscape(secret)
			}
			raw = scheme + "://" + host + path + "?" + query + "&" + key + "=" + v
		}
		check := func(what, s string) {
			if strings.Contains(strings.ToLower(s), "sekr") {
				t.Fatalf("%s shows the secret %q: %s\nURL %q", what, secret, s, raw)
			}
		}
		check("RedactURL", redactURL(raw))
		c, err := newClient(raw, time.Second)
		if err != nil {
			check("the error", err.Error())
			return
		}
		_ = c.Close() // go-redis dials lazily: nothing was connected
	})
}
