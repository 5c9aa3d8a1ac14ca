package openapitest

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/httpapi"
)

// TestCheckCatchesDrift: each way an exchange can break the document is
// caught, and exchanges that keep it pass. Without this, a validator that
// accepted everything would make every other test's check worthless.
func TestCheckCatchesDrift(t *testing.T) {
	const msg = `{"id":"a","topic":"t","deliver_at":"2030-01-01T00:00:00Z","state":"scheduled","attempt":0,"failures":0,"max_attempts":5,"priority":0,"created_at":"2030-01-01T00:00:00Z","updated_at":"2030-01-01T00:00:00Z"}`
	const errBody = `{"error":{"code":"invalid_argument","message":"m","field":"delay"}}`
	for _, c := range []struct {
		name, method, path, body string
		status                   int
		answer                   string
		ok                       bool
	}{
		{"send", "POST", "/v1/topics/t/messages", `{"payload":"x","delay":"1h"}`, 201, msg, true},
		{"send refused", "POST", "/v1/topics/t/messages", `{"payload":"x","delay":30}`, 400, errBody, true},
		{"error with a request id", "GET", "/v1/topics/t", "", 404, `{"error":{"code":"not_found","message":"m","request_id":"r1"},"request_id":"r1"}`, true},
		{"healthz with a version", "GET", "/healthz", "", 200, `{"status":"ok","version":{"module":"v1.2.3"}}`, true},
		{"unknown path refused", "GET", "/v1/nothing", "", 404, `{"error":{"code":"not_found","message":"no such endpoint"}}`, true},
		{"wrong method refused", "DELETE", "/v1/topics/t/lease", "", 405, `{"error":{"code":"method_not_allowed","message":"m"}}`, true},

		{"bare number delay taken", "POST", "/v1/topics/t/messages", `{"payload":"x","delay":30}`, 201, msg, false},
		{"two payloads taken", "POST", "/v1/topics/t/messages", `{"payload":"x","payload_base64":"eA=="}`, 201, msg, false},
		{"unknown field taken", "POST", "/v1/topics/t/messages", `{"payload":"x","dealy":"1s"}`, 201, msg, false},
		{"bad topic taken", "POST", "/v1/topics/a%20b/messages", `{"payload":"x"}`, 201, msg, false},
		{"answer misses a field", "POST", "/v1/topics/t/messages", `{"payload":"x"}`, 201, strings.Replace(msg, `"state":"scheduled",`, "", 1), false},
		{"answer has an undocumented field", "POST", "/v1/topics/t/messages", `{"payload":"x"}`, 201, strings.Replace(msg, `{`, `{"surprise":1,`, 1), false},
		{"answer with a wrong type", "GET", "/v1/topics/t/messages/a", "", 200, strings.Replace(msg, `"attempt":0`, `"attempt":"0"`, 1), false},
		{"undocumented status", "GET", "/v1/topics/t/messages/a", "", 418, errBody, false},
		{"error in another shape", "GET", "/v1/topics/t/messages/a", "", 404, `{"message":"not found"}`, false},
		{"unknown path answered", "GET", "/v1/nothing", "", 200, `{}`, false},
		{"deliver_at not a time taken", "POST", "/v1/topics/t/messages", `{"payload":"x","deliver_at":"tomorrow"}`, 201, msg, false},
		{"limit out of range taken", "GET", "/v1/topics/t/dead?limit=0", "", 200, `{"messages":[]}`, false},
		{"limit in range", "GET", "/v1/topics/t/dead?limit=10", "", 200, `{"messages":[]}`, true},
		{"401 without WWW-Authenticate", "GET", "/v1/topics", "", 401, `{"error":{"code":"unauthenticated","message":"m"}}`, false},
		{"text answer where JSON is due", "GET", "/v1/topics", "", 200, `topics`, false},
		{"settings without lease_ms", "GET", "/v1/topics/t", "", 200, `{"name":"t","counts":{"scheduled":0,"ready":0,"inflight":0,"dead":0},"settings":{"lease":"30s"}}`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			var body io.Reader
			if c.body != "" {
				body = strings.NewReader(c.body)
			}
			req := httptest.NewRequest(c.method, "http://127.0.0.1:7070"+c.path, body)
			if c.body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			spec, err := Load(httpapi.OpenAPIDocument)
			if err != nil {
				t.Fatal(err)
			}
			h := http.Header{"Content-Type": {"application/json"}}
			fail := spec.Check(req, []byte(c.body), c.status, h, []byte(c.answer))
			if c.ok && fail != "" {
				t.Errorf("refused: %s", fail)
			}
			if !c.ok && fail == "" {
				t.Errorf("not caught")
			}
			t.Log(fail)
		})
	}
}

// TestTransportChecksAndCounts: traffic through the Transport is checked
// and counted; traffic outside the API (the dashboard) and HEAD are not.
func TestTransportChecksAndCounts(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"status":"ok"}`)
	}))
	defer srv.Close()
	v := New(t, httpapi.OpenAPIDocument)
	hc := &http.Client{Transport: v.Transport(nil)}
	for _, p := range []string{"/healthz", "/ui/", "/healthz"} {
		res, err := hc.Get(srv.URL + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if string(b) != `{"status":"ok"}` {
			t.Fatalf("the caller got %q", b)
		}
	}
	if res, err := hc.Head(srv.URL + "/healthz"); err != nil {
		t.Fatal(err)
	} else {
		res.Body.Close()
	}
	if n := v.Checked(); n != 2 {
		t.Fatalf("checked %d exchanges, want 2", n)
	}
}
