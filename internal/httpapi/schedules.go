package httpapi

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

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
	req, err := s.scheduleFromWire(name, &in)
	if err != nil {
		return 0, nil, err
	}
	out, err := sc.ScheduleSet(c.r.Context(), req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, scheduleToWire(out), nil
}

func (s *Server) scheduleFromWire(name string, in *wire.ScheduleRequest) (domain.Schedule, error) {
	out := domain.Schedule{Name: name, Topic: in.Topic, Cron: in.Cron, Timezone: in.Timezone,
		Headers: in.Headers, Missed: domain.MissedPolicy(in.Missed)}
	if in.Topic == "" {
		return out, domain.Invalid("topic", "is required")
	}
	if err := domain.ValidateTopic(in.Topic); err != nil {
		return out, err
	}
	if in.Cron == "" {
		return out, domain.Invalid("cron", "is required, e.g. \"0 9 * * 1-5\" or \"@every 10m\"")
	}
	switch {
	case in.Payload != nil && in.PayloadBase64 != nil:
		return out, domain.Invalid("payload", "give either payload or payload_base64, not both")
	case in.Payload != nil:
		out.Payload = []byte(*in.Payload)
	case in.PayloadBase64 != nil:
		b, err := base64.StdEncoding.Strict().DecodeString(*in.PayloadBase64)
		if err != nil {
			return out, domain.Invalid("payload_base64", "is not standard padded base64: %v", err)
		}
		out.Payload = b
	default:
		return out, domain.Invalid("payload", "is required (use \"payload\": \"\" for an empty one, or payload_base64)")
	}
	if len(out.Payload) > s.cfg.MaxPayload {
		return out, fmt.Errorf("%w: payload is %d bytes, the limit is %d", domain.ErrTooLarge, len(out.Payload), s.cfg.MaxPayload)
	}
	if err := checkHeaders(in.Headers, ""); err != nil {
		return out, err
	}
	if in.MaxAttempts != nil {
		if *in.MaxAttempts < 1 {
			return out, domain.Invalid("max_attempts", "must be at least 1 (omit it for the topic's setting)")
		}
		out.MaxAttempts = *in.MaxAttempts
	}
	if in.Delay != nil {
		w, err := s.checkDelay(time.Duration(*in.Delay), "delay")
		if err != nil {
			return out, err
		}
		out.Delay = w.Delay
	}
	if in.Paused != nil {
		out.Paused = *in.Paused
	}
	return out, nil
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
	return http.StatusOK, scheduleToWire(out), nil
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
	return http.StatusOK, scheduleToWire(out), nil
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
		out.Schedules[i] = *scheduleToWire(&list[i])
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

func scheduleToWire(s *domain.Schedule) *wire.Schedule {
	out := &wire.Schedule{
		Name: s.Name, Topic: s.Topic, Cron: s.Cron, Timezone: s.Timezone, Headers: s.Headers,
		MaxAttempts: s.MaxAttempts, Paused: s.Paused, Missed: string(s.Missed),
		LastTick: optTime(s.LastTick), NextTick: optTime(s.NextTick),
		CreatedAt: optTime(s.CreatedAt), UpdatedAt: optTime(s.UpdatedAt),
	}
	if s.Delay > 0 {
		d := wire.Duration(s.Delay)
		out.Delay = &d
	}
	if utf8.Valid(s.Payload) {
		p := string(s.Payload)
		out.Payload = &p
	} else {
		p := base64.StdEncoding.EncodeToString(s.Payload)
		out.PayloadBase64 = &p
	}
	return out
}

func optTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	m := ms(t)
	return &m
}
