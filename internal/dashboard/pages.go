package dashboard

import (
	"cmp"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// rateSpan is the span of the rates on the Topics page.
const rateSpan = 5 * time.Minute

func forbidden(topic string) error {
	return fmt.Errorf("%w: your token cannot read topic %s", domain.ErrForbidden, topic)
}

// readableTopics lists the topics the viewer may read.
func (d *Dashboard) readableTopics(r *http.Request, v *viewer) ([]domain.TopicInfo, error) {
	infos, err := d.q.Topics(r.Context())
	if err != nil {
		return nil, err
	}
	return slices.DeleteFunc(infos, func(t domain.TopicInfo) bool { return !v.CanRead(t.Name) }), nil
}

// topicParam reads and checks an optional ?topic= the viewer must be able to read.
func topicParam(r *http.Request, v *viewer) (string, error) {
	t := r.URL.Query().Get("topic")
	if t == "" {
		return "", nil
	}
	if err := domain.ValidateTopic(t); err != nil {
		return "", err
	}
	if !v.CanRead(t) {
		return "", forbidden(t)
	}
	return t, nil
}

type topicRow struct {
	domain.TopicInfo
	Sum      Summary
	Failures float64 // nacks + lease expiries per minute
}

// Delivery says how the topic's messages leave: "kafka → orders" (a
// broker target, its topic/stream/subject; no hosts or credentials),
// "push", or "" (consumers lease them).
func (r topicRow) Delivery() string { return deliveryOf(r.Settings) }

func deliveryOf(s domain.TopicSettings) string {
	switch d := s.Deliver; {
	case d != nil && d.Kafka != nil:
		return "kafka → " + d.Kafka.Topic
	case d != nil && d.RabbitMQ != nil:
		return "rabbitmq → " + cmp.Or(d.RabbitMQ.Exchange, "(default)") + " / " + d.RabbitMQ.RoutingKey
	case d != nil && d.NATS != nil:
		return "nats → " + d.NATS.Subject
	case d != nil && d.Redis != nil:
		return "redis → " + d.Redis.Stream
	case s.Push != nil:
		return "push"
	}
	return ""
}

type topicsData struct {
	Rows     []topicRow
	Total    domain.TopicCounts
	Span     time.Duration
	Started  time.Time
	Dropped  int64
	Upcoming bool
}

func (d *Dashboard) topicsPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	infos, err := d.readableTopics(r, v)
	if err != nil {
		return err
	}
	data := topicsData{Span: rateSpan, Started: d.rec.Started(), Dropped: d.rec.DroppedTopics()}
	for _, t := range infos {
		s, _ := d.rec.Summary(t.Name, rateSpan)
		data.Rows = append(data.Rows, topicRow{TopicInfo: t, Sum: s, Failures: s.Rate(CountNacked) + s.Rate(CountExpired)})
		data.Total.Scheduled += t.Counts.Scheduled
		data.Total.Ready += t.Counts.Ready
		data.Total.Inflight += t.Counts.Inflight
		data.Total.Dead += t.Counts.Dead
	}
	d.render(w, http.StatusOK, "topics", &page{Title: "Topics", Nav: "topics", V: v, Flash: flashFrom(r), Data: data})
	return nil
}

type spanSummary struct {
	Label string
	Sum   Summary
}

type topicData struct {
	Info     *domain.TopicInfo
	Spans    []spanSummary
	Counters []Counter
	Sent     template.HTML
	Deliv    template.HTML
	Failed   template.HTML
	CanPause bool // the queue can pause topics
	// CanDelete: the queue can delete topics, and this one is empty.
	CanDelete bool
}

func (d *Dashboard) topicPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	name := r.PathValue("topic")
	if err := domain.ValidateTopic(name); err != nil {
		return err
	}
	if !v.CanRead(name) {
		return forbidden(name)
	}
	info, err := d.q.Topic(r.Context(), name)
	if err != nil {
		return err
	}
	data := topicData{Info: info, CanPause: d.pauser != nil,
		CanDelete: d.deleter != nil && info.Counts.Scheduled+info.Counts.Ready+info.Counts.Inflight+info.Counts.Dead == 0,
		Counters:  []Counter{CountSent, CountDelivered, CountAcked, CountNacked, CountExpired, CountDied, CountCancelled}}
	for _, sp := range []time.Duration{time.Minute, 5 * time.Minute, d.rec.Window()} {
		s, _ := d.rec.Summary(name, sp)
		data.Spans = append(data.Spans, spanSummary{Label: "last " + fmtAge(sp), Sum: s})
	}
	full := data.Spans[len(data.Spans)-1].Sum
	data.Sent = d.activityChart(full, "Sent per minute", "", CountSent)
	data.Deliv = d.activityChart(full, "Delivered per minute", "", CountDelivered)
	data.Failed = d.activityChart(full, "Failures per minute (nacks and lease expiries)", "warn", CountNacked, CountExpired)
	d.render(w, http.StatusOK, "topic", &page{Title: name, Nav: "topics", V: v, Flash: flashFrom(r), Data: data})
	return nil
}

// activityChart plots the sum of counters per minute of s.
func (d *Dashboard) activityChart(s Summary, title, class string, cs ...Counter) template.HTML {
	now := d.cfg.Now().Truncate(time.Minute)
	n := len(s.PerMinute)
	bars := make([]bar, n)
	for i, pm := range s.PerMinute {
		var v int64
		for _, c := range cs {
			v += pm[c]
		}
		at := now.Add(-time.Duration(n-1-i) * time.Minute)
		bars[i] = bar{Label: at.UTC().Format("15:04"), Value: v, Class: class,
			Tip: fmt.Sprintf("%s UTC: %d", at.UTC().Format("15:04"), v)}
	}
	return barChart(bars, chartOpts{Title: title, Width: 360, Height: 150, LabelEvery: max(1, n/3), Empty: "nothing yet"})
}

type upcomingData struct {
	Topics     []domain.TopicInfo
	Topic      string
	Minutes    template.HTML
	Hours      template.HTML
	NextHour   int64
	NextDays   int64
	Days       int
	Ready      int64
	Fallback   bool
	Started    time.Time
	SourceNote string
	// The soonest scheduled messages, from the store's index.
	Listed  bool
	Soonest []*domain.Message
	Next    string // cursor of the chosen topic's next page
	Partial bool   // all topics: only the first maxListTopics were read
}

// upcomingDays is the span of the per-hour chart.
const upcomingDays = 7

func (d *Dashboard) upcomingPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, err := topicParam(r, v)
	if err != nil {
		return err
	}
	infos, err := d.readableTopics(r, v)
	if err != nil {
		return err
	}
	data := upcomingData{Topics: infos, Topic: topic, Days: upcomingDays, Fallback: d.fallback, Started: d.rec.Started()}
	names := []string{topic}
	if topic == "" {
		names = nil
		for _, t := range infos {
			names = append(names, t.Name)
		}
	}
	for _, t := range infos {
		if topic == "" || t.Name == topic {
			data.Ready += t.Counts.Ready
		}
	}
	now := d.cfg.Now()
	fromMin, fromHour := now.Truncate(time.Minute), now.Truncate(time.Hour)
	mins, err := d.dueCounts(r, names, fromMin, time.Minute, 60)
	if err != nil {
		return err
	}
	hours, err := d.dueCounts(r, names, fromHour, time.Hour, upcomingDays*24)
	if err != nil {
		return err
	}
	data.NextHour, data.NextDays = sum(mins), sum(hours)
	if d.browse != nil {
		cursor := r.URL.Query().Get("cursor")
		if len(cursor) > 1024 {
			return domain.Invalid("cursor", "is not one this server made")
		}
		data.Listed = true
		if data.Soonest, data.Next, data.Partial, err = soonest(r.Context(), d.browse, topic, cursor, infos); err != nil {
			return err
		}
	}
	data.Minutes = barChart(minuteBars(mins, fromMin, now), chartOpts{Title: "Messages due per minute, next hour", LabelEvery: 5, Empty: "nothing due in the next hour"})
	data.Hours = barChart(hourBars(hours, fromHour), chartOpts{Title: "Messages due per hour, next 7 days", LabelEvery: 1, Empty: "nothing due in the next 7 days"})
	d.render(w, http.StatusOK, "upcoming", &page{Title: "Upcoming", Nav: "upcoming", V: v, Data: data})
	return nil
}

// dueCounts sums the upcoming source over topics.
func (d *Dashboard) dueCounts(r *http.Request, topics []string, from time.Time, bucket time.Duration, n int) ([]int64, error) {
	out := make([]int64, n)
	for _, t := range topics {
		c, err := d.upcoming.DueCounts(r.Context(), t, from, bucket, n)
		if err != nil {
			return nil, fmt.Errorf("count due messages of %s: %w", t, err)
		}
		for i := range min(len(c), n) {
			out[i] += c[i]
		}
	}
	return out, nil
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

func minuteBars(counts []int64, from, now time.Time) []bar {
	bars := make([]bar, len(counts))
	for i, c := range counts {
		at := from.Add(time.Duration(i) * time.Minute)
		label := "+" + fmtAge(at.Sub(from))
		if i == 0 {
			label = "now"
		}
		bars[i] = bar{Label: label, Value: c, Tip: fmt.Sprintf("%s–%s UTC: %d due", at.UTC().Format("15:04"), at.Add(time.Minute).UTC().Format("15:04"), c)}
	}
	return bars
}

func hourBars(counts []int64, from time.Time) []bar {
	bars := make([]bar, len(counts))
	for i, c := range counts {
		at := from.Add(time.Duration(i) * time.Hour).UTC()
		var label string // one label per day, at midnight UTC
		if at.Hour() == 0 {
			label = at.Format("Mon 02")
		}
		bars[i] = bar{Label: label, Value: c, Tip: fmt.Sprintf("%s–%s UTC: %d due", at.Format("Mon 02 Jan 15:04"), at.Add(time.Hour).Format("15:04"), c)}
	}
	return bars
}

type latRow struct {
	Topic string
	Sum   Summary
}

type timelinessData struct {
	Rows    []latRow
	Total   Summary
	Topic   string
	Topics  []domain.TopicInfo
	Window  time.Duration
	Windows []time.Duration
	Chart   template.HTML
	Shown   *Summary
}

func (d *Dashboard) timelinessPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, err := topicParam(r, v)
	if err != nil {
		return err
	}
	infos, err := d.readableTopics(r, v)
	if err != nil {
		return err
	}
	windows := []time.Duration{time.Minute, 5 * time.Minute}
	if d.rec.Window() > 5*time.Minute {
		windows = append(windows, d.rec.Window())
	}
	win := windows[len(windows)-1]
	if s := r.URL.Query().Get("window"); s != "" {
		dw, err := time.ParseDuration(s)
		if err != nil || !slices.Contains(windows, dw) {
			return domain.Invalid("window", "must be one of the offered windows")
		}
		win = dw
	}
	data := timelinessData{Topic: topic, Topics: infos, Window: win, Windows: windows}
	data.Total, _ = d.rec.Summary("", win)
	for _, t := range infos {
		s, _ := d.rec.Summary(t.Name, win)
		data.Rows = append(data.Rows, latRow{Topic: t.Name, Sum: s})
		data.Total.Merge(&s)
		if t.Name == topic {
			data.Shown = &data.Rows[len(data.Rows)-1].Sum
		}
	}
	if data.Shown == nil {
		data.Shown = &data.Total
	}
	data.Chart = latenessChart(data.Shown)
	d.render(w, http.StatusOK, "timeliness", &page{Title: "Timeliness", Nav: "timeliness", V: v, Data: data})
	return nil
}

func latenessChart(s *Summary) template.HTML {
	bounds, counts := s.Buckets()
	bars := make([]bar, len(counts))
	for i, c := range counts {
		label := boundLabel(bounds[i])
		if bounds[i] == 0 {
			label = ">" + boundLabel(bounds[i-1])
		}
		class := ""
		if i >= len(bounds)-7 { // above 1 s
			class = "warn"
		}
		tip := fmt.Sprintf("late by at most %s: %d deliveries", label, c)
		if bounds[i] == 0 {
			tip = fmt.Sprintf("late by more than %s: %d deliveries", label[1:], c)
		}
		bars[i] = bar{Label: label, Value: c, Class: class, Tip: tip}
	}
	return barChart(bars, chartOpts{Title: "Release lateness histogram", LabelEvery: 1, Height: 240, Empty: "no deliveries in this window"})
}

// boundLabel shows a bucket bound compactly: 250µs, 2.5s, 60s.
func boundLabel(d time.Duration) string {
	if d == time.Minute {
		return "60s"
	}
	return d.String()
}

type timelineEntry struct {
	At     time.Time
	What   string
	Detail string
	Future bool
	Seen   bool // observed by the Recorder (not derived from the record)
}

type messageData struct {
	Topic, ID string
	Msg       *domain.Message
	NotFound  bool
	Timeline  []timelineEntry
	Payload   string
	Binary    bool
	Truncated bool
}

const payloadPreview = 4 << 10

func (d *Dashboard) messagePage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	q := r.URL.Query()
	data := messageData{Topic: q.Get("topic"), ID: q.Get("id")}
	p := &page{Title: "Message", Nav: "message", V: v, Flash: flashFrom(r), Data: &data}
	if data.Topic == "" && data.ID == "" {
		d.render(w, http.StatusOK, "message", p)
		return nil
	}
	if err := domain.ValidateTopic(data.Topic); err != nil {
		return err
	}
	if err := domain.ValidateID(data.ID); err != nil {
		return err
	}
	if !v.allows(messageScope, data.Topic) {
		return forbidden(data.Topic)
	}
	m, err := d.q.Get(r.Context(), data.Topic, data.ID)
	status := http.StatusOK
	switch {
	case statusOf(err) == http.StatusNotFound:
		data.NotFound, status = true, http.StatusNotFound
	case err != nil:
		return err
	default:
		data.Msg = m
		data.Payload, data.Binary, data.Truncated = preview(m.Payload)
	}
	data.Timeline = timeline(m, d.rec.MessageEvents(data.Topic, data.ID), p.now(d))
	d.render(w, status, "message", p)
	return nil
}

func (p *page) now(d *Dashboard) time.Time {
	if p.Now.IsZero() {
		p.Now = d.cfg.Now()
	}
	return p.Now
}

// preview shows a payload as text if it is UTF-8, cut to payloadPreview.
func preview(b []byte) (text string, binary, truncated bool) {
	if !isText(b) {
		return "", true, false
	}
	if len(b) > payloadPreview {
		b, truncated = b[:payloadPreview], true
		b = []byte(strings.ToValidUTF8(string(b), ""))
	}
	return string(b), false, truncated
}

func isText(b []byte) bool {
	return strings.ToValidUTF8(string(b), "\uFFFD") == string(b) && !strings.ContainsRune(string(b), 0)
}

// timeline merges the record's timestamps with what the Recorder saw.
func timeline(m *domain.Message, seen []Event, now time.Time) []timelineEntry {
	var out []timelineEntry
	if m != nil {
		out = append(out, timelineEntry{At: m.CreatedAt, What: "created"})
		due := "due"
		if m.State == domain.StateScheduled {
			due = "due (scheduled)"
		}
		out = append(out, timelineEntry{At: m.DeliverAt, What: due})
		if !m.UpdatedAt.Equal(m.CreatedAt) {
			out = append(out, timelineEntry{At: m.UpdatedAt, What: "last change", Detail: "now " + string(m.State)})
		}
		if !m.LeaseExpiresAt.IsZero() {
			out = append(out, timelineEntry{At: m.LeaseExpiresAt, What: "lease expires", Detail: fmt.Sprintf("delivery %d", m.Attempt)})
		}
	}
	for _, e := range seen {
		out = append(out, timelineEntry{At: e.At, What: e.What, Detail: e.Detail, Seen: true})
	}
	out = slices.DeleteFunc(out, func(e timelineEntry) bool { return e.At.IsZero() })
	slices.SortStableFunc(out, func(a, b timelineEntry) int { return a.At.Compare(b.At) })
	for i := range out {
		out[i].Future = out[i].At.After(now)
	}
	return out
}

type deadData struct {
	Topics   []domain.TopicInfo
	Topic    string
	Filter   string
	Messages []*domain.Message
	Scanned  int
	Next     string
	Dead     int64
}

// Dead-letter listing bounds: a page shows at most deadShow messages and
// a filtered search reads at most deadScan before offering "more".
const (
	deadShow = 100
	deadScan = 2000
)

func (d *Dashboard) deadPage(w http.ResponseWriter, r *http.Request, v *viewer) error {
	topic, err := topicParam(r, v)
	if err != nil {
		return err
	}
	infos, err := d.readableTopics(r, v)
	if err != nil {
		return err
	}
	data := deadData{Topics: infos, Topic: topic, Filter: strings.TrimSpace(r.URL.Query().Get("q"))}
	if topic == "" {
		for _, t := range infos {
			if t.Counts.Dead > 0 {
				data.Topic = t.Name
				break
			}
		}
	}
	for _, t := range infos {
		if t.Name == data.Topic {
			data.Dead = t.Counts.Dead
		}
	}
	if data.Topic != "" {
		if err := d.scanDead(r, &data); err != nil {
			return err
		}
	}
	d.render(w, http.StatusOK, "dead", &page{Title: "Dead letters", Nav: "dead", V: v, Flash: flashFrom(r), Data: &data})
	return nil
}

// scanDead reads dead letters from the cursor, keeping those that match
// the filter (in the id or the last error, case-insensitively), until a
// page is full or deadScan were read.
func (d *Dashboard) scanDead(r *http.Request, data *deadData) error {
	cursor := r.URL.Query().Get("cursor")
	needle := strings.ToLower(data.Filter)
	for {
		pg, err := d.q.DeadList(r.Context(), data.Topic, domain.DeadListRequest{Limit: deadShow, Cursor: cursor})
		if err != nil {
			return err
		}
		for _, m := range pg.Messages {
			if needle == "" || strings.Contains(strings.ToLower(m.ID), needle) || strings.Contains(strings.ToLower(m.LastError), needle) {
				data.Messages = append(data.Messages, m)
			}
		}
		data.Scanned += len(pg.Messages)
		cursor = pg.Next
		if cursor == "" || needle == "" || len(data.Messages) >= deadShow || data.Scanned >= deadScan {
			data.Next = cursor
			return nil
		}
	}
}

// deadURL is the dead-letter page of a topic.
func deadURL(topic string, extra ...string) string {
	q := url.Values{"topic": {topic}}
	for i := 0; i+1 < len(extra); i += 2 {
		q.Set(extra[i], extra[i+1])
	}
	return "/ui/dead?" + q.Encode()
}
