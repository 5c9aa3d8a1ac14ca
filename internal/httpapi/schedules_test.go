package httpapi

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

func TestSchedulesAPI(t *testing.T) {
	var b *bundle
	b = setup(t, func(c *Config) { c.Scheduler = schedulerOf(&b) })
	r := b.do(t, "PUT", "/v1/schedules/nightly", `{"topic":"reports","cron":"30 2 * * *","timezone":"America/New_York","payload":"run","delay":"5s","missed":"skip"}`)
	want(t, r, 200)
	s := into[wire.Schedule](t, r)
	if s.Name != "nightly" || s.Topic != "reports" || s.Payload == nil || *s.Payload != "run" || s.NextTick == nil || s.Missed != "skip" || s.Paused || s.Delay == nil {
		t.Fatalf("put answer %s", r.raw)
	}
	for _, c := range []struct{ body, field string }{
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","dealy":"5s"}`, "dealy"},
		{`{"topic":"reports","cron":"30 2 * *","payload":"x"}`, "cron"},
		{`{"topic":"reports","cron":"30 2 * * *"}`, "payload"},
		{`{"topic":"bad topic","cron":"30 2 * * *","payload":"x"}`, "topic"},
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","timezone":"Nowhere/X"}`, "timezone"},
		{`{"topic":"reports","cron":"` + strings.Repeat("1,", 200) + `1 * * * *","payload":"x"}`, "cron"},
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","timezone":"` + strings.Repeat("A/", 40) + `B"}`, "timezone"},
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","headers":{"a\u2028":"v"}}`, "headers"},
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","delay":5}`, "delay"},
		{`{"topic":"reports","cron":"30 2 * * *","payload":"x","last_tick":"2030-01-01T00:00:00Z"}`, "last_tick"},
	} {
		r := b.do(t, "PUT", "/v1/schedules/nightly", c.body)
		if r.status != 400 || r.err.Field != c.field {
			t.Errorf("PUT %s: %d %s, want 400 on %q", c.body, r.status, r.raw, c.field)
		}
	}
	want(t, b.do(t, "PUT", "/v1/schedules/bad%20name", `{"topic":"t","cron":"@hourly","payload":""}`), 400)

	// A JSON payload is kept as JSON: answered as payload_json, without
	// the marker header that makes the messages it sends answer so too.
	r = b.do(t, "PUT", "/v1/schedules/json", `{"topic":"reports","cron":"@hourly","payload_json":{"report": "daily", "n": [1, 2]},"headers":{"h":"v"}}`)
	want(t, r, 200)
	if s := into[wire.Schedule](t, r); string(s.PayloadJSON) != `{"report":"daily","n":[1,2]}` || s.Payload != nil || len(s.Headers) != 1 || s.Headers["h"] != "v" {
		t.Fatalf("put with payload_json answered %s", r.raw)
	}
	if s := into[wire.Schedule](t, b.do(t, "GET", "/v1/schedules/json", "")); string(s.PayloadJSON) != `{"report":"daily","n":[1,2]}` {
		t.Fatalf("get of a payload_json schedule: %+v", s)
	}
	if r := b.do(t, "PUT", "/v1/schedules/json", `{"topic":"reports","cron":"@hourly","payload":"x","payload_json":{}}`); r.status != 400 || r.err.Field != "payload_json" {
		t.Fatalf("payload and payload_json: %d %s", r.status, r.raw)
	}
	want(t, b.do(t, "DELETE", "/v1/schedules/json", ""), 200)

	r = b.do(t, "PATCH", "/v1/schedules/nightly", `{"paused":true}`)
	want(t, r, 200)
	if s := into[wire.Schedule](t, r); !s.Paused || s.NextTick != nil {
		t.Fatalf("pause answer %s", r.raw)
	}
	want(t, b.do(t, "PATCH", "/v1/schedules/nightly", `{}`), 400)
	want(t, b.do(t, "PATCH", "/v1/schedules/nosuch", `{"paused":false}`), 404)

	r = b.do(t, "GET", "/v1/schedules", "")
	want(t, r, 200)
	if l := into[wire.SchedulesResponse](t, r); len(l.Schedules) != 1 || l.Schedules[0].Name != "nightly" || !l.Schedules[0].Paused {
		t.Fatalf("list %s", r.raw)
	}
	want(t, b.do(t, "GET", "/v1/schedules/nightly", ""), 200)
	want(t, b.do(t, "DELETE", "/v1/schedules/nightly", ""), 200)
	want(t, b.do(t, "GET", "/v1/schedules/nightly", ""), 404)
	want(t, b.do(t, "DELETE", "/v1/schedules/nightly", ""), 404)
}

func TestPushSecretIsWriteOnly(t *testing.T) {
	b := setup(t, nil)
	r := b.do(t, "PUT", "/v1/topics/hooks", `{"push":{"url":"https://example.test/hook","secret":"s3cret"}}`)
	want(t, r, 200)
	if strings.Contains(string(r.raw), "s3cret") || !strings.Contains(string(r.raw), `"secret_set":true`) {
		t.Fatalf("PUT answer leaks or hides the secret: %s", r.raw)
	}
	for _, path := range []string{"/v1/topics/hooks", "/v1/topics"} {
		r = b.do(t, "GET", path, "")
		want(t, r, 200)
		if strings.Contains(string(r.raw), "s3cret") || !strings.Contains(string(r.raw), `"secret_set":true`) {
			t.Fatalf("GET %s: %s", path, r.raw)
		}
	}
	// Writing back what GET answered keeps the secret.
	r = b.do(t, "PUT", "/v1/topics/hooks", `{"push":{"url":"https://example.test/v2","secret_set":true}}`)
	want(t, r, 200)
	set, err := b.eng.Topic(t.Context(), "hooks")
	if err != nil || set.Settings.Push == nil || set.Settings.Push.Secret != "s3cret" || set.Settings.Push.URL != "https://example.test/v2" {
		t.Fatalf("after write-back: %+v %v", set, err)
	}
	for _, bad := range []string{`"ftp://x/y"`, `"file:///etc/passwd"`, `"http://user:pw@x/"`, `"/relative"`} {
		r = b.do(t, "PUT", "/v1/topics/hooks", `{"push":{"url":`+bad+`}}`)
		if r.status != http.StatusBadRequest || r.err.Field != "push.url" {
			t.Errorf("push url %s: %d %s", bad, r.status, r.raw)
		}
	}
}

// schedulerOf forwards to the bundle's engine once setup has made it.
func schedulerOf(b **bundle) domain.Scheduler { return lazyScheduler{b} }

type lazyScheduler struct{ b **bundle }

func (l lazyScheduler) ScheduleSet(ctx context.Context, s domain.Schedule) (*domain.Schedule, error) {
	return (*l.b).eng.ScheduleSet(ctx, s)
}
func (l lazyScheduler) ScheduleGet(ctx context.Context, n string) (*domain.Schedule, error) {
	return (*l.b).eng.ScheduleGet(ctx, n)
}
func (l lazyScheduler) ScheduleList(ctx context.Context) ([]domain.Schedule, error) {
	return (*l.b).eng.ScheduleList(ctx)
}
func (l lazyScheduler) ScheduleDelete(ctx context.Context, n string) error {
	return (*l.b).eng.ScheduleDelete(ctx, n)
}
func (l lazyScheduler) SchedulePause(ctx context.Context, n string, p bool) (*domain.Schedule, error) {
	return (*l.b).eng.SchedulePause(ctx, n, p)
}
