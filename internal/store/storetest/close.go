package storetest

import (
	"errors"

	"github.com/delayq/delayq/internal/store"
)

func testClose(h *harness) {
	t, now := h.t, T0
	h.insertNew("t", now, msg("a", now))
	noErr(t, "Close", h.s.Close())
	ctx := h.ctx
	calls := map[string]func() error{
		"MessageInsertMany": func() error {
			_, err := h.s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "t", Now: now, Messages: []store.InsertMessage{msg("b", now)}})
			return err
		},
		"MessageGet": func() error { _, err := h.s.MessageGet(ctx, "t", "a"); return err },
		"MessageCancel": func() error {
			_, err := h.s.MessageCancel(ctx, &store.MessageCancelParams{Topic: "t", ID: "a", Now: now})
			return err
		},
		"MessageReschedule": func() error {
			_, err := h.s.MessageReschedule(ctx, &store.MessageRescheduleParams{Topic: "t", ID: "a", DueAt: now, Now: now})
			return err
		},
		"MessagePromote": func() error {
			_, err := h.s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "t", Now: now, Max: 1})
			return err
		},
		"MessageLease": func() error {
			_, err := h.s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "t", Now: now, Max: 1, LeaseFor: 1, Token: "x"})
			return err
		},
		"MessageAck": func() error {
			return h.s.MessageAck(ctx, &store.MessageAckParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
		},
		"MessageAckMany": func() error {
			_, err := h.s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "t", Items: []store.AckItem{{ID: "a", Receipt: "r"}}, Now: now})
			return err
		},
		"MessageNack": func() error {
			_, err := h.s.MessageNack(ctx, &store.MessageNackParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
			return err
		},
		"MessageExtend": func() error {
			_, err := h.s.MessageExtend(ctx, &store.MessageExtendParams{Topic: "t", ID: "a", Receipt: "r", Now: now})
			return err
		},
		"LeaseExpire": func() error { _, err := h.s.LeaseExpire(ctx, &store.LeaseExpireParams{Now: now, Max: 1}); return err },
		"DeadList": func() error {
			_, _, err := h.s.DeadList(ctx, &store.DeadListParams{Topic: "t", Limit: 1})
			return err
		},
		"DeadReplay": func() error {
			_, err := h.s.DeadReplay(ctx, &store.DeadReplayParams{Topic: "t", Now: now, Max: 1})
			return err
		},
		"DeadDelete": func() error {
			_, err := h.s.DeadDelete(ctx, &store.DeadDeleteParams{Topic: "t", Max: 1})
			return err
		},
		"DedupPurge": func() error {
			_, err := h.s.DedupPurge(ctx, &store.DedupPurgeParams{Now: now, Max: 1})
			return err
		},
		"TopicGet":         func() error { _, err := h.s.TopicGet(ctx, "t"); return err },
		"TopicList":        func() error { _, err := h.s.TopicList(ctx); return err },
		"TopicSettingsPut": func() error { return h.s.TopicSettingsPut(ctx, "t", []byte("x")) },
		"ScheduleUpsert": func() error {
			_, err := h.s.ScheduleUpsert(ctx, &store.ScheduleUpsertParams{Name: "s", Spec: []byte("x"), Now: now})
			return err
		},
		"ScheduleGet":    func() error { _, err := h.s.ScheduleGet(ctx, "s"); return err },
		"ScheduleList":   func() error { _, err := h.s.ScheduleList(ctx); return err },
		"ScheduleDelete": func() error { return h.s.ScheduleDelete(ctx, "s") },
		"ScheduleTick": func() error {
			_, err := h.s.ScheduleTick(ctx, &store.ScheduleTickParams{Name: "s", Tick: now})
			return err
		},
	}
	for name, call := range calls {
		wantErr(t, name+" after Close", call(), store.ErrClosed)
	}
	if err := h.s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		t.Errorf("second Close: %v", err)
	}
}
