package delayq_test

import (
	"errors"
	"testing"
	"time"

	"github.com/delayq/delayq"
)

// TestE2ESchedulesAndPushSettings: the Client implements Scheduler over
// the API, and push secrets round-trip as write-only.
func TestE2ESchedulesAndPushSettings(t *testing.T) {
	t.Parallel()
	x := setupE2E(t)
	ctx := t.Context()
	var sc delayq.Scheduler = x.c
	in := delayq.Schedule{Name: "report", Topic: "reports", Cron: "@every 1h", Payload: []byte{0xff, 0x00},
		Headers: map[string]string{"h": "v"}, MaxAttempts: 3, Delay: time.Minute, Missed: delayq.MissedSkip}
	got, err := sc.ScheduleSet(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if got.Name != "report" || string(got.Payload) != "\xff\x00" || got.Headers["h"] != "v" || got.MaxAttempts != 3 ||
		got.Delay != time.Minute || got.Missed != delayq.MissedSkip || got.NextTick.IsZero() || got.CreatedAt.IsZero() {
		t.Fatalf("set: %+v", got)
	}
	if p, err := sc.SchedulePause(ctx, "report", true); err != nil || !p.Paused {
		t.Fatalf("pause: %+v %v", p, err)
	}
	list, err := sc.ScheduleList(ctx)
	if err != nil || len(list) != 1 || !list[0].Paused {
		t.Fatalf("list: %+v %v", list, err)
	}
	if err := sc.ScheduleDelete(ctx, "report"); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.ScheduleGet(ctx, "report"); !errors.Is(err, delayq.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if _, err := sc.ScheduleSet(ctx, delayq.Schedule{Name: "bad", Topic: "t", Cron: "nope"}); !errors.Is(err, delayq.ErrInvalid) {
		t.Fatalf("bad cron: %v", err)
	}

	set, err := x.c.SetTopicSettings(ctx, "hooks", delayq.TopicSettings{Push: &delayq.PushSettings{URL: "https://example.test/h", Secret: "k"}})
	if err != nil {
		t.Fatal(err)
	}
	if set.Push.Secret != "" || !set.Push.SecretSet {
		t.Fatalf("settings answer: %+v", set.Push)
	}
}
