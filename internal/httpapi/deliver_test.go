package httpapi

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/wire"
)

// TestDeliverCredentialsAreWriteOnly: passwords, tokens and a URL's
// password never come back; a PUT of what GET answered keeps them.
func TestDeliverCredentialsAreWriteOnly(t *testing.T) {
	b := setup(t, nil)
	for _, tc := range []struct {
		name, put, writeBack string
		secrets              []string
		check                func(t *testing.T, raw string)
	}{
		{name: "kafka",
			put:     `{"deliver":{"kafka":{"brokers":["k1:9092","k2:9092"],"topic":"orders","key_header":"tenant","sasl":{"mechanism":"SCRAM-SHA-512","user":"dq","password":"kpass-1"},"tls":{"server_name":"k1"}},"max_in_flight":64,"timeout_ms":5000}}`,
			secrets: []string{"kpass-1"},
			check: func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"password_set":true`) || !strings.Contains(raw, `"max_in_flight":64`) || !strings.Contains(raw, `"timeout_ms":5000`) {
					t.Errorf("answer %s", raw)
				}
			}},
		{name: "rabbitmq",
			put:     `{"deliver":{"rabbitmq":{"url":"amqp://dq:rpass-1@rabbit:5672/vh","exchange":"ex","routing_key":"orders"}}}`,
			secrets: []string{"rpass-1"},
			check: func(t *testing.T, raw string) {
				if !strings.Contains(raw, `amqp://dq:xxxxx@rabbit:5672/vh`) {
					t.Errorf("answer %s, want the URL redacted", raw)
				}
			}},
		{name: "nats",
			put:     `{"deliver":{"nats":{"url":"nats://u:npass-1@nats:4222","subject":"orders.due","user":"u2","password":"npass-2","token":"ntok-1"}}}`,
			secrets: []string{"npass-1", "npass-2", "ntok-1"},
			check: func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"token_set":true`) || !strings.Contains(raw, `"password_set":true`) || !strings.Contains(raw, "u:xxxxx@nats") {
					t.Errorf("answer %s", raw)
				}
			}},
		{name: "redis",
			put:     `{"deliver":{"redis":{"addr":"r:6379","stream":"orders","maxlen":1000,"username":"dq","password":"repass-1","db":2}}}`,
			secrets: []string{"repass-1"},
			check: func(t *testing.T, raw string) {
				if !strings.Contains(raw, `"password_set":true`) || !strings.Contains(raw, `"maxlen":1000`) {
					t.Errorf("answer %s", raw)
				}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tp := "/v1/topics/d." + tc.name
			r := b.do(t, "PUT", tp, tc.put)
			want(t, r, 200)
			got := []string{string(r.raw)}
			r = b.do(t, "GET", tp, "")
			want(t, r, 200)
			got = append(got, string(r.raw))
			r = b.do(t, "GET", "/v1/topics", "")
			want(t, r, 200)
			got = append(got, string(r.raw))
			for _, raw := range got {
				for _, s := range tc.secrets {
					if strings.Contains(raw, s) {
						t.Fatalf("answer leaks %q: %s", s, raw)
					}
				}
			}
			tc.check(t, got[1])
			// Write back the settings as answered.
			back := into[wire.Topic](t, b.do(t, "GET", tp, "")).Settings
			body, err := json.Marshal(wire.TopicSettings{Deliver: back.Deliver})
			if err != nil {
				t.Fatal(err)
			}
			r = b.do(t, "PUT", tp, string(body))
			want(t, r, 200)
			ti, err := b.eng.Topic(t.Context(), "d."+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			stored := wire.NewTopicSettingsRequest(ti.Settings) // with credentials
			raw, _ := json.Marshal(stored)
			all := string(raw)
			for _, s := range tc.secrets {
				if !strings.Contains(all, s) {
					t.Errorf("write-back lost %q: %s", s, all)
				}
			}
		})
	}
}

func TestDeliverValidationNamesTheField(t *testing.T) {
	b := setup(t, nil)
	for _, tc := range []struct{ body, field string }{
		{`{"deliver":{}}`, "deliver"},
		{`{"deliver":{"kafka":{"brokers":["k:9092"],"topic":"t"},"redis":{"addr":"r:6379","stream":"s"}}}`, "deliver"},
		{`{"push":{"url":"http://x/"},"deliver":{"redis":{"addr":"r:6379","stream":"s"}}}`, "deliver"},
		{`{"deliver":{"kafka":{"brokers":[],"topic":"t"}}}`, "deliver.kafka.brokers"},
		{`{"deliver":{"kafka":{"brokers":["http://k:9092"],"topic":"t"}}}`, "deliver.kafka.brokers"},
		{`{"deliver":{"kafka":{"brokers":["k:9092"],"topic":""}}}`, "deliver.kafka.topic"},
		{`{"deliver":{"kafka":{"brokers":["k:9092"],"topic":"t","sasl":{"mechanism":"GSSAPI","user":"u"}}}}`, "deliver.kafka.sasl.mechanism"},
		{`{"deliver":{"kafka":{"brokers":["k:9092"],"topic":"t","tls":{"ca_pem":"nope"}}}}`, "deliver.kafka.tls.ca_pem"},
		{`{"deliver":{"rabbitmq":{"url":"http://x/"}}}`, "deliver.rabbitmq.url"},
		{`{"deliver":{"nats":{"url":"nats://n:4222","subject":"a.*"}}}`, "deliver.nats.subject"},
		{`{"deliver":{"redis":{"addr":"r","stream":"s"}}}`, "deliver.redis.addr"},
		{`{"deliver":{"redis":{"addr":"r:6379","stream":"s","maxlen":-1}}}`, "deliver.redis.maxlen"},
		{`{"deliver":{"redis":{"addr":"r:6379","stream":"s"},"max_in_flight":5000}}`, "deliver.max_in_flight"},
		{`{"deliver":{"redis":{"addr":"r:6379","stream":"s"},"timeout_ms":-5}}`, "deliver.timeout_ms"},
		{`{"deliver":{"redis":{"addr":"r:6379","stream":"s"},"timeout_ms":600000}}`, "deliver.timeout_ms"},
	} {
		r := b.do(t, "PUT", "/v1/topics/bad", tc.body)
		if r.status != http.StatusBadRequest || r.err.Field != tc.field {
			t.Errorf("%s: %d %s, want 400 naming %s", tc.body, r.status, r.raw, tc.field)
		}
	}
	// A URL whose parse fails must not echo its password.
	r := b.do(t, "PUT", "/v1/topics/bad", `{"deliver":{"rabbitmq":{"url":"amqp://u:pw-secret@[::1"}}}`)
	if r.status != 400 || strings.Contains(string(r.raw), "pw-secret") {
		t.Errorf("bad URL: %d %s", r.status, r.raw)
	}
}

// TestDeliverEndpointNeedsGlobalAdmin: like a push URL, a deliver
// target's address is set by admins on "*" only.
func TestDeliverEndpointNeedsGlobalAdmin(t *testing.T) {
	tadmin, err := auth.ParseToken("tadmin:tadmin-secret-0123456789a:admin:orders.*")
	if err != nil {
		t.Fatal(err)
	}
	gadmin, err := auth.ParseToken("gadmin:" + adminSecret + ":admin:*")
	if err != nil {
		t.Fatal(err)
	}
	set, err := auth.NewSet([]*auth.Token{tadmin, gadmin})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tokens = set })
	const tp = "/v1/topics/orders.eu"
	asT := []string{"Authorization", "Bearer tadmin-secret-0123456789a"}
	asG := []string{"Authorization", "Bearer " + adminSecret}
	r := b.do(t, "PUT", tp, `{"deliver":{"redis":{"addr":"10.0.0.1:6379","stream":"s"}}}`, asT...)
	if r.status != 403 {
		t.Fatalf("topic admin sets a deliver target: %d %s", r.status, r.raw)
	}
	want(t, b.do(t, "PUT", tp, `{"deliver":{"redis":{"addr":"r:6379","stream":"s","password":"p"}}}`, asG...), 200)
	// Same address, other settings: allowed.
	want(t, b.do(t, "PUT", tp, `{"max_attempts":3,"deliver":{"redis":{"addr":"r:6379","stream":"s2"},"max_in_flight":8}}`, asT...), 200)
	r = b.do(t, "PUT", tp, `{"deliver":{"redis":{"addr":"10.0.0.1:6379","stream":"s"}}}`, asT...)
	if r.status != 403 {
		t.Fatalf("topic admin changes the address: %d %s", r.status, r.raw)
	}
}

// TestDeliverCredentialsChangeByTopicAdmin: a topic admin may send the
// URL back without its password, or with other credentials: only the
// address needs admin on "*".
func TestDeliverCredentialsChangeByTopicAdmin(t *testing.T) {
	tadmin, _ := auth.ParseToken("tadmin:tadmin-secret-0123456789a:admin:orders.*")
	gadmin, _ := auth.ParseToken("gadmin:" + adminSecret + ":admin:*")
	set, err := auth.NewSet([]*auth.Token{tadmin, gadmin})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, func(c *Config) { c.Tokens = set })
	const tp = "/v1/topics/orders.eu"
	asT := []string{"Authorization", "Bearer tadmin-secret-0123456789a"}
	asG := []string{"Authorization", "Bearer " + adminSecret}
	want(t, b.do(t, "PUT", tp, `{"deliver":{"rabbitmq":{"url":"amqp://dq:pw1@rabbit:5672/vh","routing_key":"k"}}}`, asG...), 200)
	want(t, b.do(t, "PUT", tp, `{"deliver":{"rabbitmq":{"url":"amqp://dq@rabbit:5672/vh","routing_key":"k2"}}}`, asT...), 200)
	ti, err := b.eng.Topic(t.Context(), "orders.eu")
	if err != nil || ti.Settings.Deliver.RabbitMQ.URL != "amqp://dq:pw1@rabbit:5672/vh" || ti.Settings.Deliver.RabbitMQ.RoutingKey != "k2" {
		t.Fatalf("after a topic admin's write-back: %+v %v", ti.Settings.Deliver.RabbitMQ, err)
	}
	want(t, b.do(t, "PUT", tp, `{"deliver":{"rabbitmq":{"url":"amqp://other:pw2@rabbit:5672/vh","routing_key":"k2"}}}`, asT...), 200)
	if r := b.do(t, "PUT", tp, `{"deliver":{"rabbitmq":{"url":"amqp://dq@10.0.0.9:5672/vh","routing_key":"k2"}}}`, asT...); r.status != 403 {
		t.Fatalf("topic admin changes the host: %d %s", r.status, r.raw)
	}
}
