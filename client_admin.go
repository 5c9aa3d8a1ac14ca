package delayq

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/wire"
)

var _ TopicAdmin = (*Client)(nil)

// ListMessages implements TopicAdmin (GET /v1/topics/{topic}/messages).
func (c *Client) ListMessages(ctx context.Context, topic string, req ListRequest) (*MessagePage, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	q := url.Values{"state": {string(req.Filter.State)}}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	if !req.Filter.DueAfter.IsZero() {
		q.Set("due_after", req.Filter.DueAfter.Format(time.RFC3339Nano))
	}
	if !req.Filter.DueBefore.IsZero() {
		q.Set("due_before", req.Filter.DueBefore.Format(time.RFC3339Nano))
	}
	var out wire.MessagePage
	if err := c.do(ctx, &call{method: http.MethodGet, path: topicPath(topic, "messages"), query: q, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	page := &MessagePage{Messages: make([]*Message, len(out.Messages)), Next: out.Next}
	for i, m := range out.Messages {
		page.Messages[i] = m.ToDomain()
	}
	return page, nil
}

func wireFilter(f MessageFilter) *wire.MessageFilter {
	w := &wire.MessageFilter{State: string(f.State)}
	if !f.DueAfter.IsZero() {
		w.DueAfter = &f.DueAfter
	}
	if !f.DueBefore.IsZero() {
		w.DueBefore = &f.DueBefore
	}
	return w
}

// CancelMessages implements TopicAdmin (POST …/messages:cancel). Not
// retried: a retry after a lost answer would count only what was left.
func (c *Client) CancelMessages(ctx context.Context, topic string, f MessageFilter) (int, error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, err
	}
	var out wire.CountResponse
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "messages:cancel"), in: wire.BulkRequest{Filter: wireFilter(f)}, out: &out}); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// RescheduleMessages implements TopicAdmin (POST …/messages:reschedule).
func (c *Client) RescheduleMessages(ctx context.Context, topic string, f MessageFilter, when When) (int, error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, err
	}
	in := wire.BulkRequest{Filter: wireFilter(f)}
	switch {
	case !when.DeliverAt.IsZero():
		in.DeliverAt = &when.DeliverAt
	default:
		ms := when.Delay.Milliseconds()
		in.DelayMS = &ms
	}
	var out wire.CountResponse
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "messages:reschedule"), in: in, out: &out}); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// PauseTopic implements TopicAdmin (POST …/pause or …/resume).
func (c *Client) PauseTopic(ctx context.Context, topic string, paused bool) (*TopicInfo, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	action := "resume"
	if paused {
		action = "pause"
	}
	var out wire.Topic
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, action), out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	info := out.ToDomain(time.Now())
	return &info, nil
}

// DeleteTopic implements TopicAdmin (DELETE /v1/topics/{topic}). It is not
// retried: a repeat after a lost answer would say the topic is not found.
func (c *Client) DeleteTopic(ctx context.Context, topic string) error {
	if err := ValidateTopic(topic); err != nil {
		return err
	}
	var out wire.CountResponse
	return c.do(ctx, &call{method: http.MethodDelete, path: topicPath(topic, ""), out: &out})
}
