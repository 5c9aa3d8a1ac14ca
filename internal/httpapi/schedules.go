package httpapi

import (
	"fmt"
	"net/http"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// Recurring schedules: PUT creates or replaces (the body is the whole
// schedule, "paused" included), PATCH {"paused": bool} pauses or resumes
// only, GET reads, DELETE removes.

func (s *Server) scheduler(c *call) (domain.Scheduler, string, error) {
	if s.cfg.Scheduler == nil {
		return nil, "", fmt.Errorf("%w: recurring schedules are not enabled on this server", errNotImpl)
	}
	name := c.r.PathValue("name")
	if name != "" {
		if err := domain.ValidateScheduleName(name); err != nil {
			return nil, "", err
		}
	}
	return s.cfg.Scheduler, name, nil
}

func (s *Server) putSchedule(c *call) (int, any, error) {
	sc, name, err := s.scheduler(c)
	if err != nil {
		return 0, nil, err
	}
	var in wire.ScheduleRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	req, err := in.ToDomain(name)
	if err != nil {
		return 0, nil, err
	}
	out, err := sc.ScheduleSet(c.r.Context(), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(out), nil
}

func (s *Server) patchSchedule(c *call) (int, any, error) {
	sc, name, err := s.scheduler(c)
	if err != nil {
		return 0, nil, err
	}
	var in wire.SchedulePatch
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if in.Paused == nil {
		return 0, nil, domain.Invalid("paused", "is required (true pauses, false resumes)")
	}
	out, err := sc.SchedulePause(c.r.Context(), name, *in.Paused)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(out), nil
}

func (s *Server) getSchedule(c *call) (int, any, error) {
	sc, name, err := s.scheduler(c)
	if err != nil {
		return 0, nil, err
	}
	out, err := sc.ScheduleGet(c.r.Context(), name)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromSchedule(out), nil
}

func (s *Server) listSchedules(c *call) (int, any, error) {
	sc, _, err := s.scheduler(c)
	if err != nil {
		return 0, nil, err
	}
	list, err := sc.ScheduleList(c.r.Context())
	if err != nil {
		return 0, nil, err
	}
	out := wire.SchedulesResponse{Schedules: make([]wire.Schedule, len(list))}
	for i := range list {
		out.Schedules[i] = *wire.FromSchedule(&list[i])
	}
	return http.StatusOK, out, nil
}

func (s *Server) deleteSchedule(c *call) (int, any, error) {
	sc, name, err := s.scheduler(c)
	if err != nil {
		return 0, nil, err
	}
	if err := sc.ScheduleDelete(c.r.Context(), name); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: 1}, nil
}
