package dashboard_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/dashboard"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

func TestServerWiring(t *testing.T) {
	b := setup(t, setupOpts{})
	br := b.browser(t)
	for path, to := range map[string]string{"/": "/ui/", "/ui": "/ui/", "/ui/": "/ui/login"} {
		p := br.get(path)
		if p.status/100 != 3 || p.header.Get("Location") != to {
			t.Errorf("GET %s: %d to %q, want a redirect to %s", path, p.status, p.header.Get("Location"), to)
		}
	}
	css := br.get("/ui/static/style.css")
	wantStatus(t, css, http.StatusOK)
	if !strings.HasPrefix(css.header.Get("Content-Type"), "text/css") {
		t.Errorf("style.css type %q", css.header.Get("Content-Type"))
	}
	// The API keeps its bearer auth; a dashboard session is no API credential.
	adm := b.login(t, opsSecret)
	if p := adm.get("/v1/topics"); p.status != http.StatusUnauthorized {
		t.Errorf("API with a dashboard cookie: %d, want 401", p.status)
	}
	wantStatus(t, adm.get("/ui/no-such-page"), http.StatusNotFound)
}

func TestTopicsPage(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	b.send(t, "orders", "order-43", 0)
	br := b.login(t, opsSecret)
	p := br.get("/ui/")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, `<a href="/ui/topics/orders">orders</a>`, `href="/ui/dead?topic=orders">1</a>`, "in 59m", "Per minute, last 5m")
	// 3 sends in a 5-minute window (cut to the Recorder's age): a positive sent rate.
	if !regexp.MustCompile(`<td class="num">[1-9][0-9.]*</td>`).MatchString(p.body) {
		t.Errorf("no positive rate on the topics page:\n%s", p.body)
	}
}

func TestTopicPageAndSettings(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	br := b.login(t, opsSecret)
	p := br.get("/ui/topics/orders")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, "<h1>orders</h1>", `id="rates"`, "lease expired", "Save settings", `name="lease" value="30s"`, `<svg class="chart"`)

	form := url.Values{"max_attempts": {"7"}, "lease": {"45s"}, "backoff_initial": {"2s"}, "backoff_max": {"10m"},
		"backoff_multiplier": {"3"}, "backoff_jitter": {"0.1"}, "rate_per_second": {"50"}, "rate_burst": {"10"}}
	r := br.post("/ui/topics/orders/settings", form)
	wantStatus(t, r, http.StatusSeeOther)
	ti, err := b.eng.Topic(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	s := ti.Settings
	if s.MaxAttempts != 7 || s.Lease != 45*time.Second || s.Backoff.Initial != 2*time.Second || s.Backoff.Multiplier != 3 || s.RateLimit == nil || s.RateLimit.PerSecond != 50 || s.Push != nil {
		t.Errorf("settings after save: %+v", s)
	}
	wantBody(t, br.get(r.header.Get("Location")), "Settings saved.", `name="max_attempts" value="7"`)

	for field, bad := range map[string]string{"lease": "soon", "max_attempts": "many", "backoff_jitter": "2"} {
		f := url.Values{field: {bad}}
		p := br.post("/ui/topics/orders/settings", f)
		wantStatus(t, p, http.StatusBadRequest)
		wantBody(t, p, strings.TrimPrefix(field, "backoff_"))
	}
}

func TestUpcomingFromEngine(t *testing.T) {
	b := setup(t, setupOpts{})
	// Sent straight to the engine, around the recorder: only the engine's
	// DueCounts can know about these (like messages sent before start).
	for _, id := range []string{"x1", "x2"} {
		if _, err := b.eng.Send(context.Background(), "orders", domain.SendRequest{ID: id, Payload: []byte("p"), When: domain.When{Delay: 10 * time.Minute}}); err != nil {
			t.Fatal(err)
		}
	}
	br := b.login(t, opsSecret)
	p := br.get("/ui/upcoming?topic=orders")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, `id="next-hour">2<`)
	if strings.Contains(p.body, "Since server start") {
		t.Error("the engine is a full source, but the page shows the fallback note")
	}
	// The list reads the store's index too, soonest first, across topics.
	if _, err := b.eng.Send(context.Background(), "billing.x", domain.SendRequest{ID: "b1", Payload: []byte("p"), When: domain.When{Delay: 5 * time.Minute}}); err != nil {
		t.Fatal(err)
	}
	p = br.get("/ui/upcoming")
	wantBody(t, p, `id="soonest"`)
	i1, i2, i3 := strings.Index(p.body, "<code>b1</code>"), strings.Index(p.body, "<code>x1</code>"), strings.Index(p.body, "<code>x2</code>")
	if i1 < 0 || i2 < i1 || i3 < i2 {
		t.Errorf("soonest list not b1, x1, x2 in order (%d %d %d)", i1, i2, i3)
	}
	wantNotBody(t, br.get("/ui/upcoming?topic=orders"), "<code>b1</code>")
}

func TestUpcomingListPages(t *testing.T) {
	b := setup(t, setupOpts{})
	reqs := make([]domain.SendRequest, 60)
	for i := range reqs {
		reqs[i] = domain.SendRequest{ID: fmt.Sprintf("m%02d", i), Payload: []byte("p"), When: domain.When{Delay: time.Duration(i+1) * time.Minute}}
	}
	if _, err := b.eng.SendBatch(context.Background(), "orders", reqs); err != nil {
		t.Fatal(err)
	}
	br := b.login(t, opsSecret)
	p := br.get("/ui/upcoming?topic=orders")
	wantBody(t, p, "<code>m00</code>", "<code>m49</code>", `id="soonest-more"`)
	wantNotBody(t, p, "<code>m50</code>")
	m := regexp.MustCompile(`id="soonest-more" href="([^"]+)"`).FindStringSubmatch(p.body)
	if m == nil {
		t.Fatal("no link to the next page")
	}
	next := br.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	wantBody(t, next, "<code>m50</code>", "<code>m59</code>")
	wantNotBody(t, next, "<code>m49</code>", `id="soonest-more"`)
}

func TestUpcomingFallback(t *testing.T) {
	b := setup(t, setupOpts{plainQueue: true})
	for _, id := range []string{"a", "b", "c"} {
		b.send(t, "orders", id, 5*time.Minute+30*time.Second)
	}
	b.send(t, "orders", "d", 2*time.Hour)
	b.send(t, "billing.x", "e", 3*24*time.Hour)
	b.send(t, "orders", "now", 0) // due now: not upcoming
	br := b.login(t, opsSecret)
	p := br.get("/ui/upcoming")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, `id="source-note"`, "Since server start", `id="next-hour">3<`, `id="next-days">5<`, `: 3 due</title>`)
	one := br.get("/ui/upcoming?topic=billing.x")
	wantBody(t, one, `id="next-hour">0<`, `id="next-days">1<`, "nothing due in the next hour")

	// Cancelling and rescheduling keep the fallback counts right.
	br.get("/ui/message?topic=orders&id=a")
	wantStatus(t, br.post("/ui/message/cancel", url.Values{"topic": {"orders"}, "id": {"a"}}), http.StatusSeeOther)
	wantStatus(t, br.post("/ui/message/reschedule", url.Values{"topic": {"orders"}, "id": {"d"}, "delay": {"10m"}}), http.StatusSeeOther)
	wantBody(t, br.get("/ui/upcoming?topic=orders"), `id="next-hour">3<`, `id="next-days">3<`)

	// A message that comes due and is leased leaves the counts.
	b.send(t, "soon", "s", 200*time.Millisecond)
	wantBody(t, br.get("/ui/upcoming?topic=soon"), `id="next-hour">1<`)
	ms, err := b.api.Lease(context.Background(), "soon", domain.LeaseRequest{Wait: 5 * time.Second})
	if err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	wantBody(t, br.get("/ui/upcoming?topic=soon"), `id="next-hour">0<`)
}

// TestNoUpcomingRecorderNeedsSource: a Recorder that does not count
// upcoming messages is no Upcoming source, so a dashboard without
// another one is refused instead of showing zeros.
func TestNoUpcomingRecorderNeedsSource(t *testing.T) {
	b := setup(t, setupOpts{})
	rec := dashboard.NewRecorder(dashboard.RecorderConfig{NoUpcoming: true})
	if _, err := dashboard.New(dashboard.Config{Queue: b.q, Recorder: rec}); err == nil || !strings.Contains(err.Error(), "Config.Upcoming is required") {
		t.Fatalf("New without Upcoming: %v, want it refused", err)
	}
	if _, err := dashboard.New(dashboard.Config{Queue: b.q, Recorder: rec, Upcoming: b.eng}); err != nil {
		t.Fatal(err)
	}
}

// fakeSource answers every bucket with the same count.
type fakeSource struct{ per int64 }

func (f fakeSource) DueCounts(_ context.Context, topic string, _ time.Time, _ time.Duration, n int) ([]int64, error) {
	out := make([]int64, n)
	for i := range out {
		out[i] = f.per
	}
	return out, nil
}

func TestUpcomingSource(t *testing.T) {
	b := setup(t, setupOpts{upcoming: fakeSource{per: 2}})
	b.send(t, "orders", "x", time.Hour)
	br := b.login(t, opsSecret)
	p := br.get("/ui/upcoming")
	wantBody(t, p, `id="next-hour">120<`, `id="next-days">336<`)
	wantNotBody(t, p, "Since server start")
	if n := strings.Count(p.body, `<rect class="bar`); n != 60+7*24 {
		t.Errorf("%d bars, want one per minute and per hour", n)
	}
}

func TestTimeliness(t *testing.T) {
	b := setup(t, setupOpts{})
	for i := range 5 {
		b.send(t, "orders", "m"+string(rune('0'+i)), 0)
	}
	ms, err := b.api.Lease(context.Background(), "orders", domain.LeaseRequest{Max: 10, Wait: time.Second})
	if err != nil || len(ms) != 5 {
		t.Fatalf("lease: %d %v", len(ms), err)
	}
	br := b.login(t, viewerSecret)
	p := br.get("/ui/timeliness")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, "Early deliveries: 0", `<td class="num">5</td>`, `id="chart-lateness"`, "deliveries</title>")
	wantBody(t, br.get("/ui/timeliness?topic=orders&window=1m0s"), "— orders, last 1m")
	wantStatus(t, br.get("/ui/timeliness?window=3h"), http.StatusBadRequest)

	// An early delivery (which the engine must never make) would be shown.
	b.rec.HandleEvent(engine.Event{Kind: engine.EventDelivered, Topic: "orders", Lateness: -time.Millisecond})
	wantBody(t, br.get("/ui/timeliness?topic=orders"), "Early deliveries: 1")
}

func TestMessagePage(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	br := b.login(t, opsSecret)
	wantBody(t, br.get("/ui/message"), `id="lookup"`)
	p := br.get("/ui/message?topic=orders&id=order-42")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, `id="state">scheduled<`, "{&#34;order&#34;:42}", "<strong>created</strong>", "<strong>sent</strong>", "due (scheduled)", `id="cancel"`, `id="reschedule"`, "<th>Priority</th><td>0 ")

	r := br.post("/ui/message/reschedule", url.Values{"topic": {"orders"}, "id": {"order-42"}, "delay": {"5m"}})
	wantStatus(t, r, http.StatusSeeOther)
	p = br.get(r.header.Get("Location"))
	wantBody(t, p, "Message rescheduled.", "<strong>rescheduled</strong>", "in 4m")
	wantStatus(t, br.post("/ui/message/reschedule", url.Values{"topic": {"orders"}, "id": {"order-42"}, "delay": {"soon"}}), http.StatusBadRequest)
	wantStatus(t, br.post("/ui/message/reschedule", url.Values{"topic": {"orders"}, "id": {"order-42"}, "delay": {"1m"}, "deliver_at": {"2030-01-01T00:00:00Z"}}), http.StatusBadRequest)
	wantStatus(t, br.post("/ui/message/reschedule", url.Values{"topic": {"orders"}, "id": {"dead-1"}, "delay": {"1m"}}), http.StatusConflict)

	dead := br.get("/ui/message?topic=orders&id=dead-1")
	wantBody(t, dead, `id="state">dead<`, "boom: card declined", "nacked, now dead", "dead letters")
	wantNotBody(t, dead, `id="cancel"`, `id="reschedule"`)

	r = br.post("/ui/message/cancel", url.Values{"topic": {"orders"}, "id": {"order-42"}})
	wantStatus(t, r, http.StatusSeeOther)
	gone := br.get(r.header.Get("Location"))
	wantStatus(t, gone, http.StatusNotFound)
	wantBody(t, gone, "Message cancelled.", `id="not-found"`, "<strong>cancelled</strong>")
	if s := b.state(t, "orders", "order-42"); s != "absent" {
		t.Errorf("order-42 is %s", s)
	}
	wantStatus(t, br.get("/ui/message?topic=orders&id=bad%20id"), http.StatusBadRequest)
}

func TestDeadPage(t *testing.T) {
	b := setup(t, setupOpts{})
	b.kill(t, "orders", "d1", "timeout calling payments")
	b.kill(t, "orders", "d2", "card declined")
	b.kill(t, "orders", "d3", "timeout calling stock")
	b.kill(t, "orders", "d4", "schema mismatch")
	br := b.login(t, opsSecret)
	p := br.get("/ui/dead")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, "d1", "d2", "d3", "card declined", `id="replay-all"`, `<strong>4</strong> dead in`)
	f := br.get("/ui/dead?topic=orders&q=TIMEOUT")
	wantBody(t, f, "d1", "d3")
	wantNotBody(t, f, ">d2<", "card declined")
	wantBody(t, br.get("/ui/dead?topic=orders&q=nothing-like-this"), "No dead letter matches")

	r := br.post("/ui/dead/replay", url.Values{"topic": {"orders"}, "id": {"d1"}})
	wantStatus(t, r, http.StatusSeeOther)
	wantBody(t, br.get(r.header.Get("Location")), "Dead letter replayed")
	if s := b.state(t, "orders", "d1"); s != domain.StateReady {
		t.Errorf("d1 is %s after replay, want ready", s)
	}
	wantStatus(t, br.post("/ui/dead/delete", url.Values{"topic": {"orders"}, "id": {"d2"}}), http.StatusSeeOther)
	if s := b.state(t, "orders", "d2"); s != "absent" {
		t.Errorf("d2 is %s after purge", s)
	}
	wantStatus(t, br.post("/ui/dead/replay", url.Values{"topic": {"orders"}, "id": {"d2"}}), http.StatusNotFound)
	r = br.post("/ui/dead/replay-all", url.Values{"topic": {"orders"}})
	wantStatus(t, r, http.StatusSeeOther)
	wantBody(t, br.get(r.header.Get("Location")), "2 dead letters replayed.")
	// d1, d3, d4 are ready again: consume them, then make one more dead letter.
	ctx := context.Background()
	ms, err := b.api.Lease(ctx, "orders", domain.LeaseRequest{Max: 10})
	if err != nil || len(ms) != 3 {
		t.Fatalf("lease replayed: %d %v", len(ms), err)
	}
	for _, m := range ms {
		if err := b.api.Ack(ctx, "orders", m.ID, m.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	b.kill(t, "orders", "d5", "again")
	r = br.post("/ui/dead/purge", url.Values{"topic": {"orders"}})
	wantStatus(t, r, http.StatusSeeOther)
	wantBody(t, br.get(r.header.Get("Location")), "1 dead letters purged.", "No dead letters in this topic.")
}

func TestPauseResumeTopic(t *testing.T) {
	b := setup(t, setupOpts{})
	b.send(t, "orders", "now", 0)
	br := b.login(t, opsSecret)
	wantNotBody(t, br.get("/ui/topics/orders"), `id="paused"`)
	wantStatus(t, br.post("/ui/topics/orders/pause", url.Values{}), http.StatusSeeOther)
	p := br.get("/ui/topics/orders?done=paused")
	wantBody(t, p, `id="paused"`, `id="resume"`, "Topic paused")
	wantBody(t, br.get("/ui/"), `badge warn">paused<`)
	if ms, err := b.eng.Lease(context.Background(), "orders", domain.LeaseRequest{Max: 1}); err != nil || len(ms) != 0 {
		t.Fatalf("leased %v from a topic paused in the dashboard (%v)", ms, err)
	}
	wantStatus(t, br.post("/ui/topics/orders/resume", url.Values{}), http.StatusSeeOther)
	wantBody(t, br.get("/ui/topics/orders"), `id="pause"`)
	if ms, err := b.eng.Lease(context.Background(), "orders", domain.LeaseRequest{Max: 1}); err != nil || len(ms) != 1 {
		t.Fatalf("after resume: %v %v", ms, err)
	}
}

// TestDeleteEmptyTopic: the delete button shows only on an empty topic,
// and deleting one removes it from the topics page.
func TestDeleteEmptyTopic(t *testing.T) {
	b := setup(t, setupOpts{})
	b.send(t, "orders", "now", 0)
	br := b.login(t, opsSecret)
	wantNotBody(t, br.get("/ui/topics/orders"), `id="delete-topic"`)
	r := br.post("/ui/topics/orders/delete", url.Values{})
	if r.status == http.StatusSeeOther {
		t.Fatal("a topic holding a message was deleted")
	}
	wantBody(t, r, "holds 0 scheduled, 1 ready")
	ms, err := b.eng.Lease(context.Background(), "orders", domain.LeaseRequest{Max: 1})
	if err != nil || len(ms) != 1 {
		t.Fatalf("lease: %v %v", ms, err)
	}
	if err := b.eng.Ack(context.Background(), "orders", ms[0].ID, ms[0].Receipt); err != nil {
		t.Fatal(err)
	}
	wantBody(t, br.get("/ui/topics/orders"), `id="delete-topic"`)
	r = br.post("/ui/topics/orders/delete", url.Values{})
	wantStatus(t, r, http.StatusSeeOther)
	p := br.get(r.header.Get("Location"))
	wantBody(t, p, "Topic deleted")
	wantNotBody(t, p, "/ui/topics/orders")
}

// TestDeliverTargetShownAndKept: the topics page names a topic's broker
// target (no host, no credentials), and saving the settings form keeps
// the target and its password.
func TestDeliverTargetShownAndKept(t *testing.T) {
	b := setup(t, setupOpts{})
	seed(t, b)
	if _, err := b.eng.SetTopicSettings(context.Background(), "orders", domain.TopicSettings{Deliver: &domain.DeliverSettings{
		Redis: &domain.RedisTarget{Addr: "redis.internal:6379", Stream: "orders-due", Password: "dash-s3cret"}}}); err != nil {
		t.Fatal(err)
	}
	br := b.login(t, opsSecret)
	p := br.get("/ui/")
	wantStatus(t, p, http.StatusOK)
	wantBody(t, p, "redis → orders-due")
	p = br.get("/ui/topics/orders")
	wantBody(t, p, `id="deliver"`, "redis → orders-due")
	for _, page := range []string{p.body, br.get("/ui/").body} {
		if strings.Contains(page, "dash-s3cret") || strings.Contains(page, "redis.internal") {
			t.Fatal("a dashboard page shows the target's host or password")
		}
	}
	wantStatus(t, br.post("/ui/topics/orders/settings", url.Values{"max_attempts": {"9"}}), http.StatusSeeOther)
	ti, err := b.eng.Topic(context.Background(), "orders")
	if err != nil {
		t.Fatal(err)
	}
	if d := ti.Settings.Deliver; ti.Settings.MaxAttempts != 9 || d == nil || d.Redis == nil || d.Redis.Password != "dash-s3cret" {
		t.Fatalf("after saving the form: %+v", ti.Settings)
	}
}
