package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/delayq/delayq/internal/domain"
)

// queueCollector turns Queue.Topics into gauges at scrape time, so the
// numbers are the store's (kept incrementally; reading them never scans).
// Topics without messages get no per-topic gauges (they count in
// delayq_topics), so a scrape costs O(topics with messages) series.
type queueCollector struct {
	q   TopicLister
	now func() time.Time

	messages, nextDue, oldestAge, topics, up *prometheus.Desc
}

// scrapeTimeout bounds one Topics call, so a slow store cannot hang a scrape.
const scrapeTimeout = 5 * time.Second

func newQueueCollector(q TopicLister, now func() time.Time) *queueCollector {
	return &queueCollector{
		q: q, now: now,
		messages:  prometheus.NewDesc("delayq_messages", "Messages per topic and state.", []string{"topic", "state"}, nil),
		nextDue:   prometheus.NewDesc("delayq_next_due_timestamp_seconds", "Due time of the earliest scheduled message (absent if none).", []string{"topic"}, nil),
		oldestAge: prometheus.NewDesc("delayq_oldest_ready_age_seconds", "Age of the oldest ready message: consumer lag (0 if none).", []string{"topic"}, nil),
		topics:    prometheus.NewDesc("delayq_topics", "Known topics.", nil, nil),
		up:        prometheus.NewDesc("delayq_queue_up", "1 if the last scrape could read the topics, else 0.", nil, nil),
	}
}

func (c *queueCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.messages
	ch <- c.nextDue
	ch <- c.oldestAge
	ch <- c.topics
	ch <- c.up
}

func (c *queueCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	infos, err := c.q.Topics(ctx)
	if err != nil {
		ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 0)
		return
	}
	ch <- prometheus.MustNewConstMetric(c.up, prometheus.GaugeValue, 1)
	ch <- prometheus.MustNewConstMetric(c.topics, prometheus.GaugeValue, float64(len(infos)))
	now := c.now()
	for _, t := range infos {
		if t.Counts == (domain.TopicCounts{}) {
			// No messages: nothing to watch, and any produce token can
			// make such topics by the thousand (then five series each).
			continue
		}
		for _, s := range []struct {
			state string
			n     int64
		}{{"scheduled", t.Counts.Scheduled}, {"ready", t.Counts.Ready}, {"inflight", t.Counts.Inflight}, {"dead", t.Counts.Dead}} {
			ch <- prometheus.MustNewConstMetric(c.messages, prometheus.GaugeValue, float64(s.n), t.Name, s.state)
		}
		if !t.NextDue.IsZero() {
			ch <- prometheus.MustNewConstMetric(c.nextDue, prometheus.GaugeValue, float64(t.NextDue.UnixMilli())/1e3, t.Name)
		}
		age := 0.0
		if !t.OldestReady.IsZero() && now.After(t.OldestReady) {
			age = now.Sub(t.OldestReady).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.oldestAge, prometheus.GaugeValue, age, t.Name)
	}
}
