package dashboard

import (
	"cmp"
	"sort"
	"sync"
	"time"
)

// Defaults of RecorderConfig.
const (
	DefaultWindow           = 15 * time.Minute
	DefaultMaxTopics        = 1000
	DefaultMaxMessages      = 10000
	DefaultEventsPerMessage = 16
	DefaultHorizon          = 7 * 24 * time.Hour
)

// RecorderConfig configures a Recorder. The zero value of each field
// means its default, stated on the field.
type RecorderConfig struct {
	// Now reads the time. Default time.Now.
	Now func() time.Time
	// Window is how much per-minute history (rates, lateness) is kept per
	// topic, rounded up to whole minutes. Default 15 minutes; at most 1 hour.
	Window time.Duration
	// MaxTopics bounds the topics tracked; events of further topics are
	// dropped (and counted in Stats.DroppedTopics). Default 1000.
	MaxTopics int
	// MaxMessages sizes the per-message event histories: the Recorder
	// keeps the last 4 × MaxMessages message events (the oldest
	// overwritten), the sends, leases and acks of about MaxMessages
	// messages. Default 10000.
	MaxMessages int
	// EventsPerMessage bounds the history answered for one message (its
	// oldest dropped). Default 16.
	EventsPerMessage int
	// Horizon is how far ahead the fallback Upcoming source tracks due
	// times of observed sends. Default 7 days.
	Horizon time.Duration
	// NoUpcoming: the dashboard gets its Upcoming counts elsewhere
	// (Config.Upcoming), so the Recorder does not track due times and is
	// no Upcoming source. A server whose engine counts due messages
	// itself saves a lookup per message event.
	NoUpcoming bool
}

// Recorder keeps bounded, in-memory history for the dashboard:
//
//   - from the engine's counting events, per-topic counts of sends,
//     deliveries, acks, failures, deaths and cancels, and a
//     release-lateness histogram, in one slot per minute over Window;
//   - from the engine's message events, a short history of events per
//     message id and the due times of observed sends, which is the
//     fallback UpcomingSource.
//
// Subscribe it to the engine with Subscription.
//
// Memory is bounded by MaxTopics × Window minutes × a fixed slot size,
// plus 4 × MaxMessages events, plus (unless NoUpcoming) MaxTopics ×
// (1440 minute + Horizon/1h hour) due buckets and MaxMessages due times. A Recorder is safe for
// concurrent use; every method is a short critical section.
type Recorder struct {
	cfg     RecorderConfig
	minutes int // slots per topic

	mu      sync.RWMutex // guards topics
	topics  map[string]*topicRec
	dropped int64 // events of topics over MaxTopics (under mu)

	started time.Time
	msgs    *messageLog
}

// NewRecorder makes a Recorder.
func NewRecorder(cfg RecorderConfig) *Recorder {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.Window = min(cmp.Or(cfg.Window, DefaultWindow), time.Hour)
	cfg.MaxTopics = cmp.Or(cfg.MaxTopics, DefaultMaxTopics)
	cfg.MaxMessages = cmp.Or(cfg.MaxMessages, DefaultMaxMessages)
	cfg.EventsPerMessage = cmp.Or(cfg.EventsPerMessage, DefaultEventsPerMessage)
	cfg.Horizon = cmp.Or(cfg.Horizon, DefaultHorizon)
	return &Recorder{
		cfg:     cfg,
		minutes: int((cfg.Window + time.Minute - 1) / time.Minute),
		topics:  make(map[string]*topicRec),
		started: cfg.Now(),
		msgs:    newMessageLog(cfg.MaxMessages, cfg.EventsPerMessage, !cfg.NoUpcoming),
	}
}

// Started is when the Recorder was made: history before it is unknown.
func (r *Recorder) Started() time.Time { return r.started }

// Window is the span of per-minute history kept.
func (r *Recorder) Window() time.Duration { return time.Duration(r.minutes) * time.Minute }

// Counter names one kind of engine event.
type Counter int

// Counters, in display order.
const (
	CountSent Counter = iota
	CountDelivered
	CountAcked
	CountNacked
	CountExpired
	CountDied
	CountCancelled
	numCounters
)

var counterNames = [numCounters]string{"sent", "delivered", "acked", "nacked", "lease expired", "died", "cancelled"}

func (c Counter) String() string { return counterNames[c] }

// topicRec is one topic's history. Guarded by its own mutex so topics do
// not contend with each other.
type topicRec struct {
	mu    sync.Mutex
	slots []minuteSlot // ring indexed by unix minute % len
	due   dueBuckets   // fallback upcoming counts
}

// minuteSlot holds the events of one wall-clock minute.
type minuteSlot struct {
	minute    int64 // unix minute held; a slot with an old minute is stale
	counts    [numCounters]int64
	early     int64
	lat       latHist
	throttled int64         // deliveries held back by the rate limit
	held      time.Duration // their total hold time
}

// topic returns the topic's record, creating it unless MaxTopics is reached.
func (r *Recorder) topic(name string) *topicRec {
	r.mu.RLock()
	t := r.topics[name]
	r.mu.RUnlock()
	if t != nil {
		return t
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if t = r.topics[name]; t != nil {
		return t
	}
	if len(r.topics) >= r.cfg.MaxTopics {
		r.dropped++
		return nil
	}
	t = &topicRec{slots: make([]minuteSlot, r.minutes)}
	r.topics[name] = t
	return t
}

// slot returns the current minute's slot, clearing it if stale. t.mu held.
func (t *topicRec) slot(now time.Time) *minuteSlot {
	m := now.Unix() / 60
	s := &t.slots[int(m%int64(len(t.slots)))]
	if s.minute != m {
		*s = minuteSlot{minute: m}
	}
	return s
}

func (r *Recorder) add(topic string, c Counter, n int) {
	t := r.topic(topic)
	if t == nil {
		return
	}
	now := r.cfg.Now()
	t.mu.Lock()
	t.slot(now).counts[c] += int64(n)
	t.mu.Unlock()
}

// delivered records a delivery. A negative lateness (an early delivery,
// which must never happen) is counted as early and as 0 late.
func (r *Recorder) delivered(topic string, lateness time.Duration) {
	t := r.topic(topic)
	if t == nil {
		return
	}
	now := r.cfg.Now()
	t.mu.Lock()
	s := t.slot(now)
	s.counts[CountDelivered]++
	if lateness < 0 {
		s.early++
		lateness = 0
	}
	s.lat.observe(lateness)
	t.mu.Unlock()
}

// throttled records a delivery the topic's rate limit held back by d (not
// part of its lateness).
func (r *Recorder) throttled(topic string, d time.Duration) {
	t := r.topic(topic)
	if t == nil {
		return
	}
	now := r.cfg.Now()
	t.mu.Lock()
	s := t.slot(now)
	s.throttled++
	s.held += max(d, 0)
	t.mu.Unlock()
}

// Summary is a topic's history over a span of recent minutes.
type Summary struct {
	Topic string
	// Span is the time covered: the requested span, cut to the time
	// since the Recorder started (but at least a minute).
	Span   time.Duration
	Counts [numCounters]int64
	Early  int64
	// Throttled counts deliveries the rate limit held back, for Held in total.
	Throttled int64
	Held      time.Duration
	lateness  latHist
	// PerMinute holds the number of each counter in each minute, oldest first.
	PerMinute [][numCounters]int64
}

// Rate is counter c per minute over the span.
func (s Summary) Rate(c Counter) float64 {
	if s.Span <= 0 {
		return 0
	}
	return float64(s.Counts[c]) / s.Span.Minutes()
}

// Deliveries is the number of lateness observations.
func (s Summary) Deliveries() int64 { return s.lateness.n }

// Quantile estimates a lateness quantile (see latHist.quantile).
func (s Summary) Quantile(q float64) time.Duration { return s.lateness.quantile(q) }

// Max is the largest lateness seen.
func (s Summary) Max() time.Duration { return s.lateness.max }

// MeanHeld is the average time the rate limit held a throttled delivery.
func (s Summary) MeanHeld() time.Duration {
	if s.Throttled == 0 {
		return 0
	}
	return s.Held / time.Duration(s.Throttled)
}

// Mean is the average lateness.
func (s Summary) Mean() time.Duration { return s.lateness.mean() }

// Buckets returns the lateness histogram: upper bounds (the last is 0,
// meaning "above the previous") and counts.
func (s Summary) Buckets() ([]time.Duration, []int64) {
	counts := make([]int64, numLatBuckets)
	copy(counts, s.lateness.counts)
	return append(append([]time.Duration(nil), latenessBounds...), 0), counts
}

// Summary returns topic's history over the last span (whole minutes,
// including the current one, at most Window). ok is false if the topic
// has no history.
func (r *Recorder) Summary(topic string, span time.Duration) (s Summary, ok bool) {
	r.mu.RLock()
	t := r.topics[topic]
	r.mu.RUnlock()
	s = r.emptySummary(topic, span)
	if t == nil {
		return s, false
	}
	now := r.cfg.Now()
	cur := now.Unix() / 60
	n := len(s.PerMinute)
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := 0; i < n; i++ {
		m := cur - int64(n-1-i)
		sl := &t.slots[int(m%int64(len(t.slots)))]
		if sl.minute != m {
			continue
		}
		s.PerMinute[i] = sl.counts
		for c := range sl.counts {
			s.Counts[c] += sl.counts[c]
		}
		s.Early += sl.early
		s.Throttled += sl.throttled
		s.Held += sl.held
		s.lateness.merge(&sl.lat)
	}
	return s, true
}

func (r *Recorder) emptySummary(topic string, span time.Duration) Summary {
	n := int(min(max(span, time.Minute), r.Window()) / time.Minute)
	// Rates divide by the time covered: the span, or the time since start
	// when that is shorter, but at least a minute, so the first seconds
	// do not extrapolate a handful of events to a huge rate.
	covered := min(time.Duration(n)*time.Minute, max(r.cfg.Now().Sub(r.started), time.Minute))
	return Summary{Topic: topic, Span: covered, PerMinute: make([][numCounters]int64, n)}
}

// Merge adds o into s (for an "all topics" view).
func (s *Summary) Merge(o *Summary) {
	for c := range s.Counts {
		s.Counts[c] += o.Counts[c]
	}
	s.Early += o.Early
	s.Throttled += o.Throttled
	s.Held += o.Held
	s.lateness.merge(&o.lateness)
	for i := range s.PerMinute {
		if i < len(o.PerMinute) {
			for c := range s.PerMinute[i] {
				s.PerMinute[i][c] += o.PerMinute[i][c]
			}
		}
	}
}

// Topics lists the topics with history, sorted.
func (r *Recorder) Topics() []string {
	r.mu.RLock()
	out := make([]string, 0, len(r.topics))
	for name := range r.topics {
		out = append(out, name)
	}
	r.mu.RUnlock()
	sort.Strings(out)
	return out
}

// DroppedTopics counts events dropped because MaxTopics was reached.
func (r *Recorder) DroppedTopics() int64 {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.dropped
}
