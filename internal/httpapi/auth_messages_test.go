package httpapi

import (
	"strings"
	"testing"
)

// TestAuthErrorsNameTheCause: a token with the scope but not the topic is
// told the topic is outside its topics (not that it lacks the scope); a
// whole NAME:SECRET:SCOPES:PATTERNS spec sent as the token is told to send
// only the secret (not "malformed Authorization header").
func TestAuthErrorsNameTheCause(t *testing.T) {
	b := setup(t, func(c *Config) { c.Tokens = tokenSet(t) })
	body := `{"payload":"x"}`
	r := b.do(t, "POST", "/v1/topics/orders.eu/messages", body, "Authorization", "Bearer "+otherSecret)
	want(t, r, 403)
	if m := r.err.Message; !strings.Contains(m, `topic "orders.eu" is outside the topics of token "other" (billing.*)`) || strings.Contains(m, "lacks") {
		t.Fatalf("other topic: %q", m)
	}
	r = b.do(t, "POST", "/v1/topics/orders.eu/lease", `{}`, "Authorization", "Bearer "+prodSecret)
	want(t, r, 403)
	if m := r.err.Message; !strings.Contains(m, `token "prod" lacks the consume scope`) {
		t.Fatalf("missing scope: %q", m)
	}
	r = b.do(t, "GET", "/v1/schedules", "", "Authorization", "Bearer "+otherSecret)
	want(t, r, 403)
	if m := r.err.Message; !strings.Contains(m, `lacks the admin scope`) {
		t.Fatalf("schedules: %q", m)
	}
	r = b.do(t, "POST", "/v1/topics/billing.x/messages", body, "Authorization", "Bearer other:"+otherSecret+":produce,consume:billing.*")
	want(t, r, 401)
	if m := r.err.Message; !strings.Contains(m, "pass only the SECRET part") {
		t.Fatalf("whole spec: %q", m)
	}
	want(t, b.do(t, "POST", "/v1/topics/billing.x/messages", body, "Authorization", "Bearer "+otherSecret), 201)
}
