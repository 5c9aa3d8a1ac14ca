package storetest

import (
	"slices"

	"github.com/delayq/delayq/internal/store"
)

func testTopics(h *harness) {
	t, now := h.t, T0
	list, err := h.s.TopicList(h.ctx)
	if err != nil || len(list) != 0 {
		t.Errorf("TopicList of empty store: %v %v", list, err)
	}
	_, err = h.s.TopicGet(h.ctx, "b")
	wantErr(t, "TopicGet unknown", err, store.ErrNotFound)

	settings := []byte("{\"max_attempts\":5}\x00\xff")
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "b", settings))
	settings[0] = 'X' // the store keeps its own copy
	tr := h.topic("b")
	if string(tr.Settings) != "{\"max_attempts\":5}\x00\xff" || tr.Counts != (store.Counts{}) || tr.Name != "b" ||
		tr.NextDue != 0 || tr.OldestReady != 0 || tr.NextLeaseExpiry != 0 {
		t.Errorf("settings-only topic: %+v", *tr)
	}
	tr.Settings[1] = 'Y'
	if got := h.topic("b"); got.Settings[1] != '"' {
		t.Errorf("TopicGet hands out the stored settings: %q", got.Settings)
	}
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "b", []byte("v2")))
	if got := h.topic("b"); string(got.Settings) != "v2" {
		t.Errorf("overwritten settings: %q", got.Settings)
	}

	h.insertNew("c:x", now, msg("1", now), msg("2", now+10))
	h.insertNew("A-z.9", now, msg("1", now))
	h.insertNew("a", now, msg("1", now+10))
	if _, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "a", ID: "1", Now: now}); err != nil {
		t.Fatal(err)
	}
	list, err = h.s.TopicList(h.ctx)
	noErr(t, "TopicList", err)
	var names []string
	for _, tr := range list {
		names = append(names, tr.Name)
		want := h.topic(tr.Name)
		if tr.Counts != want.Counts || string(tr.Settings) != string(want.Settings) || tr.NextDue != want.NextDue ||
			tr.OldestReady != want.OldestReady || tr.NextLeaseExpiry != want.NextLeaseExpiry {
			t.Errorf("TopicList entry %+v differs from TopicGet %+v", *tr, *want)
		}
	}
	if want := []string{"A-z.9", "a", "b", "c:x"}; !slices.Equal(names, want) {
		t.Errorf("TopicList names %v, want %v", names, want)
	}
	if tr := h.topic("c:x"); tr.Settings != nil || tr.Counts != (store.Counts{Scheduled: 1, Ready: 1}) || tr.NextDue != now+10 || tr.OldestReady != now {
		t.Errorf("topic c:x: %+v", *tr)
	}
	h.counts("a", store.Counts{}) // known, though empty
}
