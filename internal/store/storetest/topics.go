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

// testTopicSettingsList: a store that lists settings alone
// (store.TopicSettingsLister) lists, in name order, the topics whose
// settings were put, with those settings (bytes as put, empty ones
// included), as TopicList has them, and no topic whose settings were
// never put or that was deleted.
func testTopicSettingsList(h *harness) {
	t, now := h.t, T0
	l, ok := h.s.(store.TopicSettingsLister)
	if !ok {
		return
	}
	list := func() []*store.TopicRecord {
		t.Helper()
		recs, err := l.TopicSettingsList(h.ctx)
		noErr(t, "TopicSettingsList", err)
		return recs
	}
	if recs := list(); len(recs) != 0 {
		t.Errorf("TopicSettingsList of an empty store: %d records", len(recs))
	}
	want := map[string]string{"b": "{\"max_attempts\":5}\x00\xff", "a.1": "v", "e": ""}
	for name, set := range want {
		noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, name, []byte(set)))
	}
	h.insertNew("a.1", now, msg("1", now))
	h.insertNew("c", now, msg("1", now+10)) // messages, no settings
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "d", []byte("gone")))
	noErr(t, "TopicDelete", h.s.TopicDelete(h.ctx, "d"))

	recs := list()
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
		if set, ok := want[r.Name]; !ok || r.Settings == nil || string(r.Settings) != set {
			t.Errorf("TopicSettingsList: %s with settings %q (nil %v); want %q", r.Name, r.Settings, r.Settings == nil, want[r.Name])
		}
		if r.Counts != (store.Counts{}) || r.NextDue != 0 || r.OldestReady != 0 || r.NextLeaseExpiry != 0 {
			t.Errorf("TopicSettingsList: %s has more than its settings: %+v", r.Name, *r)
		}
		if full := h.topic(r.Name); string(full.Settings) != string(r.Settings) || full.Settings == nil {
			t.Errorf("TopicSettingsList: %s settings %q, TopicGet %q", r.Name, r.Settings, full.Settings)
		}
	}
	if w := []string{"a.1", "b", "e"}; !slices.Equal(names, w) {
		t.Errorf("TopicSettingsList names %v, want %v", names, w)
	}
}
