// Package metrics is delayq's Prometheus instrumentation and the only
// package that imports Prometheus. A Metrics value
//
//   - subscribes to the engine's counting events (event counters, the
//     release-lateness histogram and the rate-limit delay histogram, per
//     topic),
//   - observes HTTP requests by method, route pattern and status code
//     (never by raw path, so cardinality is bounded by the routing table),
//   - observes push deliveries per push topic (push.Observer) and broker
//     publishes per deliver topic and target (deliver.Observer),
//   - reads Queue.Topics at scrape time for per-topic gauges,
//
// all on its own prometheus.Registry, never the global default one.
//
// # Caveat
//
// Per-topic series grow with the number of topics. The scrape-time gauges
// cover topics that hold messages only (an empty topic has none), but the
// event counters and histograms keep a series for every topic that had
// traffic since the server started. Topics are created on first use, so
// bound them (delayq serve --max-topics, default 10000), and operators
// with many short-lived topics should drop the topic label at scrape time
// (metric_relabel_configs).
package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/buildinfo"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/push"
)

// LatenessBuckets are the release-lateness histogram buckets, in seconds:
// from 0.1 ms (what an event-driven release should achieve) to 60 s.
var LatenessBuckets = []float64{0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// DurationBuckets are the buckets of the HTTP request and push duration
// histograms, in seconds.
var DurationBuckets = []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}

// Metrics holds delayq's collectors. It is safe for concurrent use.
type Metrics struct {
	reg *prometheus.Registry

	sent, delivered, acked, nacked, expired, dead, cancelled *prometheus.CounterVec
	early                                                    *prometheus.CounterVec
	lateness, throttled                                      *prometheus.HistogramVec
	storeErrors                                              *prometheus.CounterVec
	ticksFired, ticksMissed                                  *prometheus.CounterVec

	httpDuration *prometheus.HistogramVec
	httpInflight prometheus.Gauge

	pushDelivered, pushFailed *prometheus.CounterVec
	pushDuration              *prometheus.HistogramVec

	deliverPublished, deliverFailed *prometheus.CounterVec
	deliverConfirm                  *prometheus.HistogramVec
	deliverInFlight                 *prometheus.GaugeVec

	// Series resolved once each: a WithLabelValues hashes its labels and
	// takes its vector's lock on every call, three times per delivered
	// message. Series are never deleted, so a resolved one stays valid,
	// and a series still appears only once its event has happened.
	sentBy, deliveredBy, ackedBy, nackedBy, expiredBy, deadBy, cancelledBy, earlyBy *seriesCache[prometheus.Counter]
	latenessBy, throttledBy                                                         *seriesCache[prometheus.Observer]
	requestSeries                                                                   sync.Map // requestKey → prometheus.Observer
}

// seriesCache holds the series of one vector by topic.
type seriesCache[T any] struct {
	m       sync.Map // topic → T
	resolve func(topic string) T
}

func (c *seriesCache[T]) get(topic string) T {
	if v, ok := c.m.Load(topic); ok {
		return v.(T)
	}
	v, _ := c.m.LoadOrStore(topic, c.resolve(topic))
	return v.(T)
}

// requestKey is the label set of an HTTP request observation.
type requestKey struct {
	method, route string
	code          int
}

var (
	_ push.Observer    = (*Metrics)(nil)
	_ deliver.Observer = (*Metrics)(nil)
)

// New makes the collectors and registers them, with the Go runtime and
// process collectors, on a fresh registry.
func New() *Metrics {
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "delayq", Name: name, Help: help}, labels)
	}
	m := &Metrics{
		reg:         prometheus.NewRegistry(),
		sent:        counter("messages_sent_total", "Messages accepted (duplicates excluded).", "topic"),
		delivered:   counter("messages_delivered_total", "Messages handed to consumers (every lease).", "topic"),
		acked:       counter("messages_acked_total", "Messages acknowledged.", "topic"),
		nacked:      counter("messages_nacked_total", "Deliveries reported failed by consumers.", "topic"),
		expired:     counter("messages_lease_expired_total", "Leases that ran out (counted as failures).", "topic"),
		dead:        counter("messages_dead_total", "Messages moved to the dead-letter list.", "topic"),
		cancelled:   counter("messages_cancelled_total", "Messages cancelled.", "topic"),
		early:       counter("messages_early_total", "Messages delivered before their due time. Must stay 0.", "topic"),
		storeErrors: counter("store_errors_total", "Storage failures seen by the engine, by operation.", "op"),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delayq", Name: "release_lateness_seconds",
			Help:    "Time from a message's due time to its delivery.",
			Buckets: LatenessBuckets,
		}, []string{"topic"}),
		throttled: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delayq", Name: "rate_limit_delay_seconds",
			Help:    "Time a topic's rate limit held a released message back (excluded from release_lateness_seconds).",
			Buckets: LatenessBuckets,
		}, []string{"topic"}),
		ticksFired:  counter("schedule_ticks_fired_total", "Ticks of recurring schedules whose message this server sent (duplicates excluded).", "schedule", "topic"),
		ticksMissed: counter("schedule_ticks_missed_total", "Ticks of recurring schedules not sent: collapsed after downtime, skipped (missed: skip), or refused by the limits.", "schedule", "topic"),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delayq", Name: "http_request_duration_seconds",
			Help:    "HTTP request duration by method, route pattern and status code (long-polls included).",
			Buckets: DurationBuckets,
		}, []string{"method", "route", "code"}),
		httpInflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "delayq", Name: "http_requests_in_flight", Help: "HTTP requests being served.",
		}),
		pushDelivered: counter("push_delivered_total", "Pushes the receiver answered with a 2xx.", "topic"),
		pushFailed:    counter("push_failed_total", "Pushes that failed, by reason: status (a non-2xx answer), timeout, network, cancelled (shutdown).", "topic", "reason"),
		pushDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delayq", Name: "push_duration_seconds",
			Help:    "Duration of pushes (every outcome), up to the end of the answer.",
			Buckets: DurationBuckets,
		}, []string{"topic"}),
		deliverPublished: counter("deliver_published_total", "Messages a broker confirmed (broker delivery).", "topic", "target"),
		deliverFailed:    counter("deliver_failed_total", "Messages a broker refused or did not confirm in time (each is retried with the topic's backoff).", "topic", "target"),
		deliverConfirm: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "delayq", Name: "deliver_confirm_seconds",
			Help:    "Duration of broker publishes, one batch each, up to the last confirmation (or the failure).",
			Buckets: DurationBuckets,
		}, []string{"topic", "target"}),
		deliverInFlight: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "delayq", Name: "deliver_in_flight",
			Help: "Messages being published to a broker, not yet confirmed (at most the topic's deliver.max_in_flight per server).",
		}, []string{"topic", "target"}),
	}
	counters := func(v *prometheus.CounterVec) *seriesCache[prometheus.Counter] {
		return &seriesCache[prometheus.Counter]{resolve: func(t string) prometheus.Counter { return v.WithLabelValues(t) }}
	}
	observers := func(v *prometheus.HistogramVec) *seriesCache[prometheus.Observer] {
		return &seriesCache[prometheus.Observer]{resolve: func(t string) prometheus.Observer { return v.WithLabelValues(t) }}
	}
	m.sentBy, m.deliveredBy, m.ackedBy, m.nackedBy = counters(m.sent), counters(m.delivered), counters(m.acked), counters(m.nacked)
	m.expiredBy, m.deadBy, m.cancelledBy, m.earlyBy = counters(m.expired), counters(m.dead), counters(m.cancelled), counters(m.early)
	m.latenessBy, m.throttledBy = observers(m.lateness), observers(m.throttled)
	bi := buildinfo.Get()
	build := prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "delayq", Name: "build_info",
		Help:        "Always 1; the labels say which build is running.",
		ConstLabels: prometheus.Labels{"version": bi.Version, "revision": bi.Short(), "goversion": bi.Go},
	})
	build.Set(1)
	m.reg.MustRegister(
		build,
		m.sent, m.delivered, m.acked, m.nacked, m.expired, m.dead, m.cancelled,
		m.early, m.lateness, m.throttled, m.storeErrors, m.ticksFired, m.ticksMissed,
		m.httpDuration, m.httpInflight, m.pushDelivered, m.pushFailed, m.pushDuration,
		m.deliverPublished, m.deliverFailed, m.deliverConfirm, m.deliverInFlight,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// Registry returns the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, Timeout: 10 * time.Second})
}

// Subscription subscribes the event counters and histograms to the
// engine's counting events (engine.Config.Subscriptions).
func (m *Metrics) Subscription() engine.Subscription {
	return engine.Subscription{Kinds: engine.CountingEvents, Handle: m.HandleEvent}
}

// HandleEvent counts one engine event. A negative lateness (an early
// delivery, which the engine must never make) counts in
// messages_early_total.
func (m *Metrics) HandleEvent(ev engine.Event) {
	switch ev.Kind {
	case engine.EventSent:
		m.sentBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventDelivered:
		m.deliveredBy.get(ev.Topic).Inc()
		early := m.earlyBy.get(ev.Topic) // created at 0 so the series exists
		lateness := ev.Lateness
		if lateness < 0 {
			early.Inc()
			lateness = 0
		}
		m.latenessBy.get(ev.Topic).Observe(lateness.Seconds())
	case engine.EventThrottled:
		m.throttledBy.get(ev.Topic).Observe(max(ev.Held, 0).Seconds())
	case engine.EventAcked:
		m.ackedBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventNacked:
		m.nackedBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventExpired:
		m.expiredBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventDied:
		m.deadBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventCancelled:
		m.cancelledBy.get(ev.Topic).Add(float64(ev.N))
	case engine.EventStoreError:
		m.storeErrors.WithLabelValues(ev.Op).Inc()
	case engine.EventScheduleFired:
		m.ticksFired.WithLabelValues(ev.Schedule, ev.Topic).Add(float64(ev.N))
		m.ticksMissed.WithLabelValues(ev.Schedule, ev.Topic) // created at 0 so the series exists
	case engine.EventScheduleMissed:
		m.ticksMissed.WithLabelValues(ev.Schedule, ev.Topic).Add(float64(ev.N))
	}
}

// ObserveRequest records one HTTP request. method must come from a fixed
// set and route must be a routing-table pattern (or a fixed name such as
// "unmatched"), never the raw request's.
func (m *Metrics) ObserveRequest(method, route string, code int, d time.Duration) {
	k := requestKey{method: method, route: route, code: code}
	o, ok := m.requestSeries.Load(k)
	if !ok {
		o, _ = m.requestSeries.LoadOrStore(k, m.httpDuration.WithLabelValues(method, route, strconv.Itoa(code)))
	}
	o.(prometheus.Observer).Observe(d.Seconds())
}

// ObservePush records one push (push.Observer). Only topics with push
// settings push, and only admins on "*" may set those, so the topic label
// stays as bounded as the operator makes it.
func (m *Metrics) ObservePush(topic string, outcome push.Outcome, d time.Duration) {
	m.pushDuration.WithLabelValues(topic).Observe(d.Seconds())
	if outcome == push.Delivered {
		m.pushDelivered.WithLabelValues(topic).Inc()
		return
	}
	m.pushFailed.WithLabelValues(topic, string(outcome)).Inc()
	m.pushDelivered.WithLabelValues(topic) // created at 0, so a failure ratio has both series
}

// ObserveDeliver records one broker publish (deliver.Observer). Like push
// settings, deliver settings are set by admins on "*" only, so the topic
// label stays as bounded as the operator makes it.
func (m *Metrics) ObserveDeliver(topic, target string, confirmed, failed int, d time.Duration) {
	m.deliverConfirm.WithLabelValues(topic, target).Observe(d.Seconds())
	m.deliverPublished.WithLabelValues(topic, target).Add(float64(confirmed))
	m.deliverFailed.WithLabelValues(topic, target).Add(float64(failed))
}

// DeliverInFlight tracks the messages being published (deliver.Observer).
func (m *Metrics) DeliverInFlight(topic, target string, delta int) {
	m.deliverInFlight.WithLabelValues(topic, target).Add(float64(delta))
}

// RequestStarted and RequestDone track requests in flight.
func (m *Metrics) RequestStarted() { m.httpInflight.Inc() }

// RequestDone pairs with RequestStarted.
func (m *Metrics) RequestDone() { m.httpInflight.Dec() }

// TopicLister is the part of domain.Queue the scrape-time collector reads.
type TopicLister interface {
	Topics(ctx context.Context) ([]domain.TopicInfo, error)
}

// WatchQueue registers a collector that reads q.Topics at every scrape for
// the delayq_messages, delayq_next_due_timestamp_seconds and
// delayq_oldest_ready_age_seconds gauges. now defaults to time.Now.
func (m *Metrics) WatchQueue(q TopicLister, now func() time.Time) error {
	if now == nil {
		now = time.Now
	}
	return m.reg.Register(newQueueCollector(q, now))
}
