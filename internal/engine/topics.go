package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/url"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

func builtinSettings() domain.TopicSettings {
	return domain.TopicSettings{MaxAttempts: DefaultMaxAttempts, Backoff: DefaultBackoff, Lease: DefaultLease}
}

// fillSettings returns s with zero fields taken from def.
func fillSettings(s, def domain.TopicSettings) domain.TopicSettings {
	s.MaxAttempts = cmp.Or(s.MaxAttempts, def.MaxAttempts)
	s.Lease = cmp.Or(s.Lease, def.Lease)
	if s.Backoff.Initial == 0 && !s.Backoff.InitialSet {
		s.Backoff.Initial = def.Backoff.Initial
	}
	s.Backoff.Max = cmp.Or(s.Backoff.Max, def.Backoff.Max)
	s.Backoff.Multiplier = cmp.Or(s.Backoff.Multiplier, def.Backoff.Multiplier)
	if s.Backoff.Jitter == 0 && !s.Backoff.JitterSet {
		s.Backoff.Jitter = def.Backoff.Jitter
	}
	if s.RateLimit == nil {
		s.RateLimit = def.RateLimit
	}
	if s.Push == nil && s.Deliver == nil {
		s.Push = def.Push
	}
	if s.Deliver == nil && s.Push == nil {
		s.Deliver = def.Deliver
	}
	if r := s.RateLimit; r != nil && r.Burst == 0 {
		s.RateLimit = &domain.RateLimit{PerSecond: r.PerSecond, Burst: defaultBurst(r.PerSecond)}
	}
	if p := s.Push; p != nil {
		c := *p
		c.Timeout = cmp.Or(c.Timeout, DefaultPushTimeout)
		c.Concurrency = cmp.Or(c.Concurrency, DefaultPushConcurrency)
		c.SecretSet = c.Secret != ""
		s.Push = &c
	}
	if d := s.Deliver; d != nil {
		c := d.Clone()
		c.Timeout = cmp.Or(c.Timeout, domain.DefaultDeliverTimeout)
		c.MaxInFlight = cmp.Or(c.MaxInFlight, domain.DefaultDeliverMaxInFlight)
		s.Deliver = c
	}
	return s
}

// Rate limit bounds: one release an hour up to a million a second.
const (
	MinRatePerSecond = 1.0 / 3600
	MaxRatePerSecond = 1e6
	MaxRateBurst     = 1_000_000
)

// defaultBurst is the burst of a rate limit that sets none: one second's
// worth, at least 1.
func defaultBurst(perSecond float64) int {
	return int(max(1, math.Ceil(min(perSecond, math.MaxInt32))))
}

// Push delivery limits and defaults (see internal/push).
const (
	DefaultPushTimeout     = 10 * time.Second
	MaxPushTimeout         = 5 * time.Minute
	DefaultPushConcurrency = 4
	MaxPushConcurrency     = 256
	maxPushSecret          = 1024
)

// validatePush checks a push target. Push URLs are configured by admins
// and the server POSTs wherever they point (see docs/features.md on
// SSRF); only http and https are allowed, and no user info, so that topic
// answers never carry credentials.
func validatePush(p *domain.PushSettings) error {
	u, err := url.Parse(p.URL)
	switch {
	case p.URL == "":
		return domain.Invalid("push.url", "is required")
	case err != nil:
		return domain.Invalid("push.url", "is not a URL: %v", err)
	case u.Scheme != "http" && u.Scheme != "https":
		return domain.Invalid("push.url", "must be an http:// or https:// URL, got scheme %q", u.Scheme)
	case u.Host == "":
		return domain.Invalid("push.url", "has no host")
	case u.User != nil:
		return domain.Invalid("push.url", "must not carry user info (use push.secret to authenticate pushes)")
	case u.Fragment != "":
		return domain.Invalid("push.url", "must not have a fragment")
	case p.Timeout < 0 || p.Timeout > MaxPushTimeout:
		return domain.Invalid("push.timeout", "must be between 1ms and %s", MaxPushTimeout)
	case p.Concurrency < 0 || p.Concurrency > MaxPushConcurrency:
		return domain.Invalid("push.concurrency", "must be between 1 and %d", MaxPushConcurrency)
	case len(p.Secret) > maxPushSecret:
		return domain.Invalid("push.secret", "is longer than %d bytes", maxPushSecret)
	}
	return nil
}

func validateSettings(s domain.TopicSettings) error {
	switch {
	case s.MaxAttempts < 0 || s.MaxAttempts > MaxMaxAttempts:
		return domain.Invalid("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	case s.Lease < 0 || s.Lease > MaxLease:
		return domain.Invalid("lease", "must be between 1ms and %s", MaxLease)
	case s.Backoff.Initial < 0:
		return domain.Invalid("backoff.initial", "must not be negative")
	case s.Backoff.Max < 0:
		return domain.Invalid("backoff.max", "must not be negative")
	case s.Backoff.Max != 0 && s.Backoff.Initial > s.Backoff.Max:
		return domain.Invalid("backoff.max", "must be at least backoff.initial")
	case s.Backoff.Multiplier != 0 && (s.Backoff.Multiplier < 1 || s.Backoff.Multiplier > 100 || math.IsNaN(s.Backoff.Multiplier)):
		return domain.Invalid("backoff.multiplier", "must be between 1 and 100")
	case s.Backoff.Jitter < 0 || s.Backoff.Jitter > 1 || math.IsNaN(s.Backoff.Jitter):
		return domain.Invalid("backoff.jitter", "must be between 0 and 1")
	}
	if r := s.RateLimit; r != nil {
		// Bounded both ways: a rate so small that the wait for a token
		// overflows a Duration made long-polls spin at 1 ms.
		if !(r.PerSecond >= MinRatePerSecond && r.PerSecond <= MaxRatePerSecond) {
			return domain.Invalid("rate_limit.per_second", "must be between %g and %g", MinRatePerSecond, MaxRatePerSecond)
		}
		if r.Burst < 0 || r.Burst > MaxRateBurst {
			return domain.Invalid("rate_limit.burst", "must be between 1 and %d", MaxRateBurst)
		}
	}
	if s.Push != nil && s.Deliver != nil {
		return domain.Invalid("deliver", "cannot be set together with push: a topic is delivered one way")
	}
	if p := s.Push; p != nil {
		return validatePush(p)
	}
	if d := s.Deliver; d != nil {
		return d.Validate()
	}
	return nil
}

// storedSettings is the settings blob kept in the store. Only what the
// user set is stored, so changing the server's defaults affects topics
// that never overrode them. The backoff's InitialSet and JitterSet are
// stored with it (blobs from before they existed lack them: zero there
// meant the default).
type storedSettings struct {
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Backoff     domain.Backoff    `json:"backoff"`
	LeaseMS     int64             `json:"lease_ms,omitempty"`
	RateLimit   *domain.RateLimit `json:"rate_limit,omitempty"`
	Push        *storedPush       `json:"push,omitempty"`
	// Deliver is stored as domain.DeliverSettings marshals (its Go field
	// names), credentials included.
	Deliver *domain.DeliverSettings `json:"deliver,omitempty"`
	// Paused stops leases (and so push and broker delivery) of the topic
	// on every server sharing the store; sends are still accepted. It is
	// kept apart from TopicSettings so that replacing the settings never
	// resumes a paused topic.
	Paused bool `json:"paused,omitempty"`
}

// ownState is what a topic set for itself, as cached per topic.
type ownState struct {
	settings domain.TopicSettings
	paused   bool
}

type storedPush struct {
	URL         string `json:"url"`
	TimeoutMS   int64  `json:"timeout_ms,omitempty"`
	Concurrency int    `json:"concurrency,omitempty"`
	Secret      string `json:"secret,omitempty"`
}

func encodeSettings(s domain.TopicSettings, paused bool) []byte {
	ss := storedSettings{MaxAttempts: s.MaxAttempts, Backoff: s.Backoff, LeaseMS: s.Lease.Milliseconds(), RateLimit: s.RateLimit, Deliver: s.Deliver, Paused: paused}
	if s.Push != nil {
		ss.Push = &storedPush{URL: s.Push.URL, TimeoutMS: s.Push.Timeout.Milliseconds(), Concurrency: s.Push.Concurrency, Secret: s.Push.Secret}
	}
	b, _ := json.Marshal(ss) // plain data: cannot fail
	return b
}

func decodeOwn(b []byte) (ownState, error) {
	var ss storedSettings
	if len(b) == 0 {
		return ownState{}, nil
	}
	if err := json.Unmarshal(b, &ss); err != nil {
		return ownState{}, fmt.Errorf("decode topic settings: %w", err)
	}
	s := domain.TopicSettings{MaxAttempts: ss.MaxAttempts, Backoff: ss.Backoff, Lease: time.Duration(ss.LeaseMS) * time.Millisecond, RateLimit: ss.RateLimit, Deliver: ss.Deliver}
	if ss.Push != nil {
		s.Push = &domain.PushSettings{URL: ss.Push.URL, Timeout: time.Duration(ss.Push.TimeoutMS) * time.Millisecond, Concurrency: ss.Push.Concurrency, Secret: ss.Push.Secret}
	}
	return ownState{settings: s, paused: ss.Paused}, nil
}

// settings returns a topic's effective settings, caching the stored blob.
func (e *Engine) settings(ctx context.Context, t *topic) (domain.TopicSettings, error) {
	o, err := e.own(ctx, t)
	if err != nil {
		return domain.TopicSettings{}, err
	}
	return fillSettings(o.settings, e.defaults), nil
}

// own returns what a topic set (settings, paused), caching the stored blob.
func (e *Engine) own(ctx context.Context, t *topic) (ownState, error) {
	t.mu.Lock()
	c := t.cached
	t.mu.Unlock()
	if c != nil {
		return *c, nil
	}
	epoch := e.settingsEpoch.Load()
	var own ownState
	rec, err := e.st.TopicGet(ctx, t.name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return ownState{}, storeErr("read settings of", "topic "+t.name, err)
	default:
		if own, err = decodeOwn(rec.Settings); err != nil {
			return ownState{}, fmt.Errorf("%w: %v", domain.ErrUnavailable, err)
		}
	}
	t.mu.Lock()
	if t.cached == nil || t.setEpoch <= epoch {
		t.cached = &own
	}
	t.mu.Unlock()
	return own, nil
}

// SetTopicSettings implements domain.Queue. A Push without a Secret keeps
// the secret stored for the topic, if any (secrets are write-only: answers
// of the HTTP API never carry them, so a read-modify-write must not erase
// them).
func (e *Engine) SetTopicSettings(ctx context.Context, name string, s domain.TopicSettings) (*domain.TopicSettings, error) {
	if err := domain.ValidateTopic(name); err != nil {
		return nil, err
	}
	if err := validateSettings(s); err != nil {
		return nil, err
	}
	if err := e.admitTopic(ctx, name); err != nil {
		return nil, err
	}
	old, err := e.ownStored(ctx, name)
	if err != nil {
		return nil, err
	}
	if s.Push != nil {
		p := *s.Push
		p.SecretSet = false
		if p.Secret == "" && old.settings.Push != nil {
			p.Secret = old.settings.Push.Secret
		}
		s.Push = &p
	}
	if s.Deliver != nil {
		d := s.Deliver.Clone()
		d.KeepSecrets(old.settings.Deliver)
		s.Deliver = d
	}
	if err := e.putOwn(ctx, name, ownState{settings: s, paused: old.paused}); err != nil {
		return nil, err
	}
	e.events.emit(Event{Kind: EventTopicSettingsChanged, Topic: name})
	eff := fillSettings(s, e.defaults)
	return &eff, nil
}

// TopicOwnSettings returns the settings a topic set itself, without the
// server's defaults and with its push secret (for PATCH to merge into;
// never answer it as is). A topic that set nothing has zero settings.
func (e *Engine) TopicOwnSettings(ctx context.Context, name string) (domain.TopicSettings, error) {
	if err := domain.ValidateTopic(name); err != nil {
		return domain.TopicSettings{}, err
	}
	o, err := e.ownStored(ctx, name)
	return o.settings, err
}

// putOwn stores what a topic sets and caches it.
func (e *Engine) putOwn(ctx context.Context, name string, o ownState) error {
	if err := e.st.TopicSettingsPut(ctx, name, encodeSettings(o.settings, o.paused)); err != nil {
		return storeErr("store settings of", "topic "+name, err)
	}
	t := e.topic(name)
	t.mu.Lock()
	t.cached = &o
	t.setEpoch = e.settingsEpoch.Add(1)
	t.mu.Unlock()
	return nil
}

// ownStored reads what a topic set (no defaults) from the store.
func (e *Engine) ownStored(ctx context.Context, name string) (ownState, error) {
	rec, err := e.st.TopicGet(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		return ownState{}, nil
	case err != nil:
		return ownState{}, storeErr("read settings of", "topic "+name, err)
	}
	own, err := decodeOwn(rec.Settings)
	if err != nil {
		return ownState{}, fmt.Errorf("%w: %v", domain.ErrUnavailable, err)
	}
	return own, nil
}

// refreshSettings replaces a topic's cached settings with what the store
// holds, so that settings changed through another engine sharing the
// store take effect here by the next safety sweep.
// epoch is settingsEpoch as it was before blob was read: a
// SetTopicSettings on this engine since then cached newer settings.
func (e *Engine) refreshSettings(t *topic, blob []byte, epoch uint64) {
	own, err := decodeOwn(blob)
	if err != nil {
		return // reported by whoever reads the topic
	}
	t.mu.Lock()
	resumed := t.cached != nil && t.cached.paused && !own.paused
	if t.setEpoch <= epoch {
		t.cached = &own
	} else {
		resumed = false
	}
	t.mu.Unlock()
	if resumed {
		t.notify() // long-polls that waited out the pause look again
	}
}

// Topic implements domain.Queue.
func (e *Engine) Topic(ctx context.Context, name string) (*domain.TopicInfo, error) {
	if err := domain.ValidateTopic(name); err != nil {
		return nil, err
	}
	rec, err := e.st.TopicGet(ctx, name)
	if err != nil {
		return nil, storeErr("get", "topic "+name, err)
	}
	return e.topicInfo(rec)
}

// Topics implements domain.Queue.
func (e *Engine) Topics(ctx context.Context) ([]domain.TopicInfo, error) {
	recs, err := e.st.TopicList(ctx)
	if err != nil {
		return nil, storeErr("list", "topics", err)
	}
	return e.topicInfos(recs)
}

// TopicSettings lists the topics whose settings were set, with their
// settings (secrets included) and nothing else: no counts, no due times.
// It is what the push and broker delivery watches read every 5 s, and it
// costs the store less than Topics where the store can list settings
// alone (store.TopicSettingsLister); otherwise it is Topics.
func (e *Engine) TopicSettings(ctx context.Context) ([]domain.TopicInfo, error) {
	l, ok := e.st.(store.TopicSettingsLister)
	if !ok {
		return e.Topics(ctx)
	}
	recs, err := l.TopicSettingsList(ctx)
	if err != nil {
		return nil, storeErr("list", "topic settings", err)
	}
	return e.topicInfos(recs)
}

// topicInfos is topicInfo of each record.
func (e *Engine) topicInfos(recs []*store.TopicRecord) ([]domain.TopicInfo, error) {
	out := make([]domain.TopicInfo, 0, len(recs))
	for _, r := range recs {
		ti, err := e.topicInfo(r)
		if err != nil {
			return nil, err
		}
		out = append(out, *ti)
	}
	return out, nil
}

func (e *Engine) topicInfo(r *store.TopicRecord) (*domain.TopicInfo, error) {
	own, err := decodeOwn(r.Settings)
	if err != nil {
		return nil, fmt.Errorf("%w: topic %s: %v", domain.ErrUnavailable, r.Name, err)
	}
	return &domain.TopicInfo{
		Name:        r.Name,
		Counts:      domain.TopicCounts{Scheduled: r.Counts.Scheduled, Ready: r.Counts.Ready, Inflight: r.Counts.Inflight, Dead: r.Counts.Dead},
		Settings:    fillSettings(own.settings, e.defaults),
		Paused:      own.paused,
		NextDue:     msTime(r.NextDue),
		OldestReady: msTime(r.OldestReady),
	}, nil
}

// DefaultMaxTopics is the topic limit `delayq serve` starts with.
const DefaultMaxTopics = 10000

// topicLimit bounds the topics sends and settings may create. Every topic
// costs store space, a row in every topic listing (the safety sweep lists
// them all every few seconds) and series in /metrics, and any produce
// token could otherwise create them without end. It knows the topic
// names: all of the store's at Open and at every safety sweep, plus those
// admitted since. Names need no store read on the hot path; a name not
// known yet at the limit is looked up in the store (another server may
// have created it) before it is refused.
//
// Several servers sharing a store each count from their own last sweep,
// so together they may exceed the limit by the topics the others created
// since (at most one sweep period's worth, 5 s). A name admitted whose
// insert then failed counts until the next sweep drops it.
type topicLimit struct {
	max int

	mu    sync.RWMutex
	gen   uint64            // incremented by begin
	names map[string]uint64 // the gen a name was admitted in; 0: listed by the store
}

func newTopicLimit(max int) *topicLimit {
	return &topicLimit{max: max, names: make(map[string]uint64)}
}

// begin starts a refresh: names admitted from now on survive it. Call it
// before listing the store's topics.
func (l *topicLimit) begin() uint64 {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	return l.gen
}

// refresh replaces the known names with the store's, keeping those
// admitted since begin returned mark (their topics may be missing from
// the listing).
func (l *topicLimit) refresh(recs []*store.TopicRecord, mark uint64) {
	if l == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	names := make(map[string]uint64, max(len(recs), len(l.names)))
	for _, r := range recs {
		names[r.Name] = 0
	}
	for n, g := range l.names {
		if g >= mark {
			names[n] = g
		}
	}
	l.names = names
}

// admit reports whether name is known, or could be added under the limit
// (it then is).
func (l *topicLimit) admit(name string) bool {
	l.mu.RLock()
	_, ok := l.names[name]
	l.mu.RUnlock()
	if ok {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.names[name]; ok || len(l.names) < l.max {
		l.names[name] = l.gen
		return true
	}
	return false
}

// add records an existing topic's name.
func (l *topicLimit) add(name string) {
	l.mu.Lock()
	l.names[name] = l.gen
	l.mu.Unlock()
}

// admitTopic lets a write to topic name go on if the topic exists or may
// be created under the topic limit, else answers a conflict naming it.
func (e *Engine) admitTopic(ctx context.Context, name string) error {
	if e.known == nil || e.known.admit(name) {
		return nil
	}
	_, err := e.st.TopicGet(ctx, name)
	switch {
	case err == nil: // made by another server since our last sweep
		e.known.add(name)
		return nil
	case errors.Is(err, store.ErrNotFound):
		return &opError{kind: domain.ErrConflict, msg: fmt.Sprintf(
			"topic limit reached: the server has its limit of %d topics (delayq serve --max-topics), so topic %s cannot be created; use an existing topic, or raise the limit", e.known.max, name)}
	}
	return storeErr("read", "topic "+name, err)
}
