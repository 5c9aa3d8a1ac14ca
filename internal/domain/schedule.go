package domain

import (
	"context"
	"strconv"
	"time"
)

// Scheduler manages recurring schedules: named cron expressions that send
// one message per tick (see docs/features.md, "Recurring schedules"). The
// embedded engine, the Redis engine and the HTTP Client implement it. It is
// separate from Queue so that Queue stays stable.
//
// Implementations are safe for concurrent use.
type Scheduler interface {
	// ScheduleSet creates or replaces a schedule and returns it with
	// LastTick and NextTick filled in.
	ScheduleSet(ctx context.Context, s Schedule) (*Schedule, error)
	// ScheduleGet returns one schedule, or ErrNotFound.
	ScheduleGet(ctx context.Context, name string) (*Schedule, error)
	// ScheduleList returns every schedule, sorted by name.
	ScheduleList(ctx context.Context) ([]Schedule, error)
	// ScheduleDelete removes a schedule (ErrNotFound if unknown). Messages
	// it already sent stay.
	ScheduleDelete(ctx context.Context, name string) error
	// SchedulePause pauses (true) or resumes (false) a schedule. Ticks that
	// fall while it is paused are skipped, not made up on resume.
	SchedulePause(ctx context.Context, name string, paused bool) (*Schedule, error)
}

// MissedPolicy says what a schedule does with ticks that fell while no
// server could fire them (all servers down).
type MissedPolicy string

const (
	// MissedFireOnce (the default) sends one message for the latest missed
	// tick, however many were missed.
	MissedFireOnce MissedPolicy = "fire-once"
	// MissedSkip drops ticks more than ScheduleGrace late.
	MissedSkip MissedPolicy = "skip"
)

// ScheduleGrace is how late a tick may fire and still count as on time
// under MissedSkip (a restart that takes a few seconds skips nothing).
const ScheduleGrace = time.Minute

// Schedule is a recurring message: every tick of Cron in Timezone, one
// message with the template below is sent to Topic, with the id
// "sched.<name>.<tick in Unix ms>", so that several servers (and a server
// restarted mid-tick) produce exactly one message per tick.
type Schedule struct {
	// Name: 1–150 chars of [A-Za-z0-9._:-].
	Name  string
	Topic string
	// Cron is a standard 5-field expression ("30 2 * * *"), a descriptor
	// (@hourly, @daily, @weekly, @monthly, @yearly) or "@every <duration>"
	// (at least 1s).
	Cron string
	// Timezone is an IANA name ("America/New_York"); empty means UTC.
	// Ticks are local wall-clock times: a time skipped by a DST jump fires
	// once, shifted by the jump (02:30 → 03:30), and a time repeated by a
	// fall-back fires once, at its first occurrence. @every is absolute.
	Timezone string

	// The message template.
	Payload     []byte
	Headers     map[string]string
	MaxAttempts int           // 0: the topic's setting
	Delay       time.Duration // deliver this long after the tick
	Priority    int           // each message's priority (see SendRequest.Priority)

	Paused bool
	Missed MissedPolicy // empty: MissedFireOnce

	// Set by the server, ignored on input.
	LastTick  time.Time // the latest tick handled (fired or skipped)
	NextTick  time.Time // zero when paused
	CreatedAt time.Time
	UpdatedAt time.Time
}

// MaxScheduleNameLen bounds schedule names so that message ids
// ("sched." + name + "." + 13 digits) stay within MaxNameLen.
const MaxScheduleNameLen = 150

// ValidateScheduleName checks a schedule name: 1–150 chars of [A-Za-z0-9._:-].
func ValidateScheduleName(name string) error {
	if len(name) > MaxScheduleNameLen {
		return Invalid("name", "is %d bytes, the limit is %d", len(name), MaxScheduleNameLen)
	}
	if err := validateName("name", name, IsTopicByte); err != nil {
		return err
	}
	return nil
}

// ScheduleMessageID is the id of the message a schedule sends for a tick.
func ScheduleMessageID(name string, tick time.Time) string {
	return "sched." + name + "." + strconv.FormatInt(tick.UnixMilli(), 10)
}
