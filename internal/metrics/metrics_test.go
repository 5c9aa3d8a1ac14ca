package metrics

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/push"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// count feeds m a counting event, as the engine would.
func count(m *Metrics, k engine.EventKind, topic string, n int) {
	m.HandleEvent(engine.Event{Kind: k, Topic: topic, N: n})
}

func delivered(m *Metrics, topic string, lateness time.Duration) {
	m.HandleEvent(engine.Event{Kind: engine.EventDelivered, Topic: topic, Lateness: lateness})
}

// scrape returns the registry in the text format.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("scrape: %d %s", rec.Code, rec.Body)
	}
	return rec.Body.String()
}

func hasAll(t *testing.T, text string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(text, l+"\n") {
			t.Errorf("missing %q", l)
		}
	}
}

func TestObserverCounters(t *testing.T) {
	m := New()
	count(m, engine.EventSent, "a", 3)
	delivered(m, "a", 3*time.Millisecond)
	delivered(m, "a", 0)
	count(m, engine.EventAcked, "a", 1)
	count(m, engine.EventNacked, "a", 1)
	count(m, engine.EventExpired, "a", 2)
	count(m, engine.EventDied, "a", 1)
	count(m, engine.EventCancelled, "b", 4)
	m.HandleEvent(engine.Event{Kind: engine.EventStoreError, Op: "send"})
	hasAll(t, scrape(t, m),
		`delayq_messages_sent_total{topic="a"} 3`,
		`delayq_messages_delivered_total{topic="a"} 2`,
		`delayq_messages_acked_total{topic="a"} 1`,
		`delayq_messages_nacked_total{topic="a"} 1`,
		`delayq_messages_lease_expired_total{topic="a"} 2`,
		`delayq_messages_dead_total{topic="a"} 1`,
		`delayq_messages_cancelled_total{topic="b"} 4`,
		`delayq_store_errors_total{op="send"} 1`,
		`delayq_messages_early_total{topic="a"} 0`,
		`delayq_release_lateness_seconds_bucket{topic="a",le="0.0001"} 1`,
		`delayq_release_lateness_seconds_bucket{topic="a",le="0.002"} 1`,
		`delayq_release_lateness_seconds_bucket{topic="a",le="0.005"} 2`,
		`delayq_release_lateness_seconds_bucket{topic="a",le="60"} 2`,
		`delayq_release_lateness_seconds_count{topic="a"} 2`,
	)
	// An early delivery (never legitimate) is counted, and observed as 0.
	delivered(m, "a", -time.Millisecond)
	hasAll(t, scrape(t, m), `delayq_messages_early_total{topic="a"} 1`)
}

func TestLatenessBuckets(t *testing.T) {
	m := New()
	delivered(m, "t", time.Second)
	text := scrape(t, m)
	if n := strings.Count(text, "delayq_release_lateness_seconds_bucket{"); n != len(LatenessBuckets)+1 {
		t.Errorf("%d buckets, want %d (+Inf)", n, len(LatenessBuckets)+1)
	}
	if LatenessBuckets[0] != 0.0001 || LatenessBuckets[len(LatenessBuckets)-1] != 60 {
		t.Errorf("buckets span %v..%v, want 0.1 ms..60 s", LatenessBuckets[0], LatenessBuckets[len(LatenessBuckets)-1])
	}
}

type fakeLister struct {
	infos []domain.TopicInfo
	err   error
}

func (f *fakeLister) Topics(context.Context) ([]domain.TopicInfo, error) { return f.infos, f.err }

func TestQueueCollector(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	f := &fakeLister{infos: []domain.TopicInfo{{
		Name:        "orders",
		Counts:      domain.TopicCounts{Scheduled: 5, Ready: 2, Inflight: 1, Dead: 3},
		NextDue:     now.Add(time.Minute),
		OldestReady: now.Add(-4 * time.Second),
	}}}
	m := New()
	if err := m.WatchQueue(f, func() time.Time { return now }); err != nil {
		t.Fatal(err)
	}
	hasAll(t, scrape(t, m),
		`delayq_messages{state="dead",topic="orders"} 3`,
		`delayq_messages{state="inflight",topic="orders"} 1`,
		`delayq_messages{state="ready",topic="orders"} 2`,
		`delayq_messages{state="scheduled",topic="orders"} 5`,
		`delayq_oldest_ready_age_seconds{topic="orders"} 4`,
		`delayq_next_due_timestamp_seconds{topic="orders"} 1.89345607e+09`,
		`delayq_topics 1`,
		`delayq_queue_up 1`,
	)
	f.err = errors.New("store down")
	text := scrape(t, m)
	hasAll(t, text, `delayq_queue_up 0`)
	if strings.Contains(text, "delayq_messages{") {
		t.Error("gauges reported although Topics failed")
	}
}

// TestQueueCollectorSkipsEmptyTopics: 20,000 empty topics (any produce
// token can make them) made every scrape 100,000 series and 5 MB. Topics
// without messages now have no per-topic gauges; they are counted in
// delayq_topics only.
func TestQueueCollectorSkipsEmptyTopics(t *testing.T) {
	const empty = 20000
	f := &fakeLister{}
	for i := range empty {
		f.infos = append(f.infos, domain.TopicInfo{Name: fmt.Sprintf("empty-%05d", i)})
	}
	f.infos = append(f.infos, domain.TopicInfo{Name: "busy", Counts: domain.TopicCounts{Dead: 1}})
	m := New()
	if err := m.WatchQueue(f, nil); err != nil {
		t.Fatal(err)
	}
	text := scrape(t, m)
	var perTopic int
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, `topic="`) && !strings.HasPrefix(l, "#") {
			perTopic++
			if !strings.Contains(l, `topic="busy"`) {
				t.Fatalf("series for an empty topic: %s", l)
			}
		}
	}
	// busy: four states and the oldest-ready age; no next due.
	if perTopic != 5 {
		t.Errorf("%d per-topic series, want 5 (those of the one topic with messages)", perTopic)
	}
	hasAll(t, text, fmt.Sprintf("delayq_topics %d", empty+1), `delayq_messages{state="ready",topic="busy"} 0`, `delayq_messages{state="dead",topic="busy"} 1`)
}

func TestHTTPLabels(t *testing.T) {
	m := New()
	m.ObserveRequest("POST", "/v1/topics/{topic}/messages", 201, time.Millisecond)
	hasAll(t, scrape(t, m), `delayq_http_request_duration_seconds_count{code="201",method="POST",route="/v1/topics/{topic}/messages"} 1`)
}

func TestPushMetrics(t *testing.T) {
	m := New()
	m.ObservePush("hooks", push.Delivered, 3*time.Millisecond)
	m.ObservePush("hooks", push.Delivered, 20*time.Millisecond)
	m.ObservePush("hooks", push.FailedStatus, time.Millisecond)
	m.ObservePush("hooks", push.FailedTimeout, 10*time.Second)
	m.ObservePush("other", push.FailedSend, time.Millisecond)
	hasAll(t, scrape(t, m),
		`delayq_push_delivered_total{topic="hooks"} 2`,
		`delayq_push_delivered_total{topic="other"} 0`,
		`delayq_push_failed_total{reason="status",topic="hooks"} 1`,
		`delayq_push_failed_total{reason="timeout",topic="hooks"} 1`,
		`delayq_push_failed_total{reason="network",topic="other"} 1`,
		`delayq_push_duration_seconds_count{topic="hooks"} 4`,
		`delayq_push_duration_seconds_bucket{topic="hooks",le="0.005"} 2`,
		`delayq_push_duration_seconds_bucket{topic="hooks",le="10"} 4`,
		`delayq_push_duration_seconds_bucket{topic="hooks",le="5"} 3`,
	)
}

func TestScheduleMetrics(t *testing.T) {
	m := New()
	m.HandleEvent(engine.Event{Kind: engine.EventScheduleFired, Schedule: "nightly", Topic: "reports", N: 1})
	m.HandleEvent(engine.Event{Kind: engine.EventScheduleFired, Schedule: "nightly", Topic: "reports", N: 1})
	m.HandleEvent(engine.Event{Kind: engine.EventScheduleMissed, Schedule: "hourly", Topic: "reports", N: 5})
	hasAll(t, scrape(t, m),
		`delayq_schedule_ticks_fired_total{schedule="nightly",topic="reports"} 2`,
		`delayq_schedule_ticks_missed_total{schedule="nightly",topic="reports"} 0`,
		`delayq_schedule_ticks_missed_total{schedule="hourly",topic="reports"} 5`,
	)
}

// TestSeriesCachedPerTopic: the per-topic series are resolved once and
// kept, so concurrent first events of a topic must land in one series,
// and a topic still shows only the series its events made (a cache that
// resolved every series of a topic at once would add a histogram and
// eight counters per topic to every scrape).
func TestSeriesCachedPerTopic(t *testing.T) {
	m := New()
	const workers, per = 8, 500
	done := make(chan struct{})
	for w := range workers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range per {
				topic := fmt.Sprint("t", (w+i)%3)
				count(m, engine.EventSent, topic, 1)
				m.ObserveRequest("POST", "POST /v1/topics/{topic}/messages", 201, time.Millisecond)
			}
		}()
	}
	for range workers {
		<-done
	}
	text := scrape(t, m)
	total := 0
	for i := range 3 {
		var n int
		line := fmt.Sprintf(`delayq_messages_sent_total{topic="t%d"} `, i)
		at := strings.Index(text, line)
		if at < 0 {
			t.Fatalf("no series %q in\n%s", line, text)
		}
		fmt.Sscan(text[at+len(line):], &n)
		total += n
	}
	if total != workers*per {
		t.Errorf("sent counted %d times, want %d", total, workers*per)
	}
	hasAll(t, text, fmt.Sprintf(`delayq_http_request_duration_seconds_count{code="201",method="POST",route="POST /v1/topics/{topic}/messages"} %d`, workers*per))
	for _, absent := range []string{`delayq_messages_nacked_total{topic="t0"}`, `delayq_release_lateness_seconds_count{topic="t0"}`, `delayq_messages_early_total{topic="t0"}`} {
		if strings.Contains(text, absent) {
			t.Errorf("%s appeared with no event of its kind", absent)
		}
	}
}
