package dashboard

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/clock"
)

func TestLatHistQuantiles(t *testing.T) {
	var h latHist
	for range 98 {
		h.observe(700 * time.Microsecond) // bucket (0.5ms, 1ms]
	}
	h.observe(40 * time.Millisecond) // (25ms, 50ms]
	h.observe(90 * time.Second)      // overflow
	tests := []struct {
		q      float64
		lo, hi time.Duration
	}{
		{0.5, 500 * time.Microsecond, time.Millisecond},
		{0.98, 500 * time.Microsecond, time.Millisecond},
		{0.99, 25 * time.Millisecond, 50 * time.Millisecond},
		{1, time.Minute, 90 * time.Second},
	}
	for _, tt := range tests {
		if got := h.quantile(tt.q); got < tt.lo || got > tt.hi {
			t.Errorf("q%.2f = %v, want in [%v, %v]", tt.q, got, tt.lo, tt.hi)
		}
	}
	if h.max != 90*time.Second || h.n != 100 {
		t.Errorf("max %v n %d", h.max, h.n)
	}
	var empty latHist
	if empty.quantile(0.5) != 0 || empty.mean() != 0 {
		t.Error("empty histogram must answer 0")
	}
}

func TestRecorderWindow(t *testing.T) {
	sim := clock.NewSim(time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC))
	r := NewRecorder(RecorderConfig{Now: sim.Now, Window: 5 * time.Minute})
	r.add("a", CountSent, 10)
	r.delivered("a", 3*time.Millisecond)
	sim.Advance(2 * time.Minute)
	r.add("a", CountSent, 5)
	r.add("a", CountNacked, 1)
	r.throttled("a", 4*time.Second)
	r.throttled("a", 2*time.Second)
	s, ok := r.Summary("a", 5*time.Minute)
	if !ok || s.Counts[CountSent] != 15 || s.Counts[CountNacked] != 1 || s.Deliveries() != 1 {
		t.Fatalf("summary %+v", s)
	}
	if s.Throttled != 2 || s.MeanHeld() != 3*time.Second {
		t.Errorf("throttled %d, mean hold %v", s.Throttled, s.MeanHeld())
	}
	if len(s.PerMinute) != 5 || s.PerMinute[2][CountSent] != 10 || s.PerMinute[4][CountSent] != 5 {
		t.Errorf("per minute %v", s.PerMinute)
	}
	if one, _ := r.Summary("a", time.Minute); one.Counts[CountSent] != 5 {
		t.Errorf("last minute sent %d, want 5", one.Counts[CountSent])
	}
	// Rates divide by the time since start when that is shorter than the span.
	if got := s.Rate(CountSent); got != 7.5 {
		t.Errorf("rate %v per minute, want 15 over the 2 minutes since start", got)
	}
	young := NewRecorder(RecorderConfig{Now: sim.Now})
	young.add("a", CountSent, 3)
	if s, _ := young.Summary("a", 5*time.Minute); s.Rate(CountSent) != 3 {
		t.Errorf("a new recorder's rate is %v per minute, want 3 (at least a minute covered)", s.Rate(CountSent))
	}
	sim.Advance(5 * time.Minute) // everything slides out of the window
	if s, _ := r.Summary("a", 5*time.Minute); s.Counts[CountSent] != 0 || s.Deliveries() != 0 {
		t.Errorf("old minutes still counted: %+v", s.Counts)
	}
}

func TestRecorderBounds(t *testing.T) {
	r := NewRecorder(RecorderConfig{MaxTopics: 2, MaxMessages: 16, EventsPerMessage: 3})
	r.add("a", CountSent, 1)
	r.add("b", CountSent, 1)
	r.add("c", CountSent, 1)
	if got := r.Topics(); len(got) != 2 || r.DroppedTopics() != 1 {
		t.Errorf("topics %v dropped %d", got, r.DroppedTopics())
	}
	for i := range 5 {
		r.msgs.add("a", "m", Event{What: string(rune('0' + i))}, time.Time{})
	}
	ev := r.MessageEvents("a", "m")
	if len(ev) != 3 || ev[0].What != "2" || ev[2].What != "4" {
		t.Errorf("events %v, want the last 3", ev)
	}
	for i := range 1000 {
		r.msgs.add("a", string(rune(0x4e00+i)), Event{What: "x"}, time.Time{})
	}
	n := 0
	for i := range r.msgs.shards {
		n += len(r.msgs.shards[i].ring)
	}
	if n > 16*historyEvents {
		t.Errorf("%d message events kept, the bound is %d", n, 16*historyEvents)
	}
	if ev := r.MessageEvents("a", "m"); ev != nil {
		t.Errorf("the oldest message's events outlived 1000 newer ones: %v", ev)
	}
	if ev := r.MessageEvents("a", string(rune(0x4e00+999))); len(ev) != 1 {
		t.Errorf("the newest message's events: %v, want its one", ev)
	}
}

// TestMessageLogOverwritesOldest: a full shard overwrites its oldest
// event, a message's history answers its own events in order, and the
// fallback Upcoming count of each message is kept apart from the events.
func TestMessageLogOverwritesOldest(t *testing.T) {
	l := newMessageLog(16, 4, true) // 4 events and one count per shard
	s := &l.shards[0]
	var ids []string // ids of shard 0, in order
	for i := 0; len(ids) < 3; i++ {
		id := string(rune(0x4e00 + i))
		if sh, _ := l.shard(msgKey{"a", id}); sh == s {
			ids = append(ids, id)
		}
	}
	s.maxCounted = 2
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.add("a", ids[0], Event{What: "sent"}, due)
	l.add("a", ids[1], Event{What: "sent"}, time.Time{})
	if prev := l.add("a", ids[0], Event{What: "leased"}, time.Time{}); !prev.Equal(due) {
		t.Errorf("previous count %v, want %v", prev, due)
	}
	if prev := l.add("a", ids[2], Event{What: "sent"}, time.Time{}); !prev.IsZero() {
		t.Errorf("a new message's previous count is %v, want zero", prev)
	}
	if len(s.counted) != 0 {
		t.Errorf("%d counts kept, none counted any more", len(s.counted))
	}
	l.add("a", ids[2], Event{What: "leased"}, time.Time{}) // the ring is full: ids[0]'s send goes
	if ev := l.events("a", ids[0]); len(ev) != 1 || ev[0].What != "leased" {
		t.Errorf("the oldest event was kept or the rest lost: %v", ev)
	}
	if ev := l.events("a", ids[2]); len(ev) != 2 || ev[0].What != "sent" || ev[1].What != "leased" {
		t.Errorf("the newest message's events: %v, want sent then leased", ev)
	}
	for range 4 {
		l.add("a", ids[1], Event{What: "x"}, time.Time{})
	}
	if ev := l.events("a", ids[2]); ev != nil {
		t.Errorf("events outlived a full ring of newer ones: %v", ev)
	}
	for _, id := range ids { // three counted, room for two: one is dropped
		l.add("a", id, Event{What: "rescheduled"}, due)
	}
	if len(s.counted) != 2 {
		t.Errorf("%d counts kept, the bound is 2", len(s.counted))
	}
	if prev := l.add("a", ids[2], Event{What: "leased"}, time.Time{}); !prev.Equal(due) {
		t.Errorf("the newest count was dropped: previous %v, want %v", prev, due)
	}
}

// TestMessageLogNotCounting: a log that does not count keeps no due
// times and answers no previous count.
func TestMessageLogNotCounting(t *testing.T) {
	l := newMessageLog(16, 4, false)
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.add("a", "m", Event{What: "sent"}, due)
	if prev := l.add("a", "m", Event{What: "leased"}, time.Time{}); !prev.IsZero() {
		t.Errorf("previous count %v, want none", prev)
	}
	if ev := l.events("a", "m"); len(ev) != 2 {
		t.Errorf("events %v, want 2", ev)
	}
}

func TestDueBuckets(t *testing.T) {
	now := time.Date(2030, 1, 1, 12, 0, 30, 0, time.UTC)
	var b dueBuckets
	b.add(now, now.Add(90*time.Second), 1, 7*24*time.Hour)
	b.add(now, now.Add(90*time.Second), 1, 7*24*time.Hour)
	b.add(now, now.Add(-time.Second), 1, 7*24*time.Hour)   // past: ignored
	b.add(now, now.Add(8*24*time.Hour), 1, 7*24*time.Hour) // beyond the horizon
	b.add(now, now.Add(48*time.Hour), 120, 7*24*time.Hour) // hour granularity
	from := now.Truncate(time.Minute)
	mins := b.counts(from, time.Minute, 60)
	if mins[2] != 2 { // 12:02:00
		t.Errorf("minute counts %v", mins)
	}
	hours := b.counts(now.Truncate(time.Hour), time.Hour, 72)
	if hours[0] != 2 || hours[48] != 120 {
		t.Errorf("hour counts %v", hours)
	}
	// An hour bucket seen per minute is spread evenly.
	spread := b.counts(now.Add(48*time.Hour).Truncate(time.Hour), time.Minute, 60)
	for i, c := range spread {
		if c != 2 {
			t.Fatalf("spread[%d] = %d, want 2", i, c)
		}
	}
	b.remove(now.Add(90 * time.Second))
	if got := b.counts(from, time.Minute, 60)[2]; got != 1 {
		t.Errorf("after remove: %d", got)
	}
}

// TestSessionSigner: a cookie verifies under any configured key until it
// expires, and not once tampered with, signed with another key, revoked,
// or when its token was removed or given a new secret.
func TestSessionSigner(t *testing.T) {
	sim := clock.NewSim(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC))
	tok := func(spec string) *auth.Token {
		tk, err := auth.ParseToken(spec)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}
	set := func(toks ...*auth.Token) *auth.Set {
		s, err := auth.NewSet(toks)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	ops, viewer := tok("ops.eu:ops-secret-0123456789abcdef:admin:*"), tok("viewer:viewer-secret-0123456789ab:consume:*")
	tokens := set(ops, viewer)
	oldKey, newKey := []byte("old-key-0123456789abcdef0123456789"), []byte("new-key-0123456789abcdef0123456789")
	signer := func(tokens *auth.Set, keys ...[]byte) *sessionSigner {
		return &sessionSigner{keys: keys, tokens: tokens, now: sim.Now, ttl: time.Hour, revoked: newRevokedSet(3)}
	}
	a := signer(tokens, oldKey)
	value, expires := a.issue(ops)
	if len(value) > sessionCookieMax || strings.Contains(value, "ops-secret") {
		t.Fatalf("cookie %q: too long or holds the secret", value)
	}
	if !expires.Equal(sim.Now().Add(time.Hour)) {
		t.Errorf("expires %v, want an hour from now", expires)
	}
	// Another server with the same key, and one that rotated to newKey.
	for name, s := range map[string]*sessionSigner{"same key": signer(tokens, oldKey), "rotated": signer(tokens, newKey, oldKey)} {
		ss := s.verify(value)
		if ss == nil || ss.token.Name != "ops.eu" || !ss.expires.Equal(expires) {
			t.Errorf("%s: verify = %+v, want ops.eu's session", name, ss)
		}
	}
	if rotated, _ := signer(tokens, newKey, oldKey).issue(viewer); a.verify(rotated) != nil || signer(tokens, newKey).verify(rotated) == nil {
		t.Error("a cookie signed with the new key must verify only where the new key is configured")
	}
	if signer(tokens, newKey).verify(value) != nil {
		t.Error("a server with another key accepted the cookie")
	}
	// Tampering: each field changed, and the name swapped for another token's.
	parts := strings.SplitN(value, ".", 5)
	for i, bad := range []string{"v2", "9999999999", "AAAAAAAAAAAAAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "viewer"} {
		p := append([]string(nil), parts...)
		p[i] = bad
		if a.verify(strings.Join(p, ".")) != nil {
			t.Errorf("field %d changed to %q: still verifies", i, bad)
		}
	}
	for _, bad := range []string{"", "v1", "v1....", value + "x", value[:len(value)-1]} {
		if a.verify(bad) != nil {
			t.Errorf("%q verifies", bad)
		}
	}
	// The token removed, or its secret changed: its sessions end.
	if signer(set(viewer), oldKey).verify(value) != nil {
		t.Error("a removed token's session still verifies")
	}
	if signer(set(tok("ops.eu:another-secret-0123456789abc:admin:*")), oldKey).verify(value) != nil {
		t.Error("a session survived its token's new secret")
	}
	// Expiry.
	sim.Advance(time.Hour - time.Second)
	if a.verify(value) == nil {
		t.Fatal("expired early")
	}
	sim.Advance(time.Second)
	if a.verify(value) != nil {
		t.Error("an expired session verifies")
	}
	// Revocation, bounded: the oldest revoked is forgotten first.
	var live []*session
	for range 4 {
		v, _ := a.issue(viewer)
		ss := a.verify(v)
		if ss == nil {
			t.Fatal("fresh session refused")
		}
		a.revoke(ss)
		if a.verify(v) != nil {
			t.Error("a revoked session verifies")
		}
		live = append(live, ss)
	}
	if n := a.revoked.len(); n != 3 {
		t.Errorf("revoked holds %d, want its bound 3", n)
	}
	if a.revoked.has(live[0].nonce, sim.Now()) || !a.revoked.has(live[3].nonce, sim.Now()) {
		t.Error("the bound must forget the oldest revocation first")
	}
	sim.Advance(time.Hour)
	a.revoke(&session{nonce: "n", expires: sim.Now().Add(time.Hour)})
	if n := a.revoked.len(); n != 1 {
		t.Errorf("expired revocations kept: %d entries, want 1", n)
	}
}

func TestCSRFToken(t *testing.T) {
	key := []byte("k")
	a := csrfToken(key, "session", "id-1")
	if !csrfOK(a, a) || csrfOK(a, csrfToken(key, "session", "id-2")) || csrfOK(a, csrfToken(key, "visitor", "id-1")) ||
		csrfOK(a, csrfToken([]byte("other"), "session", "id-1")) || csrfOK("", "") {
		t.Error("CSRF tokens must be bound to key, kind and id")
	}
	if !csrfValid([][]byte{[]byte("new"), key}, "session", "id-1", a) || csrfValid([][]byte{[]byte("new")}, "session", "id-1", a) {
		t.Error("csrfValid must accept a token of any configured key, and only those")
	}
}

func TestSameOrigin(t *testing.T) {
	tests := []struct {
		hdr  map[string]string
		want bool
	}{
		{map[string]string{}, true},
		{map[string]string{"Origin": "http://dq.example:7070"}, true},
		{map[string]string{"Origin": "https://dq.example:7070"}, true}, // TLS-terminating proxy
		{map[string]string{"Origin": "http://evil.example"}, false},
		{map[string]string{"Origin": "http://dq.example:7071"}, false},
		{map[string]string{"Origin": "null"}, false},
		{map[string]string{"Referer": "http://dq.example:7070/ui/dead"}, true},
		{map[string]string{"Referer": "http://evil.example/x"}, false},
		{map[string]string{"Sec-Fetch-Site": "same-origin", "Origin": "http://dq.example:7070"}, true},
		{map[string]string{"Sec-Fetch-Site": "same-site"}, false},
		{map[string]string{"Sec-Fetch-Site": "cross-site"}, false},
	}
	for _, tt := range tests {
		r := httptest.NewRequest("POST", "http://dq.example:7070/ui/login", nil)
		for k, v := range tt.hdr {
			r.Header.Set(k, v)
		}
		if got := sameOrigin(r); got != tt.want {
			t.Errorf("%v: %v, want %v", tt.hdr, got, tt.want)
		}
	}
}

func TestStatusOf(t *testing.T) {
	if statusOf(errCSRF) != http.StatusForbidden || statusOf(errLoginRequired) != http.StatusUnauthorized || statusOf(context.Canceled) != http.StatusInternalServerError {
		t.Error("statusOf")
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		top  int64
		want []int64
	}{
		{0, []int64{0, 1}},
		{1, []int64{0, 1}},
		{3, []int64{0, 1, 2, 3}},
		{7, []int64{0, 2, 4, 6, 8}},
		{100, []int64{0, 25, 50, 75, 100}},
		{1234, []int64{0, 500, 1000, 1500}},
	}
	for _, tt := range tests {
		got := niceTicks(tt.top)
		if len(got) != len(tt.want) || got[len(got)-1] != tt.want[len(tt.want)-1] {
			t.Errorf("niceTicks(%d) = %v, want %v", tt.top, got, tt.want)
		}
	}
}

func TestFormat(t *testing.T) {
	for d, want := range map[time.Duration]string{30 * time.Second: "30s", 10 * time.Minute: "10m", time.Hour: "1h", 90 * time.Minute: "1h30m", 1500 * time.Millisecond: "1.5s", 0: ""} {
		if got := fmtDur(d); got != want {
			t.Errorf("fmtDur(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0s", 59 * time.Second: "59s", 61 * time.Minute: "1h 1m", 50 * time.Hour: "2d 2h", 3 * time.Hour: "3h"} {
		if got := fmtAge(d); got != want {
			t.Errorf("fmtAge(%v) = %q, want %q", d, got, want)
		}
	}
	for d, want := range map[time.Duration]string{0: "0", 740 * time.Microsecond: "740µs", 3200 * time.Microsecond: "3.2ms", 1250 * time.Millisecond: "1.25s"} {
		if got := fmtLat(d); got != want {
			t.Errorf("fmtLat(%v) = %q, want %q", d, got, want)
		}
	}
}

// TestMessageLogHashCollision: two messages whose hashes collide never
// share a history or a count.
func TestMessageLogHashCollision(t *testing.T) {
	l := newMessageLog(16, 4, true)
	a := msgKey{"t", "a"}
	s, h := l.shard(a)
	due := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	// Another message with a's hash, as if the 64-bit hashes collided.
	s.ring = append(s.ring, loggedEvent{hash: h, key: msgKey{"t", "b"}, ev: Event{What: "sent"}})
	s.counted[h] = countedMsg{key: msgKey{"t", "b"}, due: due}
	if ev := l.events("t", "a"); ev != nil {
		t.Errorf("a's history holds b's events: %v", ev)
	}
	if prev := l.add("t", "a", Event{What: "sent"}, time.Time{}); !prev.IsZero() {
		t.Errorf("a's previous count is b's: %v", prev)
	}
	if ev := l.events("t", "a"); len(ev) != 1 || ev[0].What != "sent" {
		t.Errorf("a's history: %v, want its own send", ev)
	}
}
