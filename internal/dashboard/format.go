package dashboard

import (
	"fmt"
	"strings"
	"time"
)

// fmtTime shows a time in UTC to the millisecond, or "—" for zero.
func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "—"
	}
	return t.UTC().Format("2006-01-02 15:04:05.000Z")
}

// fmtRel shows t relative to now: "in 4m 3s", "12s ago", "now".
func fmtRel(t, now time.Time) string {
	if t.IsZero() {
		return "—"
	}
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + fmtAge(d)
	}
	return fmtAge(-d) + " ago"
}

// fmtAge shows a duration coarsely, with its two largest units.
func fmtAge(d time.Duration) string {
	if d < 0 {
		d = -d
	}
	units := []struct {
		n    time.Duration
		name string
	}{{24 * time.Hour, "d"}, {time.Hour, "h"}, {time.Minute, "m"}, {time.Second, "s"}}
	var parts []string
	for _, u := range units {
		if d >= u.n || (len(parts) == 0 && u.n == time.Second) {
			parts = append(parts, fmt.Sprintf("%d%s", d/u.n, u.name))
			d %= u.n
			if len(parts) == 2 {
				break
			}
		} else if len(parts) > 0 {
			break
		}
	}
	return strings.Join(parts, " ")
}

// fmtLat shows a lateness with a unit that fits: 0, 740µs, 3.2ms, 1.25s.
func fmtLat(d time.Duration) string {
	switch {
	case d <= 0:
		return "0"
	case d < time.Millisecond:
		return fmt.Sprintf("%dµs", d/time.Microsecond)
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%dms", d/time.Millisecond)
	case d < time.Minute:
		return fmt.Sprintf("%.2fs", d.Seconds())
	}
	return fmtAge(d)
}

// fmtDur shows a setting's duration the way it can be typed back ("30s").
func fmtDur(d time.Duration) string {
	if d == 0 {
		return ""
	}
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

// fmtRate shows a per-minute rate.
func fmtRate(r float64) string {
	switch {
	case r == 0:
		return "0"
	case r < 10:
		return fmt.Sprintf("%.1f", r)
	}
	return fmt.Sprintf("%.0f", r)
}

func joinNonEmpty(sep string, parts ...string) string {
	var out []string
	for _, p := range parts {
		if p != "" {
			out = append(out, p)
		}
	}
	return strings.Join(out, sep)
}
