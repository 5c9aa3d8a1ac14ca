package storetest

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/delayq/delayq/internal/store"
)

// testTopicDelete checks that only a topic without scheduled, ready,
// inflight or dead messages is forgotten, that its tombstones keep
// deduplicating and are purged as usual, and that an insert or a settings
// put makes a deleted topic known again, as new.
func testTopicDelete(h *harness) {
	t, now := h.t, T0
	wantErr(t, "TopicDelete unknown", h.s.TopicDelete(h.ctx, "nope"), store.ErrNotFound)

	// Refused while the topic holds a message in any live state.
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "t", []byte("s1")))
	h.insertNew("t", now, msg("sched", now+100))
	wantErr(t, "TopicDelete with a scheduled message", h.s.TopicDelete(h.ctx, "t"), store.ErrConflict)
	h.wantPromote("t", now+100, 10, 1, 0)
	wantErr(t, "TopicDelete with a ready message", h.s.TopicDelete(h.ctx, "t"), store.ErrConflict)
	r := h.leaseOne("t", "sched", now+100, now+200)
	wantErr(t, "TopicDelete with an inflight message", h.s.TopicDelete(h.ctx, "t"), store.ErrConflict)
	noErr(t, "ack", h.ack("t", "sched", r.Receipt, now+100))
	makeDead(h, "t", []death{{"dead", now + 150}})
	wantErr(t, "TopicDelete with a dead message", h.s.TopicDelete(h.ctx, "t"), store.ErrConflict)
	if tr := h.topic("t"); string(tr.Settings) != "s1" || tr.Counts != (store.Counts{Dead: 1, Acked: 1}) {
		t.Errorf("after refused deletes: %+v", *tr)
	}
	if n, err := h.s.DeadDelete(h.ctx, &store.DeadDeleteParams{Topic: "t", ID: "dead"}); n != 1 || err != nil {
		t.Fatalf("DeadDelete: %d %v", n, err)
	}

	// Empty but for a tombstone: forgotten.
	h.insertNew("other", now, msg("o", now+10))
	noErr(t, "TopicDelete", h.s.TopicDelete(h.ctx, "t"))
	_, err := h.s.TopicGet(h.ctx, "t")
	wantErr(t, "TopicGet after TopicDelete", err, store.ErrNotFound)
	list, err := h.s.TopicList(h.ctx)
	noErr(t, "TopicList", err)
	if len(list) != 1 || list[0].Name != "other" {
		t.Errorf("TopicList after TopicDelete: %d topics, want only other", len(list))
	}
	wantErr(t, "TopicDelete twice", h.s.TopicDelete(h.ctx, "t"), store.ErrNotFound)
	if g := h.get("t", "sched"); g.State != store.StateAcked {
		t.Errorf("tombstone after TopicDelete: %s", fmtRec(g))
	}

	// A settings put makes it known again, with only the new settings.
	noErr(t, "TopicSettingsPut", h.s.TopicSettingsPut(h.ctx, "t", []byte("s2")))
	if tr := h.topic("t"); string(tr.Settings) != "s2" {
		t.Errorf("settings after delete and put: %q", tr.Settings)
	}
	noErr(t, "TopicDelete again", h.s.TopicDelete(h.ctx, "t"))

	// So does an insert; the settings are gone and the tombstone still
	// deduplicates.
	res := h.insert("t", now+300, msg("sched", now+400), msg("new", now+400))
	if !res[0].Duplicate || res[1].Duplicate {
		t.Errorf("insert after TopicDelete: duplicate %v %v, want true false", res[0].Duplicate, res[1].Duplicate)
	}
	if tr := h.topic("t"); tr.Settings != nil || tr.Counts.Scheduled != 1 || tr.NextDue != now+400 {
		t.Errorf("topic after delete and insert: %+v", *tr)
	}

	// A send of nothing but a duplicate makes a deleted topic again too.
	noErr(t, "TopicDelete after the insert", func() error {
		if _, err := h.s.MessageCancel(h.ctx, &store.MessageCancelParams{Topic: "t", ID: "new", Now: now + 300}); err != nil {
			return err
		}
		return h.s.TopicDelete(h.ctx, "t")
	}())
	if res := h.insert("t", now+300, msg("sched", now+400)); !res[0].Duplicate {
		t.Errorf("insert of an acked id after TopicDelete: not a duplicate")
	}
	if tr := h.topic("t"); tr.Counts.Live() != 0 || tr.Counts.Acked != 1 {
		t.Errorf("topic after delete and a duplicate send: %+v", *tr)
	}

	// Tombstones of a deleted topic are purged as usual.
	h.insertNew("p", now, msg("x", now))
	r = h.leaseOne("p", "x", now, now+100)
	noErr(t, "ack", h.ack("p", "x", r.Receipt, now+1))
	noErr(t, "TopicDelete p", h.s.TopicDelete(h.ctx, "p"))
	n, err := h.s.DedupPurge(h.ctx, &store.DedupPurgeParams{Now: now + 1000, Window: 10, Max: 100})
	noErr(t, "DedupPurge", err)
	if n != 2 { // "p"/"x" and "t"/"sched"
		t.Errorf("DedupPurge after TopicDelete: %d purged, want 2", n)
	}
	h.gone("p", "x")
}

// testConcurrentTopicDelete races sends against settings puts and deletes
// of the same topics: every topic ends up holding the one message sent to
// it, so TopicGet and TopicList must show every one of them.
func testConcurrentTopicDelete(h *harness) {
	t, now := h.t, T0
	const topics = 60
	name := func(i int) string { return fmt.Sprintf("race-%d", i) }
	var (
		deleted, refused atomic.Int64
		sent             atomic.Bool
		firstRound       = make(chan struct{})
		wg               sync.WaitGroup
	)
	wg.Go(func() {
		for round := 0; ; round++ {
			last := sent.Load() // a round that starts after the last send sees them all
			for i := range topics {
				if err := h.s.TopicSettingsPut(h.ctx, name(i), []byte("s")); err != nil {
					t.Errorf("TopicSettingsPut: %v", err)
					return
				}
				switch err := h.s.TopicDelete(h.ctx, name(i)); {
				case err == nil:
					deleted.Add(1)
				case errors.Is(err, store.ErrConflict):
					refused.Add(1)
				default:
					t.Errorf("TopicDelete: %v", err)
					return
				}
			}
			if round == 0 {
				close(firstRound)
			}
			if last {
				return
			}
		}
	})
	<-firstRound
	for i := range topics {
		h.insertNew(name(i), now, msg("m", now+1000))
	}
	sent.Store(true)
	wg.Wait()
	if deleted.Load() < topics || refused.Load() < topics {
		t.Fatalf("deletes: %d done, %d refused; want at least %d of each", deleted.Load(), refused.Load(), topics)
	}
	list, err := h.s.TopicList(h.ctx)
	noErr(t, "TopicList", err)
	shown := map[string]bool{}
	for _, tr := range list {
		shown[tr.Name] = tr.Counts.Scheduled == 1
	}
	for i := range topics {
		if tr := h.topic(name(i)); tr.Counts.Scheduled != 1 || !shown[name(i)] {
			t.Errorf("topic %s holds its message but TopicList shows it %v: %+v", name(i), shown[name(i)], *tr)
		}
	}
}
