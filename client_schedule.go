package delayq

import (
	"context"
	"net/http"
	"net/url"

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
	var out wire.Schedule
	if err := c.do(ctx, &call{method: http.MethodPut, path: p, in: wire.NewScheduleRequest(s), out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
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
	return out.ToDomain(), nil
}

// ScheduleList implements Scheduler.
func (c *Client) ScheduleList(ctx context.Context) ([]Schedule, error) {
	var out wire.SchedulesResponse
	if err := c.do(ctx, &call{method: http.MethodGet, path: "/v1/schedules", out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	list := make([]Schedule, len(out.Schedules))
	for i := range out.Schedules {
		list[i] = *out.Schedules[i].ToDomain()
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
	return out.ToDomain(), nil
}
