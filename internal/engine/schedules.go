package engine

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Recurring schedules (domain.Scheduler). Each schedule has one wheel
// entry, armed at its next tick. When it fires, fireSchedule re-reads the
// schedule from the store (another server may have changed, paused or
// deleted it), sends the message of the latest tick not yet handled, with
// the id "sched.<name>.<tick ms>", records the tick as LastTick, and
// re-arms at the following tick.
//
// Exactly one message per tick: every engine sharing the store fires
// every schedule, and the tick's id makes the sends of all but the first
// duplicates (idempotent send). A crash between the send and the LastTick
// write re-sends the same id after the restart, also a duplicate (within
// the dedup window, 24 h by default). LastTick only moves forward (the
// store takes the max), so racing servers never rewind it.
//
// Missed ticks: ticks in (LastTick, now] are handled as one: the latest
// is sent (MissedFireOnce), or, under MissedSkip, sent only if it is at
// most domain.ScheduleGrace late. The engine finds missed ticks at Open
// (every schedule is armed at its next tick after LastTick, which fires at
// once when it is past) and in a sweep every scheduleSweepEvery, which also
// picks up schedules created through other engines.

const scheduleSweepEvery = 10 * time.Second

// storedSchedule is the Spec blob of a store.Schedule.
type storedSchedule struct {
	Topic       string            `json:"topic"`
	Cron        string            `json:"cron"`
	Timezone    string            `json:"tz,omitempty"`
	Payload     []byte            `json:"payload,omitempty"`
	Headers     map[string]string `json:"headers,omitempty"`
	MaxAttempts int               `json:"max_attempts,omitempty"`
	Priority    int               `json:"priority,omitempty"`
	DelayMS     int64             `json:"delay_ms,omitempty"`
	Paused      bool              `json:"paused,omitempty"`
	Missed      string            `json:"missed,omitempty"`
}

var _ domain.Scheduler = (*Engine)(nil)

// ScheduleSet implements domain.Scheduler. LastTick restarts at now for a
// new schedule, a changed cron or zone, and a resume, so that no tick
// before that counts as missed.
func (e *Engine) ScheduleSet(ctx context.Context, s domain.Schedule) (*domain.Schedule, error) {
	sp, cs, err := e.checkSchedule(&s)
	if err != nil {
		return nil, err
	}
	now := e.now()
	restart := now
	old, err := e.st.ScheduleGet(ctx, s.Name)
	switch {
	case errors.Is(err, store.ErrNotFound):
	case err != nil:
		return nil, storeErr("read", "schedule "+s.Name, err)
	default:
		o, err := decodeSchedule(old.Spec)
		resumed := err == nil && o.Paused && !sp.Paused
		if err == nil && o.Cron == sp.Cron && o.Timezone == sp.Timezone && !resumed {
			restart = 0 // same timing, not resumed: keep LastTick
		}
	}
	return e.putSchedule(ctx, s.Name, sp, cs, restart, now)
}

func (e *Engine) putSchedule(ctx context.Context, name string, sp *storedSchedule, cs *cronSpec, lastTick, now int64) (*domain.Schedule, error) {
	blob, _ := json.Marshal(sp) // plain data: cannot fail
	rec, err := e.st.ScheduleUpsert(ctx, &store.ScheduleUpsertParams{Name: name, Spec: blob, LastTick: lastTick, Now: now})
	if err != nil {
		return nil, storeErr("store", "schedule "+name, err)
	}
	e.armNext(rec.Name, sp, cs, rec.LastTick)
	return toSchedule(rec, sp, cs), nil
}

// checkSchedule validates a schedule and encodes its spec.
func (e *Engine) checkSchedule(s *domain.Schedule) (*storedSchedule, *cronSpec, error) {
	if err := domain.ValidateScheduleName(s.Name); err != nil {
		return nil, nil, err
	}
	if err := domain.ValidateTopic(s.Topic); err != nil {
		return nil, nil, err
	}
	cs, err := parseCron(s.Cron, s.Timezone)
	if err != nil {
		return nil, nil, err
	}
	if cs.next(msTime(e.now())).IsZero() {
		return nil, nil, domain.Invalid("cron", "%q never fires", s.Cron)
	}
	if err := e.limits.CheckPayload(s.Payload); err != nil {
		return nil, nil, err
	}
	if s.MaxAttempts < 0 || s.MaxAttempts > MaxMaxAttempts {
		return nil, nil, domain.Invalid("max_attempts", "must be between 1 and %d", MaxMaxAttempts)
	}
	if err := e.limits.CheckDelay(s.Delay, "delay"); err != nil {
		return nil, nil, err
	}
	if err := domain.CheckPriority(s.Priority); err != nil {
		return nil, nil, err
	}
	if s.Missed != "" && s.Missed != domain.MissedFireOnce && s.Missed != domain.MissedSkip {
		return nil, nil, domain.Invalid("missed", "must be %q or %q", domain.MissedFireOnce, domain.MissedSkip)
	}
	if err := domain.ValidateHeaders(s.Headers); err != nil {
		return nil, nil, err
	}
	return &storedSchedule{
		Topic: s.Topic, Cron: s.Cron, Timezone: s.Timezone,
		Payload: s.Payload, Headers: s.Headers, MaxAttempts: s.MaxAttempts, Priority: s.Priority,
		DelayMS: (s.Delay + time.Millisecond - 1).Milliseconds(), Paused: s.Paused, Missed: string(s.Missed),
	}, cs, nil
}

func decodeSchedule(blob []byte) (*storedSchedule, error) {
	var sp storedSchedule
	if err := json.Unmarshal(blob, &sp); err != nil {
		return nil, fmt.Errorf("decode schedule: %w", err)
	}
	return &sp, nil
}

// loadSchedule decodes a stored schedule and parses its cron.
func loadSchedule(rec *store.Schedule) (*storedSchedule, *cronSpec, error) {
	sp, err := decodeSchedule(rec.Spec)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: schedule %s: %v", domain.ErrUnavailable, rec.Name, err)
	}
	cs, err := parseCron(sp.Cron, sp.Timezone)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: schedule %s: %v", domain.ErrUnavailable, rec.Name, err)
	}
	return sp, cs, nil
}

func toSchedule(rec *store.Schedule, sp *storedSchedule, cs *cronSpec) *domain.Schedule {
	out := &domain.Schedule{
		Name: rec.Name, Topic: sp.Topic, Cron: sp.Cron, Timezone: sp.Timezone,
		Payload: sp.Payload, Headers: sp.Headers, MaxAttempts: sp.MaxAttempts, Priority: sp.Priority,
		Delay: time.Duration(sp.DelayMS) * time.Millisecond, Paused: sp.Paused,
		Missed:    domain.MissedPolicy(cmp.Or(sp.Missed, string(domain.MissedFireOnce))),
		CreatedAt: msTime(rec.CreatedAt), UpdatedAt: msTime(rec.UpdatedAt),
	}
	// The stored LastTick is also where counting restarts (creation, a
	// changed cron, a resume): shown only when it is a tick of the cron,
	// so a schedule that never fired shows no last tick.
	if last := msTime(rec.LastTick); !last.IsZero() && cs.next(last.Add(-time.Millisecond)).Equal(last) {
		out.LastTick = last
	}
	if !sp.Paused {
		out.NextTick = cs.next(msTime(rec.LastTick))
	}
	return out
}

// ScheduleGet implements domain.Scheduler.
func (e *Engine) ScheduleGet(ctx context.Context, name string) (*domain.Schedule, error) {
	if err := domain.ValidateScheduleName(name); err != nil {
		return nil, err
	}
	rec, err := e.st.ScheduleGet(ctx, name)
	if err != nil {
		return nil, storeErr("get", "schedule "+name, err)
	}
	sp, cs, err := loadSchedule(rec)
	if err != nil {
		return nil, err
	}
	return toSchedule(rec, sp, cs), nil
}

// ScheduleList implements domain.Scheduler.
func (e *Engine) ScheduleList(ctx context.Context) ([]domain.Schedule, error) {
	recs, err := e.st.ScheduleList(ctx)
	if err != nil {
		return nil, storeErr("list", "schedules", err)
	}
	out := make([]domain.Schedule, 0, len(recs))
	for _, r := range recs {
		sp, cs, err := loadSchedule(r)
		if err != nil {
			return nil, err
		}
		out = append(out, *toSchedule(r, sp, cs))
	}
	return out, nil
}

// ScheduleDelete implements domain.Scheduler.
func (e *Engine) ScheduleDelete(ctx context.Context, name string) error {
	if err := domain.ValidateScheduleName(name); err != nil {
		return err
	}
	if err := e.st.ScheduleDelete(ctx, name); err != nil {
		return storeErr("delete", "schedule "+name, err)
	}
	e.dispatcher.forgetSchedule(name)
	return nil
}

// SchedulePause implements domain.Scheduler. Resuming restarts LastTick
// at now: ticks that fell while paused are skipped, not missed.
func (e *Engine) SchedulePause(ctx context.Context, name string, paused bool) (*domain.Schedule, error) {
	if err := domain.ValidateScheduleName(name); err != nil {
		return nil, err
	}
	rec, err := e.st.ScheduleGet(ctx, name)
	if err != nil {
		return nil, storeErr("get", "schedule "+name, err)
	}
	sp, cs, err := loadSchedule(rec)
	if err != nil {
		return nil, err
	}
	if sp.Paused == paused {
		return toSchedule(rec, sp, cs), nil
	}
	sp.Paused = paused
	now := e.now()
	var restart int64
	if !paused {
		restart = now
	}
	return e.putSchedule(ctx, name, sp, cs, restart, now)
}

// armNext arms a schedule at its next tick after lastTick (at once when
// that is past: missed ticks). Paused schedules are not armed.
func (e *Engine) armNext(name string, sp *storedSchedule, cs *cronSpec, lastTick int64) {
	if sp.Paused {
		return
	}
	if next := cs.next(msTime(lastTick)); !next.IsZero() {
		e.dispatcher.armSchedule(name, next.UnixMilli())
	}
}

// armSchedules arms every schedule in the store (at Open and by the sweep).
func (e *Engine) armSchedules(ctx context.Context) error {
	recs, err := e.st.ScheduleList(ctx)
	if err != nil {
		return fmt.Errorf("engine: list schedules: %w", err)
	}
	for _, r := range recs {
		sp, cs, err := loadSchedule(r)
		if err != nil {
			e.log.Error("schedule is unreadable; not armed", "schedule", r.Name, "err", err)
			continue
		}
		e.armNext(r.Name, sp, cs, r.LastTick)
	}
	return nil
}

// runScheduleSweep re-arms every schedule periodically: schedules created
// or changed through other engines, and ticks an engine that died left.
func (e *Engine) runScheduleSweep() {
	defer e.bg.Done()
	tick := time.NewTicker(scheduleSweepEvery)
	defer tick.Stop()
	ctx := context.Background() // store calls are bounded by the store's own timeouts
	for {
		select {
		case <-e.closing:
			return
		case <-tick.C:
			if err := e.armSchedules(ctx); err != nil && !e.isClosing() {
				e.log.Warn("schedule sweep", "err", err)
			}
		}
	}
}

// fireSchedule handles a schedule's wheel entry: see the comment at the
// top of this file. It runs on a dispatcher worker.
func (e *Engine) fireSchedule(ctx context.Context, name string) {
	rec, err := e.st.ScheduleGet(ctx, name)
	switch {
	case errors.Is(err, store.ErrNotFound):
		e.dispatcher.forgetSchedule(name) // deleted, maybe through another engine
		return
	case err != nil:
		e.retrySchedule(ctx, name, "read schedule", err)
		return
	}
	sp, cs, err := loadSchedule(rec)
	if err != nil {
		e.log.Error("schedule is unreadable; not fired", "schedule", name, "err", err)
		return
	}
	if sp.Paused {
		return
	}
	now := e.now()
	last := rec.LastTick
	if tick := cs.latest(msTime(last), msTime(now)); !tick.IsZero() {
		outcome, err := e.sendTick(ctx, name, sp, tick.UnixMilli(), now)
		if err != nil {
			e.retrySchedule(ctx, name, "send the tick's message", err)
			return
		}
		e.countTick(name, sp, cs, last, tick.UnixMilli(), now, outcome)
		if _, err := e.st.ScheduleTick(ctx, &store.ScheduleTickParams{Name: name, Tick: tick.UnixMilli()}); err != nil {
			if errors.Is(err, store.ErrNotFound) {
				e.dispatcher.forgetSchedule(name)
				return
			}
			e.retrySchedule(ctx, name, "record the tick", err)
			return
		}
		last = tick.UnixMilli()
	}
	e.armNext(name, sp, cs, last)
}

// tickOutcome is what sendTick did with a tick.
type tickOutcome uint8

const (
	tickSent      tickOutcome = iota // this engine's send stored the message
	tickDuplicate                    // another engine (or an earlier try) had sent it
	tickSkipped                      // missed: skip, and too late
	tickRefused                      // the message is invalid under the limits
)

// sendTick sends the message of one tick, unless the tick is skipped
// (MissedSkip and more than ScheduleGrace late). Invalid messages (a
// template the server's limits no longer accept) are logged and the tick
// counts as handled; storage errors are returned, to be retried.
func (e *Engine) sendTick(ctx context.Context, name string, sp *storedSchedule, tick, now int64) (tickOutcome, error) {
	if sp.Missed == string(domain.MissedSkip) && now-tick > domain.ScheduleGrace.Milliseconds() {
		e.log.Info("schedule tick skipped (missed)", "schedule", name, "tick", msTime(tick))
		return tickSkipped, nil
	}
	req := domain.SendRequest{
		ID:      domain.ScheduleMessageID(name, msTime(tick)),
		Payload: sp.Payload, Headers: sp.Headers, MaxAttempts: sp.MaxAttempts, Priority: sp.Priority,
		When: domain.When{DeliverAt: msTime(tick + sp.DelayMS)},
	}
	res, err := e.sendBatch(ctx, sp.Topic, []domain.SendRequest{req}, false) // no topic limit: an admin on "*" made the schedule
	if err == nil {
		err = res[0].Err
	}
	if errors.Is(err, domain.ErrInvalid) || errors.Is(err, domain.ErrTooLarge) {
		e.log.Error("schedule tick not sent: the message is invalid", "schedule", name, "tick", msTime(tick), "err", err)
		return tickRefused, nil
	}
	if err != nil {
		return 0, err
	}
	if res[0].Message.Duplicate {
		return tickDuplicate, nil
	}
	return tickSent, nil
}

// maxCountedMissed bounds the collapsed ticks counted one by one when a
// cron schedule catches up (latest skips ahead without visiting them).
const maxCountedMissed = 10000

// countTick reports a handled tick and the ticks before it that were
// collapsed into it (EventScheduleFired, EventScheduleMissed). A duplicate
// send reports nothing: the engine whose send stored the tick did.
func (e *Engine) countTick(name string, sp *storedSchedule, cs *cronSpec, last, tick, now int64, outcome tickOutcome) {
	if outcome == tickDuplicate {
		return
	}
	if outcome == tickSent {
		e.events.emit(Event{Kind: EventScheduleFired, Topic: sp.Topic, Schedule: name, N: 1, Lateness: time.Duration(now-tick) * time.Millisecond})
	}
	if !e.events.wants(EventScheduleMissed) {
		return
	}
	missed := cs.count(msTime(last), msTime(tick), maxCountedMissed)
	if outcome != tickSent {
		missed++
	}
	if missed > 0 {
		e.events.emit(Event{Kind: EventScheduleMissed, Topic: sp.Topic, Schedule: name, N: missed})
	}
}

func (e *Engine) retrySchedule(ctx context.Context, name, what string, err error) {
	if ctx.Err() != nil || errors.Is(err, store.ErrClosed) || e.isClosing() {
		return
	}
	e.events.storeError("schedule")
	e.log.Error("schedule: "+what, "schedule", name, "err", err)
	e.dispatcher.armSchedule(name, e.now()+retryAfterErr)
}
