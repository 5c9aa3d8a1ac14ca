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
