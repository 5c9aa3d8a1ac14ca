package engine

import (
	"strings"
	"time"
	_ "time/tzdata" // zones for hosts without /usr/share/zoneinfo

	"github.com/robfig/cron/v3"

	"github.com/delayq/delayq/internal/domain"
)

// cronParser reads standard 5-field expressions and descriptors (@daily,
// @every 10m, …).
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// cronSpec is a parsed schedule expression in a time zone. It is
// immutable and safe for concurrent use.
//
// # DST
//
// robfig/cron walks absolute time in the zone, so on a spring-forward day
// it never fires a time in the skipped hour ("30 2 * * *" misses a day),
// and on a fall-back day it fires a time in the repeated hour twice. We
// want each local time to fire exactly once, so we evaluate the expression
// on wall-clock time instead (the zone's local fields, labelled UTC, where
// every wall time exists exactly once) and map each wall time back to an
// instant with resolve: a repeated wall time maps to its first occurrence
// after the previous tick, and a skipped one to the instant the jump
// shifts it to (02:30 → 03:30, the same offset past the jump). "@every"
// is an absolute interval and ignores zones.
type cronSpec struct {
	loc   *time.Location
	every time.Duration // @every: absolute interval (whole seconds)
	wall  cron.Schedule // else: the expression, on wall-clock time
}

// parseCron parses expr in zone tz ("" is UTC).
const (
	maxCronLen = 256
	maxZoneLen = 64
)

func parseCron(expr, tz string) (*cronSpec, error) {
	// Five fields of lists and ranges fit easily; the bound keeps an
	// unbounded string out of the store and out of error messages.
	if len(expr) > maxCronLen {
		return nil, domain.Invalid("cron", "is %d bytes, the limit is %d", len(expr), maxCronLen)
	}
	if len(tz) > maxZoneLen {
		return nil, domain.Invalid("timezone", "is %d bytes, the limit is %d", len(tz), maxZoneLen)
	}
	expr = strings.TrimSpace(expr)
	if strings.HasPrefix(expr, "TZ=") || strings.HasPrefix(expr, "CRON_TZ=") {
		return nil, domain.Invalid("cron", "give the zone in timezone, not as a TZ= prefix")
	}
	loc := time.UTC
	if tz != "" {
		var err error
		if tz == "Local" || strings.ContainsAny(tz, " \\") {
			return nil, domain.Invalid("timezone", "must be an IANA zone name such as \"Europe/Paris\"")
		}
		if loc, err = time.LoadLocation(tz); err != nil {
			return nil, domain.Invalid("timezone", "is not a known IANA zone: %q", tz)
		}
	}
	if rest, ok := strings.CutPrefix(expr, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil || d < time.Second || d%time.Second != 0 {
			return nil, domain.Invalid("cron", "@every needs a whole number of seconds, at least 1s (e.g. \"@every 10m\")")
		}
		return &cronSpec{loc: loc, every: d}, nil
	}
	sched, err := cronParser.Parse(expr)
	if err != nil {
		return nil, domain.Invalid("cron", "%v (want 5 fields \"min hour dom month dow\", a descriptor such as @daily, or @every 10m)", err)
	}
	return &cronSpec{loc: loc, wall: sched}, nil
}

// next returns the first tick strictly after `after`, or the zero time if
// there is none within five years (an expression such as "0 0 30 2 *").
func (c *cronSpec) next(after time.Time) time.Time {
	if c.every > 0 {
		ms := after.UnixMilli()
		return time.UnixMilli(floorDiv(ms, 1000)*1000 + c.every.Milliseconds()).UTC()
	}
	a := after.In(c.loc)
	w := time.Date(a.Year(), a.Month(), a.Day(), a.Hour(), a.Minute(), a.Second(), a.Nanosecond(), time.UTC)
	for range 100 { // a wall time is skipped only when all its instants are <= after
		if w = c.wall.Next(w); w.IsZero() {
			return time.Time{}
		}
		if t, ok := c.resolve(w, after); ok {
			return t.UTC()
		}
	}
	return time.Time{}
}

// resolve maps wall-clock time w (local fields labelled UTC) to the
// earliest instant after `after` that reads w in the zone; a wall time
// skipped by a forward jump maps to the instant the jump shifts it to.
func (c *cronSpec) resolve(w, after time.Time) (time.Time, bool) {
	t0 := time.Date(w.Year(), w.Month(), w.Day(), w.Hour(), w.Minute(), w.Second(), 0, c.loc)
	var best, shifted time.Time
	exists := false
	seen := map[int]bool{}
	for _, probe := range [...]time.Time{t0.Add(-12 * time.Hour), t0, t0.Add(12 * time.Hour)} {
		_, off := probe.Zone()
		if seen[off] {
			continue
		}
		seen[off] = true
		u := w.Add(-time.Duration(off) * time.Second)
		if u.After(shifted) {
			shifted = u // with the offset before a forward jump: the latest candidate
		}
		if !sameWall(u.In(c.loc), w) {
			continue
		}
		exists = true
		if u.After(after) && (best.IsZero() || u.Before(best)) {
			best = u
		}
	}
	if !exists {
		return shifted, shifted.After(after)
	}
	return best, !best.IsZero()
}

func sameWall(a, w time.Time) bool {
	return a.Year() == w.Year() && a.YearDay() == w.YearDay() && a.Hour() == w.Hour() && a.Minute() == w.Minute() && a.Second() == w.Second()
}

// latest returns the latest tick t with after < t <= now (zero if none).
// It skips ahead through widening windows before now, so a schedule that
// was idle for years costs a few steps, not one per missed tick.
func (c *cronSpec) latest(after, now time.Time) time.Time {
	t := c.next(after)
	if t.IsZero() || t.After(now) {
		return time.Time{}
	}
	if c.every > 0 {
		k := now.Sub(t) / c.every
		return t.Add(k * c.every)
	}
	for _, w := range [...]time.Duration{time.Hour, 25 * time.Hour, 32 * 24 * time.Hour, 367 * 24 * time.Hour} {
		from := now.Add(-w)
		if !from.After(t) {
			break
		}
		if u := c.next(from); !u.IsZero() && !u.After(now) {
			t = u
			break
		}
	}
	for {
		u := c.next(t)
		if u.IsZero() || u.After(now) {
			return t
		}
		t = u
	}
}

// count returns how many ticks t have after < t < before: exactly for
// @every, else up to limit (it visits each one).
func (c *cronSpec) count(after, before time.Time, limit int) int {
	t := c.next(after)
	if t.IsZero() || !t.Before(before) {
		return 0
	}
	if c.every > 0 {
		return int((before.Sub(t)-1)/c.every) + 1
	}
	n := 0
	for ; !t.IsZero() && t.Before(before) && n < limit; t = c.next(t) {
		n++
	}
	return n
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
