package dashboard_test

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/delayq/delayq/internal/domain"
)

// chromiumPath is Debian's chromium (apt-get install -y chromium).
const chromiumPath = "/usr/bin/chromium"

// newChromium starts headless Chromium with a fresh profile, or skips.
func newChromium(t *testing.T) context.Context {
	t.Helper()
	path := chromiumPath
	if _, err := os.Stat(path); err != nil {
		p, err := exec.LookPath("chromium")
		if err != nil {
			t.Skip("browser test skipped: no chromium at " + chromiumPath + " or on PATH; install it with `apt-get install -y chromium` (scripts/test.sh does in CI)")
		}
		path = p
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.UserDataDir(t.TempDir()),
	)
	ctx, cancelCtx := chromedp.NewContext(alloc)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(func() {
		cancelTimeout()
		cancelCtx()
		cancelAlloc() // waits for the browser process to exit
	})
	if err := chromedp.Do(ctx, chromedp.EmulateViewport(1360, 900)); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshot saves the page as docs/img/dashboard-<name>.png when
// DELAYQ_SCREENSHOTS=1, so ordinary runs never rewrite the docs.
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	if os.Getenv("DELAYQ_SCREENSHOTS") != "1" {
		return
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	path := filepath.Join("..", "..", "docs", "img", "dashboard-"+name+".png")
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s", path)
}

func do(t *testing.T, ctx context.Context, what string, steps ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	if err := chromedp.Do(ctx, steps...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func text(t *testing.T, ctx context.Context, sel string) string {
	t.Helper()
	s, err := chromedp.Run(ctx, chromedp.Text(sel))
	if err != nil {
		t.Fatalf("text of %s: %v", sel, err)
	}
	return s
}

// seedDemo fills the queue with a plausible day of traffic, through the
// API: scheduled messages over the next hour and week, deliveries (for
// lateness), dead letters with their errors, a push topic, a Kafka
// delivery topic and a paused topic (what the screenshots show).
func seedDemo(t *testing.T, b *bundle) {
	t.Helper()
	ctx := context.Background()
	batch := func(topic string, n int, due func(i int) time.Duration) {
		reqs := make([]domain.SendRequest, n)
		for i := range reqs {
			reqs[i] = domain.NewSendRequest([]byte(fmt.Sprintf(`{"n":%d}`, i)), domain.After(due(i)))
		}
		if _, err := b.api.SendBatch(ctx, topic, reqs); err != nil {
			t.Fatal(err)
		}
	}
	// Order closes follow checkouts: a wave over the next hour.
	batch("orders.close", 240, func(i int) time.Duration {
		m := 1 + 58*float64(i)/240
		return time.Duration(m*float64(time.Minute)) + time.Duration(20*math.Sin(float64(i)))*time.Second
	})
	// Reminders peak every morning for a week.
	batch("reminders.email", 420, func(i int) time.Duration {
		day := i % 7
		return time.Duration(day)*24*time.Hour + 2*time.Hour + time.Duration((i*37)%300)*time.Minute
	})
	batch("billing.retry", 30, func(i int) time.Duration { return time.Duration(i+1) * 5 * time.Hour })
	// Deliveries: webhooks due now and a little later, leased and acked.
	batch("webhooks.push", 150, func(i int) time.Duration { return time.Duration(i%5) * 40 * time.Millisecond })
	for got := 0; got < 150; {
		ms, err := b.api.Lease(ctx, "webhooks.push", domain.LeaseRequest{Max: 50, Wait: 2 * time.Second})
		if err != nil || len(ms) == 0 {
			t.Fatalf("lease webhooks: %d %v", len(ms), err)
		}
		for _, m := range ms {
			if err := b.api.Ack(ctx, "webhooks.push", m.ID, m.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		got += len(ms)
	}
	// A topic pushed to a webhook and one delivered into Kafka (no
	// pusher or broker runs here: their messages wait, and the pages show
	// the targets), and a paused topic.
	if _, err := b.api.SetTopicSettings(ctx, "partner.webhooks", domain.TopicSettings{
		Push: &domain.PushSettings{URL: "https://partner.example/hooks/delayq"}}); err != nil {
		t.Fatal(err)
	}
	batch("partner.webhooks", 60, func(i int) time.Duration { return time.Duration(i+1) * 3 * time.Minute })
	batch("partner.webhooks", 15, func(int) time.Duration { return 0 }) // ready: nobody pushes here
	if _, err := b.api.SetTopicSettings(ctx, "orders.events", domain.TopicSettings{Deliver: &domain.DeliverSettings{
		Kafka: &domain.KafkaTarget{Brokers: []string{"kafka.internal:9092"}, Topic: "orders-due"}}}); err != nil {
		t.Fatal(err)
	}
	batch("orders.events", 90, func(i int) time.Duration { return time.Duration(i+1) * 40 * time.Second })
	// On the engine: this test server's API has no admin routes.
	if _, err := b.eng.PauseTopic(ctx, "reminders.email", true); err != nil {
		t.Fatal(err)
	}
	for i, reason := range []string{
		"POST https://partner.example/hooks: 503 Service Unavailable",
		"card declined (insufficient funds)",
		"timeout after 30s calling payments",
	} {
		b.kill(t, "billing.retry", fmt.Sprintf("invoice-%d", 1001+i), reason)
	}
}

// TestBrowser drives the dashboard in headless Chromium: log in, see a
// message sent through the API in Upcoming, look it up, cancel it, replay
// a dead letter, and check that a stranger and a cross-site page can see
// and change nothing.
func TestBrowser(t *testing.T) {
	ctx := newChromium(t)
	b := setup(t, setupOpts{})
	seedDemo(t, b)
	b.kill(t, "orders.close", "order-7", "order service: 500 Internal Server Error")
	base := b.ts.URL

	// Log in.
	do(t, ctx, "open dashboard", chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible("#token"))
	screenshot(t, ctx, "login")
	do(t, ctx, "log in", chromedp.SendKeys("#token", opsSecret), chromedp.Click("#login"), chromedp.WaitVisible("#topics"))
	if s := text(t, ctx, "#topics"); !strings.Contains(s, "orders.close") || !strings.Contains(s, "reminders.email paused") ||
		!strings.Contains(s, "kafka → orders-due") || !strings.Contains(s, "push") {
		t.Fatalf("topics table (want every topic, reminders.email paused, a kafka and a push target): %s", s)
	}
	screenshot(t, ctx, "topics")

	// A message sent through the API shows in Upcoming.
	if n := b.dueNextHour(t, ctx, "checkout.expire"); n != 0 {
		t.Fatalf("due in the next hour before the send: %d", n)
	}
	b.send(t, "checkout.expire", "order-42", 10*time.Minute)
	if n := b.dueNextHour(t, ctx, "checkout.expire"); n != 1 {
		t.Fatalf("due in the next hour after the send: %d, want 1", n)
	}
	do(t, ctx, "upcoming, all topics", chromedp.Navigate(base+"/ui/upcoming"), chromedp.WaitVisible("#chart-hours"))
	screenshot(t, ctx, "upcoming")

	// Look it up, then cancel it.
	do(t, ctx, "look up",
		chromedp.Navigate(base+"/ui/message"),
		chromedp.SendKeys("#lookup-topic", "checkout.expire"),
		chromedp.SendKeys("#lookup-id", "order-42"),
		chromedp.Click("#lookup-go"),
		chromedp.WaitVisible("#state"))
	if s := text(t, ctx, "#state"); s != "scheduled" {
		t.Fatalf("state %q", s)
	}
	if s := text(t, ctx, "#timeline"); !strings.Contains(s, "sent") || !strings.Contains(s, "created") {
		t.Errorf("timeline: %s", s)
	}
	screenshot(t, ctx, "message")
	do(t, ctx, "cancel", chromedp.Click("#cancel"), chromedp.WaitVisible("#not-found"))
	if s := text(t, ctx, ".flash"); s != "Message cancelled." {
		t.Errorf("flash %q", s)
	}
	if s := b.state(t, "checkout.expire", "order-42"); s != "absent" {
		t.Fatalf("order-42 is %s after cancel in the browser", s)
	}

	// Replay a dead letter.
	do(t, ctx, "dead letters", chromedp.Navigate(base+"/ui/dead?topic=billing.retry"), chromedp.WaitVisible("#dead"))
	screenshot(t, ctx, "dead")
	do(t, ctx, "replay", chromedp.Click("#dead tbody tr:first-child button.replay"), chromedp.WaitVisible(".flash"))
	if s := b.state(t, "billing.retry", "invoice-1001"); s != domain.StateReady {
		t.Fatalf("invoice-1001 is %s after replay in the browser", s)
	}

	do(t, ctx, "timeliness", chromedp.Navigate(base+"/ui/timeliness"), chromedp.WaitVisible("#chart-lateness"))
	if s := text(t, ctx, "#early"); !strings.Contains(s, "Early deliveries: 0") {
		t.Errorf("early: %q", s)
	}
	screenshot(t, ctx, "timeliness")
	do(t, ctx, "topic", chromedp.Navigate(base+"/ui/topics/orders.close"), chromedp.WaitVisible("#settings"))
	screenshot(t, ctx, "topic")

	// A cross-site page cannot act with the logged-in browser.
	b.send(t, "orders.close", "order-43", time.Hour)
	evil := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><form method="post" action="%s/ui/message/cancel"><input name="topic" value="orders.close"><input name="id" value="order-43"><input name="csrf" value="guess"><button id="go">Win a prize</button></form>`, base)
	}))
	if ln, err := net.Listen("tcp", "127.0.0.2:0"); err == nil { // another site, where the OS allows it
		evil.Listener.Close()
		evil.Listener = ln
	}
	evil.Start()
	defer evil.Close()
	evilURL := evil.URL
	do(t, ctx, "cross-site post", chromedp.Navigate(evilURL), chromedp.Click("#go"), chromedp.WaitVisible(".errorpage"))
	if s := text(t, ctx, ".errorpage"); !strings.Contains(s, "cross-site request refused") {
		t.Errorf("cross-site post answered: %s", s)
	}
	if s := b.state(t, "orders.close", "order-43"); s != domain.StateScheduled {
		t.Fatalf("order-43 is %s after a cross-site post", s)
	}

	// A stranger (a fresh browser context, no cookies) sees nothing and
	// can change nothing, even with a same-origin script.
	sctx, cancel := chromedp.NewContext(ctx, chromedp.WithNewBrowserContext())
	defer cancel()
	do(t, sctx, "stranger", chromedp.Navigate(base+"/ui/dead?topic=billing.retry"), chromedp.WaitVisible("#token"))
	html, err := chromedp.Run(sctx, chromedp.OuterHTML("html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"billing.retry", "invoice-100", "card declined", "orders.close"} {
		if strings.Contains(html, secret) {
			t.Errorf("a stranger sees %q", secret)
		}
	}
	// The page's CSP (connect-src 'none') already stops fetch(); a form
	// the stranger builds and submits must be refused by the server.
	for _, c := range []struct {
		csrf string
		want string
	}{
		{"'forged'", "403"},
		{"document.querySelector('input[name=csrf]').value", "401"}, // a valid pre-login token: still no session
	} {
		js := `(() => {
			const f = document.createElement('form');
			f.method = 'post'; f.action = '/ui/message/cancel';
			for (const [k, v] of [['topic', 'orders.close'], ['id', 'order-43'], ['csrf', ` + c.csrf + `]]) {
				const i = document.createElement('input'); i.name = k; i.value = v; f.appendChild(i);
			}
			document.body.appendChild(f); f.submit(); return true;
		})()`
		do(t, sctx, "stranger's post", chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible("#token"),
			chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
				_, err := chromedp.Evaluate[bool](js)(ctx, tg)
				return err
			}),
			chromedp.WaitVisible(".errorpage"))
		if s := text(t, sctx, ".errorpage h1"); !strings.HasPrefix(s, c.want) {
			t.Errorf("stranger's POST with csrf %s: %q, want %s", c.csrf, s, c.want)
		}
	}
	if s := b.state(t, "orders.close", "order-43"); s != domain.StateScheduled {
		t.Fatalf("order-43 is %s after a stranger's post", s)
	}
}

// dueNextHour reads the Upcoming page's next-hour count in the browser.
func (b *bundle) dueNextHour(t *testing.T, ctx context.Context, topic string) int {
	t.Helper()
	do(t, ctx, "upcoming", chromedp.Navigate(b.ts.URL+"/ui/upcoming?topic="+topic), chromedp.WaitVisible("#chart-minutes"))
	var n int
	if _, err := fmt.Sscan(text(t, ctx, "#next-hour"), &n); err != nil {
		t.Fatal(err)
	}
	return n
}
