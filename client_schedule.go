package delayq

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"

	"github.com/delayq/delayq/internal/wire"
)

var _ Scheduler = (*Client)(nil)

func schedulePath(name string) (string, error) {
	if err := ValidateScheduleName(name); err != nil {
		return "", err
	}
	return "/v1/schedules/" + url.PathEscape(name), nil
}

// ScheduleSet implements Scheduler (PUT /v1/schedules/{name}).
func (c *Client) ScheduleSet(ctx context.Context, s Schedule) (*Schedule, error) {
	p, err := schedulePath(s.Name)
	if err != nil {
		return nil, err
	}
	in := &wire.ScheduleRequest{Topic: s.Topic, Cron: s.Cron, Timezone: s.Timezone, Headers: s.Headers,
		Missed: string(s.Missed), Paused: &s.Paused}
	if utf8.Valid(s.Payload) {
		pl := string(s.Payload)
		in.Payload = &pl
	} else {
		pl := base64.StdEncoding.EncodeToString(s.Payload)
		in.PayloadBase64 = &pl
	}
	if s.MaxAttempts != 0 {
		in.MaxAttempts = &s.MaxAttempts
	}
	if s.Delay != 0 {
		d := wire.Duration(s.Delay)
		in.Delay = &d
	}
	var out wire.Schedule
	if err := c.do(ctx, &call{method: http.MethodPut, path: p, in: in, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return scheduleFromWire(&out), nil
}

// ScheduleGet implements Scheduler.
func (c *Client) ScheduleGet(ctx context.Context, name string) (*Schedule, error) {
	p, err := schedulePath(name)
	if err != nil {
		return nil, err
	}
	var out wire.Schedule
	if err := c.do(ctx, &call{method: http.MethodGet, path: p, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return scheduleFromWire(&out), nil
}

// ScheduleList implements Scheduler.
func (c *Client) ScheduleList(ctx context.Context) ([]Schedule, error) {
	var out wire.SchedulesResponse
	if err := c.do(ctx, &call{method: http.MethodGet, path: "/v1/schedules", out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	list := make([]Schedule, len(out.Schedules))
	for i := range out.Schedules {
		list[i] = *scheduleFromWire(&out.Schedules[i])
	}
	return list, nil
}

// ScheduleDelete implements Scheduler. It is not repeated after a
// connection error (a repeat could answer ErrNotFound for a delete that
// worked).
func (c *Client) ScheduleDelete(ctx context.Context, name string) error {
	p, err := schedulePath(name)
	if err != nil {
		return err
	}
	return c.do(ctx, &call{method: http.MethodDelete, path: p})
}

// SchedulePause implements Scheduler (PATCH /v1/schedules/{name} with
// {"paused": …}).
func (c *Client) SchedulePause(ctx context.Context, name string, paused bool) (*Schedule, error) {
	p, err := schedulePath(name)
	if err != nil {
		return nil, err
	}
	var out wire.Schedule
	if err := c.do(ctx, &call{method: http.MethodPatch, path: p, in: &wire.SchedulePatch{Paused: &paused}, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return scheduleFromWire(&out), nil
}

func scheduleFromWire(w *wire.Schedule) *Schedule {
	s := &Schedule{Name: w.Name, Topic: w.Topic, Cron: w.Cron, Timezone: w.Timezone, Headers: w.Headers,
		MaxAttempts: w.MaxAttempts, Paused: w.Paused, Missed: MissedPolicy(w.Missed)}
	switch {
	case w.Payload != nil:
		s.Payload = []byte(*w.Payload)
	case w.PayloadBase64 != nil:
		s.Payload, _ = base64.StdEncoding.DecodeString(*w.PayloadBase64)
	}
	if w.Delay != nil {
		s.Delay = time.Duration(*w.Delay)
	}
	for _, f := range []struct {
		dst *time.Time
		src *time.Time
	}{{&s.LastTick, w.LastTick}, {&s.NextTick, w.NextTick}, {&s.CreatedAt, w.CreatedAt}, {&s.UpdatedAt, w.UpdatedAt}} {
		if f.src != nil {
			*f.dst = *f.src
		}
	}
	return s
}
