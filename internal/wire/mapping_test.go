package wire

import (
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// TestMessageRoundTrip: a message mapped for an answer and read back by a
// client is the same message, at the API's precision (UTC milliseconds),
// whether its payload is text or binary.
func TestMessageRoundTrip(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6_789_012, time.FixedZone("x", 3600))
	for _, p := range [][]byte{nil, []byte(""), []byte("héllo <&>"), {0xff, 0x00, 0xfe}} {
		m := &domain.Message{Topic: "t", ID: "a", Payload: p, Headers: map[string]string{"k": "v"},
			DeliverAt: at, State: domain.StateInflight, Attempt: 2, Failures: 1, MaxAttempts: 5, LastError: "boom",
			CreatedAt: at, UpdatedAt: at, Receipt: "r", LeaseExpiresAt: at}
		b, err := json.Marshal(FromMessage(m))
		if err != nil {
			t.Fatal(err)
		}
		var w Message
		if err := json.Unmarshal(b, &w); err != nil {
			t.Fatal(err)
		}
		got := w.ToDomain()
		want := *m
		ms := at.UTC().Truncate(time.Millisecond)
		want.DeliverAt, want.CreatedAt, want.UpdatedAt, want.LeaseExpiresAt = ms, ms, ms, ms
		if want.Payload == nil {
			want.Payload = []byte{}
		}
		if !reflect.DeepEqual(*got, want) {
			t.Fatalf("%q: round trip\n got %+v\nwant %+v\n(%s)", p, *got, want, b)
		}
		if (w.Payload != nil) == (w.PayloadBase64 != nil) {
			t.Fatalf("%q: exactly one payload field, got %s", p, b)
		}
	}
	// A send answer leaves the payload out, unless it is a duplicate's.
	m := &domain.Message{ID: "a", Payload: []byte("x")}
	if w := FromSentMessage(m); w.Payload != nil || w.PayloadBase64 != nil {
		t.Fatalf("send answer carries the payload: %+v", w)
	}
	m.Duplicate = true
	if w := FromSentMessage(m); w.Payload == nil || *w.Payload != "x" {
		t.Fatalf("duplicate's answer lacks the stored payload: %+v", w)
	}
}

// TestTopicSettingsSecretIsWriteOnly: answers never carry the push
// secret, only secret_set; requests carry it and never secret_set.
func TestTopicSettingsSecretIsWriteOnly(t *testing.T) {
	s := domain.TopicSettings{MaxAttempts: 3, Lease: time.Minute,
		Push: &domain.PushSettings{URL: "https://x/hook", Timeout: time.Second, Concurrency: 2, Secret: "s3cret"}}
	ans := FromTopicSettings(s)
	if ans.Push.Secret != "" || !ans.Push.SecretSet {
		t.Fatalf("answer: %+v", ans.Push)
	}
	req := NewTopicSettingsRequest(s)
	if req.Push.Secret != "s3cret" || req.Push.SecretSet {
		t.Fatalf("request: %+v", req.Push)
	}
	if got := req.ToDomain(); !reflect.DeepEqual(got, s) {
		t.Fatalf("request round trip %+v, want %+v", got, s)
	}
	if s.Push.Secret != "s3cret" {
		t.Fatal("mapping changed its input")
	}
}

// TestSendRequestShape: the shape rules a request is mapped by, and
// NameFields naming the engine's delay errors as the request gave them.
func TestSendRequestShape(t *testing.T) {
	str := func(s string) *string { return &s }
	i64 := func(n int64) *int64 { return &n }
	d := Duration(time.Second)
	zero := time.Time{}
	for _, c := range []struct {
		in    SendRequest
		field string
	}{
		{SendRequest{Payload: str("x"), ID: str("")}, "id"},
		{SendRequest{}, "payload"},
		{SendRequest{Payload: str("x"), PayloadBase64: str("eA==")}, "payload"},
		{SendRequest{PayloadBase64: str("eA")}, "payload_base64"},
		{SendRequest{Payload: str("x"), Delay: &d, DelayMS: i64(5)}, "delay"},
		{SendRequest{Payload: str("x"), DelayMS: i64(-1)}, "delay_ms"},
		{SendRequest{Payload: str("x"), DelayMS: i64(maxDelayMS + 1)}, "delay_ms"},
		{SendRequest{Payload: str("x"), DeliverAt: &zero}, "deliver_at"},
	} {
		var ie *domain.InvalidError
		if _, err := c.in.ToDomain(); !errors.As(err, &ie) || ie.Field != c.field {
			t.Errorf("%s: err %v, want one on %q", dump(c.in), err, c.field)
		}
	}
	in := SendRequest{PayloadBase64: str("/wD+"), DelayMS: i64(1500), ID: str("a")}
	r, err := in.ToDomain()
	if err != nil || r.ID != "a" || string(r.Payload) != "\xff\x00\xfe" || r.When.Delay != 1500*time.Millisecond {
		t.Fatalf("%+v %v", r, err)
	}
	err = in.NameFields(domain.Limits{MaxDelay: time.Second}.CheckDelay(r.When.Delay, "delay"))
	var ie *domain.InvalidError
	if !errors.As(err, &ie) || ie.Field != "delay_ms" || ie.Reason != "1500 ms is beyond the maximum delay of 1s" {
		t.Fatalf("named %#v", err)
	}
}

func dump(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestDurationsInMilliseconds: answers carry every duration also as whole
// milliseconds; a settings request may give either form, and one given
// both ways must agree, so a read-change-write of either form works and a
// disagreement is refused instead of one form silently winning.
func TestDurationsInMilliseconds(t *testing.T) {
	s := domain.TopicSettings{Lease: 90 * time.Second,
		Backoff: domain.Backoff{Initial: 1500 * time.Microsecond, Max: time.Hour, Multiplier: 2},
		Push:    &domain.PushSettings{URL: "https://x/hook", Timeout: 10 * time.Second}}
	ans := FromTopicSettings(s)
	b, err := json.Marshal(ans)
	if err != nil {
		t.Fatal(err)
	}
	const want = `{"backoff":{"initial":"1.5ms","initial_ms":1,"max":"1h0m0s","max_ms":3600000,"multiplier":2,"jitter":0},` +
		`"lease":"1m30s","lease_ms":90000,"push":{"url":"https://x/hook","timeout":"10s","timeout_ms":10000}}`
	if string(b) != want {
		t.Fatalf("answer\n got %s\nwant %s", b, want)
	}
	if req := NewTopicSettingsRequest(s); req.LeaseMS != nil || req.Backoff.InitialMS != nil || req.Push.TimeoutMS != nil {
		t.Fatalf("a request the Go client sends carries *_ms: %s", dump(req))
	}
	sc := FromSchedule(&domain.Schedule{Name: "n", Topic: "t", Cron: "@hourly", Delay: 2 * time.Minute})
	if sc.DelayMS == nil || *sc.DelayMS != 120000 {
		t.Fatalf("schedule delay_ms: %s", dump(sc))
	}
	if sc := FromSchedule(&domain.Schedule{Name: "n"}); sc.Delay != nil || sc.DelayMS != nil {
		t.Fatalf("schedule without a delay: %s", dump(sc))
	}

	// An answer written back unchanged means the same settings.
	back, orig := ans, FromTopicSettings(s)
	if err := back.ResolveMS(); err != nil || !reflect.DeepEqual(back.ToDomain(), orig.ToDomain()) {
		t.Fatalf("answer written back: %v %s", err, dump(back))
	}

	for _, c := range []struct {
		body  string
		want  domain.TopicSettings
		field string // refused, naming this field
	}{
		{body: `{"lease_ms":30000}`, want: domain.TopicSettings{Lease: 30 * time.Second}},
		{body: `{"lease":"30s","lease_ms":30000}`, want: domain.TopicSettings{Lease: 30 * time.Second}},
		{body: `{"lease":"30.5ms","lease_ms":30}`, want: domain.TopicSettings{Lease: 30500 * time.Microsecond}},
		{body: `{"backoff":{"initial_ms":250,"max_ms":60000,"multiplier":3}}`,
			want: domain.TopicSettings{Backoff: domain.Backoff{Initial: 250 * time.Millisecond, InitialSet: true, Max: time.Minute, Multiplier: 3}}},
		{body: `{"push":{"url":"https://x/h","timeout_ms":1000}}`,
			want: domain.TopicSettings{Push: &domain.PushSettings{URL: "https://x/h", Timeout: time.Second}}},
		{body: `{"lease":"30s","lease_ms":60000}`, field: "lease_ms"},
		{body: `{"lease_ms":-1}`, field: "lease_ms"},
		{body: `{"lease_ms":9223372036854775807}`, field: "lease_ms"},
		{body: `{"backoff":{"initial":"1s","initial_ms":2000}}`, field: "backoff.initial_ms"},
		{body: `{"backoff":{"max":"1s","max_ms":1}}`, field: "backoff.max_ms"},
		{body: `{"push":{"url":"u","timeout":"1s","timeout_ms":2}}`, field: "push.timeout_ms"},
	} {
		var in TopicSettings
		if err := DecodeStrict([]byte(c.body), &in, false); err != nil {
			t.Fatalf("%s: %v", c.body, err)
		}
		err := in.ResolveMS()
		if c.field != "" {
			var ie *domain.InvalidError
			if !errors.As(err, &ie) || ie.Field != c.field {
				t.Errorf("%s: err %v, want one on %q", c.body, err, c.field)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.body, err)
		} else if got := in.ToDomain(); !reflect.DeepEqual(got, c.want) {
			t.Errorf("%s: %+v, want %+v", c.body, got, c.want)
		}
	}
}

// TestDeliverMapping: answers redact credentials and say *_set; requests
// carry them and drop *_set; a request maps back to the same settings.
func TestDeliverMapping(t *testing.T) {
	s := domain.TopicSettings{Deliver: &domain.DeliverSettings{
		NATS:        &domain.NATSTarget{URL: "nats://u:urlpw@n:4222", Subject: "a.b", User: "u2", Password: "pw", Token: "tok", TLS: &domain.TLSSettings{ServerName: "n"}},
		MaxInFlight: 9, Timeout: 1500 * time.Millisecond}}
	ans := FromTopicSettings(s)
	n := ans.Deliver.NATS
	if n.Password != "" || n.Token != "" || !n.PasswordSet || !n.TokenSet || n.URL != "nats://u:xxxxx@n:4222" || ans.Deliver.TimeoutMS != 1500 || n.TLS.ServerName != "n" {
		t.Fatalf("answer: %+v", n)
	}
	if s.Deliver.NATS.Password != "pw" {
		t.Fatal("FromTopicSettings changed its input")
	}
	req := NewTopicSettingsRequest(s)
	if r := req.Deliver.NATS; r.Password != "pw" || r.Token != "tok" || r.PasswordSet || r.TokenSet || r.URL != "nats://u:urlpw@n:4222" {
		t.Fatalf("request: %+v", r)
	}
	back := req.ToDomain()
	if !reflect.DeepEqual(back.Deliver, s.Deliver) {
		t.Fatalf("round trip: %+v, want %+v", back.Deliver, s.Deliver)
	}
}
