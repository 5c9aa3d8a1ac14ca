package httpapi

import (
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// Browsing, bulk changes and pause of a topic (Config.Admin).

func (s *Server) admin() (domain.TopicAdmin, error) {
	if s.cfg.Admin == nil {
		return nil, fmt.Errorf("%w: browsing and bulk operations are not enabled on this server", errNotImpl)
	}
	return s.cfg.Admin, nil
}

// queryTime reads an RFC 3339 time from the query; zero when absent.
func queryTime(c *call, name string) (time.Time, error) {
	v := c.r.URL.Query().Get(name)
	if v == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, v)
	if err != nil {
		return time.Time{}, domain.Invalid(name, "must be an RFC 3339 time, got %q", v)
	}
	return t, nil
}

func (s *Server) listMessages(c *call) (int, any, error) {
	a, err := s.admin()
	if err != nil {
		return 0, nil, err
	}
	q := c.r.URL.Query()
	req := domain.ListRequest{Filter: domain.MessageFilter{State: domain.State(q.Get("state"))}, Cursor: q.Get("cursor")}
	if req.Filter.State == "" {
		return 0, nil, domain.Invalid("state", "is required: scheduled, ready, inflight or dead")
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > domain.MaxListLimit {
			return 0, nil, domain.Invalid("limit", "must be an integer between 1 and %d", domain.MaxListLimit)
		}
		req.Limit = n
	}
	if len(req.Cursor) > maxCursorBytes {
		return 0, nil, domain.Invalid("cursor", "is longer than %d bytes", maxCursorBytes)
	}
	if req.Filter.DueAfter, err = queryTime(c, "due_after"); err != nil {
		return 0, nil, err
	}
	if req.Filter.DueBefore, err = queryTime(c, "due_before"); err != nil {
		return 0, nil, err
	}
	page, err := a.ListMessages(c.r.Context(), c.topic, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.MessagePage{Messages: wire.FromMessages(page.Messages), Next: page.Next}, nil
}

// bulkRequest reads a bulk body; the filter is required, so that an empty
// body never means "every message of the topic".
func bulkRequest(c *call) (*wire.BulkRequest, domain.MessageFilter, error) {
	var in wire.BulkRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return nil, domain.MessageFilter{}, err
	}
	if in.Filter == nil {
		return nil, domain.MessageFilter{}, domain.Invalid("filter", `is required ({} selects every scheduled and ready message)`)
	}
	return &in, in.Filter.ToDomain(), nil
}

func (s *Server) bulkCancel(c *call) (int, any, error) {
	a, err := s.admin()
	if err != nil {
		return 0, nil, err
	}
	in, f, err := bulkRequest(c)
	if err != nil {
		return 0, nil, err
	}
	if in.Delay != nil || in.DelayMS != nil || in.DeliverAt != nil {
		return 0, nil, domain.Invalid("delay", "a cancel takes only a filter")
	}
	n, err := a.CancelMessages(c.r.Context(), c.topic, f)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: n}, nil
}

func (s *Server) bulkReschedule(c *call) (int, any, error) {
	a, err := s.admin()
	if err != nil {
		return 0, nil, err
	}
	in, f, err := bulkRequest(c)
	if err != nil {
		return 0, nil, err
	}
	rr := in.When()
	when, err := rr.ToDomain()
	if err != nil {
		return 0, nil, err
	}
	n, err := a.RescheduleMessages(c.r.Context(), c.topic, f, when)
	if err != nil {
		return 0, nil, rr.NameFields(err)
	}
	return http.StatusOK, wire.CountResponse{Count: n}, nil
}

func (s *Server) pauseTopic(c *call) (int, any, error)  { return s.setPaused(c, true) }
func (s *Server) resumeTopic(c *call) (int, any, error) { return s.setPaused(c, false) }

func (s *Server) setPaused(c *call, paused bool) (int, any, error) {
	a, err := s.admin()
	if err != nil {
		return 0, nil, err
	}
	if err := wire.DecodeStrict(c.body, &empty{}, true); err != nil {
		return 0, nil, err
	}
	info, err := a.PauseTopic(c.r.Context(), c.topic, paused)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTopicInfo(info, s.cfg.Now()), nil
}

func (s *Server) deleteTopic(c *call) (int, any, error) {
	a, err := s.admin()
	if err != nil {
		return 0, nil, err
	}
	if err := a.DeleteTopic(c.r.Context(), c.topic); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: 1}, nil
}
