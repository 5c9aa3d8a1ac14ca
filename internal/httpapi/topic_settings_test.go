package httpapi

import (
	"strings"
	"testing"
)

// TestTopicSettingsExplicitZero: "jitter":0 and "initial":"0s" are
// settings (no jitter, retry at once), answered and read back as 0; absent
// fields still take the defaults.
func TestTopicSettingsExplicitZero(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "PUT", "/v1/topics/z", `{"backoff":{"jitter":0,"initial":"0s"}}`)
	want(t, r, 200)
	for _, s := range []string{string(r.raw), string(b.do(t, "GET", "/v1/topics/z", "").raw)} {
		if !strings.Contains(s, `"jitter":0,`) && !strings.Contains(s, `"jitter":0}`) || !strings.Contains(s, `"initial":"0s"`) || !strings.Contains(s, `"initial_ms":0`) {
			t.Fatalf("explicit zeros not kept: %s", s)
		}
	}
	r = b.do(t, "PUT", "/v1/topics/d", `{"backoff":{"multiplier":3}}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"jitter":0.2`) || !strings.Contains(s, `"initial":"1s"`) {
		t.Fatalf("absent fields did not take the defaults: %s", s)
	}
	r = b.do(t, "PUT", "/v1/topics/ms", `{"backoff":{"initial_ms":0}}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"initial":"0s"`) {
		t.Fatalf("initial_ms 0 is not an explicit zero: %s", s)
	}
}

// TestPatchTopicKeepsPush: setting a rate limit with PATCH keeps the push
// target and its secret; null removes a field; a PUT that leaves push
// out removes it and says so in a warning.
func TestPatchTopicKeepsPush(t *testing.T) {
	b := setup(t, nil)
	want(t, b.do(t, "PUT", "/v1/topics/p", `{"max_attempts":7,"push":{"url":"http://127.0.0.1:1/hook","secret":"whsec-0123456789","concurrency":2}}`), 200)
	r := b.do(t, "PATCH", "/v1/topics/p", `{"rate_limit":{"per_second":50},"backoff":{"jitter":0}}`)
	want(t, r, 200)
	s := string(r.raw)
	for _, w := range []string{`"url":"http://127.0.0.1:1/hook"`, `"secret_set":true`, `"concurrency":2`, `"per_second":50`, `"max_attempts":7`, `"jitter":0`} {
		if !strings.Contains(s, w) {
			t.Fatalf("PATCH answer lacks %s: %s", w, s)
		}
	}
	if strings.Contains(s, "warning") {
		t.Fatalf("PATCH answer warns: %s", s)
	}
	own, err := b.eng.TopicOwnSettings(t.Context(), "p")
	if err != nil || own.Push == nil || own.Push.Secret != "whsec-0123456789" || own.Lease != 0 || own.Backoff.Multiplier != 0 {
		t.Fatalf("own settings after PATCH: %+v %v (defaults must not be frozen in)", own, err)
	}
	// lease_ms replaces lease; null resets to the default.
	want(t, b.do(t, "PATCH", "/v1/topics/p", `{"lease":"10s"}`), 200)
	r = b.do(t, "PATCH", "/v1/topics/p", `{"lease_ms":5000,"max_attempts":null,"rate_limit":{"burst":3}}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"lease":"5s"`) || !strings.Contains(s, `"max_attempts":25`) || !strings.Contains(s, `"burst":3`) || !strings.Contains(s, `"per_second":50`) {
		t.Fatalf("PATCH answer: %s", s)
	}
	// Bad patches name the field, and change nothing.
	for body, field := range map[string]string{
		`{"lease":"soon"}`:           "lease",
		`{"backoff":{"jitter":2}}`:   "backoff.jitter",
		`{"rate_limt":{}}`:           "rate_limt",
		`{"push":{"url":"ftp://x"}}`: "push.url",
		`[1]`:                        "",
	} {
		r := b.do(t, "PATCH", "/v1/topics/p", body)
		want(t, r, 400)
		if !strings.Contains(r.err.Message, field) {
			t.Errorf("PATCH %s: %q does not name %q", body, r.err.Message, field)
		}
	}
	// PUT without push: push removed, with a warning.
	r = b.do(t, "PUT", "/v1/topics/p", `{"rate_limit":{"per_second":10}}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"warning":"push delivery to http://127.0.0.1:1/hook removed`) || strings.Contains(s, `"push"`) {
		t.Fatalf("PUT answer: %s", s)
	}
	// …and the answer sent back as it is is accepted (warning ignored), without a new warning.
	r2 := b.do(t, "PUT", "/v1/topics/p", string(r.raw))
	want(t, r2, 200)
	if strings.Contains(string(r2.raw), "warning") {
		t.Fatalf("second PUT warns: %s", r2.raw)
	}
	// "push":null removes the push target without a warning.
	want(t, b.do(t, "PUT", "/v1/topics/q", `{"push":{"url":"http://127.0.0.1:1/q"}}`), 200)
	r = b.do(t, "PATCH", "/v1/topics/q", `{"push":null}`)
	want(t, r, 200)
	if s := string(r.raw); strings.Contains(s, `"push"`) || strings.Contains(s, "warning") {
		t.Fatalf("PATCH push:null answer: %s", s)
	}
	// A PATCH of a new topic creates it from the defaults.
	r = b.do(t, "PATCH", "/v1/topics/fresh", `{"lease":"1m"}`)
	want(t, r, 200)
	if s := string(r.raw); !strings.Contains(s, `"lease":"1m0s"`) || !strings.Contains(s, `"max_attempts":25`) {
		t.Fatalf("PATCH of a new topic: %s", s)
	}
}
