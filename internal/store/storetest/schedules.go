package storetest

import (
	"bytes"
	"fmt"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/store"
)

func (h *harness) upsert(name, spec string, lastTick, now int64) *store.Schedule {
	h.t.Helper()
	sc, err := h.s.ScheduleUpsert(h.ctx, &store.ScheduleUpsertParams{Name: name, Spec: []byte(spec), LastTick: lastTick, Now: now})
	noErr(h.t, "ScheduleUpsert "+name, err)
	return sc
}

func (h *harness) wantSchedule(what string, got *store.Schedule, want store.Schedule) {
	h.t.Helper()
	if got == nil || got.Name != want.Name || !bytes.Equal(got.Spec, want.Spec) || got.LastTick != want.LastTick ||
		got.CreatedAt != want.CreatedAt || got.UpdatedAt != want.UpdatedAt {
		h.t.Errorf("%s: got %s, want %s", what, fmtSchedule(got), fmtSchedule(&want))
	}
}

func fmtSchedule(s *store.Schedule) string {
	if s == nil {
		return "<nil>"
	}
	return fmt.Sprintf("{%s spec=%q last=%d created=%d updated=%d}", s.Name, s.Spec, s.LastTick, s.CreatedAt, s.UpdatedAt)
}

// testSchedules: upsert creates and replaces (CreatedAt kept, LastTick
// only forward), tick only raises LastTick and keeps the spec, list is
// sorted, delete and unknown names answer ErrNotFound.
func testSchedules(h *harness) {
	t, now := h.t, T0
	_, err := h.s.ScheduleGet(h.ctx, "nightly")
	wantErr(t, "ScheduleGet unknown", err, store.ErrNotFound)
	l, err := h.s.ScheduleList(h.ctx)
	noErr(t, "ScheduleList empty", err)
	if len(l) != 0 {
		t.Errorf("ScheduleList on an empty store: %d schedules", len(l))
	}

	got := h.upsert("nightly", `{"cron":"0 2 * * *"}`, now, now)
	want := store.Schedule{Name: "nightly", Spec: []byte(`{"cron":"0 2 * * *"}`), LastTick: now, CreatedAt: now, UpdatedAt: now}
	h.wantSchedule("create", got, want)
	g, err := h.s.ScheduleGet(h.ctx, "nightly")
	noErr(t, "ScheduleGet", err)
	h.wantSchedule("get after create", g, want)

	// Replace with an older LastTick: the spec changes, LastTick stays.
	got = h.upsert("nightly", `{"cron":"0 3 * * *"}`, now-5000, now+10)
	want = store.Schedule{Name: "nightly", Spec: []byte(`{"cron":"0 3 * * *"}`), LastTick: now, CreatedAt: now, UpdatedAt: now + 10}
	h.wantSchedule("replace, older LastTick", got, want)
	got = h.upsert("nightly", `{"cron":"0 3 * * *"}`, now+100, now+20)
	want.LastTick, want.UpdatedAt = now+100, now+20
	h.wantSchedule("replace, newer LastTick", got, want)

	// Tick: forward only, spec and stamps untouched.
	got, err = h.s.ScheduleTick(h.ctx, &store.ScheduleTickParams{Name: "nightly", Tick: now + 50})
	noErr(t, "ScheduleTick back", err)
	h.wantSchedule("tick backwards", got, want)
	got, err = h.s.ScheduleTick(h.ctx, &store.ScheduleTickParams{Name: "nightly", Tick: now + 3_600_000})
	noErr(t, "ScheduleTick", err)
	want.LastTick = now + 3_600_000
	h.wantSchedule("tick", got, want)
	g, _ = h.s.ScheduleGet(h.ctx, "nightly")
	h.wantSchedule("get after tick", g, want)
	_, err = h.s.ScheduleTick(h.ctx, &store.ScheduleTickParams{Name: "nope", Tick: now})
	wantErr(t, "ScheduleTick unknown", err, store.ErrNotFound)

	h.upsert("a.first", "x", 0, now)
	h.upsert("z-last", "", 0, now)
	l, err = h.s.ScheduleList(h.ctx)
	noErr(t, "ScheduleList", err)
	var names []string
	for _, s := range l {
		names = append(names, s.Name)
	}
	if fmt.Sprint(names) != "[a.first nightly z-last]" {
		t.Errorf("ScheduleList names: %v", names)
	}
	if l[1].LastTick != want.LastTick || !bytes.Equal(l[1].Spec, want.Spec) {
		t.Errorf("ScheduleList item: %s", fmtSchedule(l[1]))
	}

	noErr(t, "ScheduleDelete", h.s.ScheduleDelete(h.ctx, "nightly"))
	wantErr(t, "ScheduleDelete again", h.s.ScheduleDelete(h.ctx, "nightly"), store.ErrNotFound)
	_, err = h.s.ScheduleGet(h.ctx, "nightly")
	wantErr(t, "ScheduleGet deleted", err, store.ErrNotFound)
	// A deleted name starts afresh.
	got = h.upsert("nightly", "again", now-1, now+30)
	h.wantSchedule("re-create", got, store.Schedule{Name: "nightly", Spec: []byte("again"), LastTick: now - 1, CreatedAt: now + 30, UpdatedAt: now + 30})
	// Schedules are not topics.
	if trs, _ := h.s.TopicList(h.ctx); len(trs) != 0 {
		t.Errorf("schedules created topics: %d", len(trs))
	}
}

// testScheduleTickRace: concurrent ticks and upserts never lose the spec
// of an upsert nor move LastTick backwards.
func testScheduleTickRace(h *harness) {
	t, now := h.t, T0
	h.upsert("s", "v0", now, now)
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, err := h.s.ScheduleTick(h.ctx, &store.ScheduleTickParams{Name: "s", Tick: now + int64(i)*1000})
			if err != nil {
				t.Errorf("ScheduleTick: %v", err)
			}
		}()
		go func() {
			defer wg.Done()
			_, err := h.s.ScheduleUpsert(h.ctx, &store.ScheduleUpsertParams{Name: "s", Spec: []byte("v1"), Now: now})
			if err != nil {
				t.Errorf("ScheduleUpsert: %v", err)
			}
		}()
	}
	wg.Wait()
	g, err := h.s.ScheduleGet(h.ctx, "s")
	noErr(t, "ScheduleGet", err)
	if g.LastTick != now+19_000 || string(g.Spec) != "v1" {
		t.Errorf("after the race: %s, want last=%d spec=v1", fmtSchedule(g), now+19_000)
	}
}

// testRateLimiter runs only for stores that implement store.RateLimiter:
// a full bucket grants Burst, refills at PerSecond (by the call's Now),
// reports when the next token comes, and takes back unused tokens up to
// Burst.
func testRateLimiter(h *harness) {
	rl, ok := h.s.(store.RateLimiter)
	if !ok {
		h.t.Skip("the store does not implement store.RateLimiter")
	}
	t, now := h.t, T0
	take := func(topic string, n int, at int64) (int, time.Duration) {
		t.Helper()
		g, ra, err := rl.RateTake(h.ctx, &store.RateTakeParams{Topic: topic, N: n, PerSecond: 10, Burst: 5, Now: at})
		noErr(t, "RateTake", err)
		return g, ra
	}
	if g, ra := take("t", 3, now); g != 3 || ra != 0 {
		t.Errorf("first take 3: granted %d, retry %v; want 3, 0", g, ra)
	}
	if g, ra := take("t", 10, now); g != 2 || ra != 100*time.Millisecond {
		t.Errorf("take 10 with 2 left: granted %d, retry %v; want 2, 100ms", g, ra)
	}
	if g, ra := take("t", 1, now+50); g != 0 || ra != 50*time.Millisecond {
		t.Errorf("take after 50ms: granted %d, retry %v; want 0, 50ms", g, ra)
	}
	if g, _ := take("t", 10, now+350); g != 3 {
		t.Errorf("take after 350ms: granted %d, want 3", g)
	}
	take("t", -2, now+350) // give 2 back
	if g, _ := take("t", 10, now+350); g != 2 {
		t.Errorf("take after giving 2 back: granted %d, want 2", g)
	}
	take("t", -100, now+350) // capped at Burst
	if g, _ := take("t", 10, now+350); g != 5 {
		t.Errorf("take after giving 100 back: granted %d, want Burst 5", g)
	}
	if g, _ := take("other", 10, now+350); g != 5 {
		t.Errorf("another topic's bucket: granted %d, want 5", g)
	}
	if g, _ := take("t", 10, now+10_000); g != 5 {
		t.Errorf("after 10s idle: granted %d, want Burst 5", g)
	}
}
