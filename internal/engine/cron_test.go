package engine

import (
	"testing"
	"time"
)

func mustCron(t *testing.T, expr, tz string) *cronSpec {
	t.Helper()
	c, err := parseCron(expr, tz)
	if err != nil {
		t.Fatalf("parseCron(%q, %q): %v", expr, tz, err)
	}
	return c
}

// ticks lists the ticks in (from, to].
func ticks(c *cronSpec, from, to time.Time) []time.Time {
	var out []time.Time
	for t := c.next(from); !t.IsZero() && !t.After(to); t = c.next(t) {
		out = append(out, t)
	}
	return out
}

func fmtTicks(ts []time.Time, loc *time.Location) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.In(loc).Format("01-02 15:04 MST")
	}
	return out
}

func TestCronDST(t *testing.T) {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	at := func(mo time.Month, d, h, m int) time.Time { return time.Date(2026, mo, d, h, m, 0, 0, ny) }
	cases := []struct {
		name, expr string
		from, to   time.Time
		want       []string
	}{
		// Spring forward 2026-03-08 02:00 EST -> 03:00 EDT: 02:30 does not
		// exist; it fires once, shifted by the jump (robfig alone skips
		// the day).
		{"spring skipped time fires once", "30 2 * * *", at(3, 7, 0, 0), at(3, 9, 23, 0),
			[]string{"03-07 02:30 EST", "03-08 03:30 EDT", "03-09 02:30 EDT"}},
		{"spring unaffected time", "30 1 * * *", at(3, 7, 12, 0), at(3, 9, 12, 0),
			[]string{"03-08 01:30 EST", "03-09 01:30 EDT"}},
		// Fall back 2026-11-01 02:00 EDT -> 01:00 EST: 01:30 happens twice;
		// it fires once, at the first (robfig alone fires both).
		{"fall repeated time fires once", "30 1 * * *", at(10, 31, 12, 0), at(11, 2, 12, 0),
			[]string{"11-01 01:30 EDT", "11-02 01:30 EST"}},
		{"fall after the repeated hour", "30 2 * * *", at(10, 31, 12, 0), at(11, 2, 12, 0),
			[]string{"11-01 02:30 EST", "11-02 02:30 EST"}},
		{"every 30 min across spring forward", "*/30 * * * *", at(3, 8, 1, 0), at(3, 8, 4, 0),
			[]string{"03-08 01:30 EST", "03-08 03:00 EDT", "03-08 03:30 EDT", "03-08 04:00 EDT"}},
		{"every 30 min across fall back", "*/30 * * * *", at(11, 1, 0, 0), at(11, 1, 2, 30),
			[]string{"11-01 00:30 EDT", "11-01 01:00 EDT", "11-01 01:30 EDT", "11-01 02:00 EST", "11-01 02:30 EST"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cs := mustCron(t, c.expr, "America/New_York")
			got := fmtTicks(ticks(cs, c.from, c.to), ny)
			if len(got) != len(c.want) {
				t.Fatalf("ticks %v, want %v", got, c.want)
			}
			for i := range got {
				if got[i] != c.want[i] {
					t.Fatalf("ticks %v, want %v", got, c.want)
				}
			}
		})
	}
}

func TestCronEveryAndLatest(t *testing.T) {
	c := mustCron(t, "@every 10m", "")
	from := time.Date(2026, 1, 1, 12, 0, 0, 123e6, time.UTC)
	if got := c.next(from); !got.Equal(time.Date(2026, 1, 1, 12, 10, 0, 0, time.UTC)) {
		t.Errorf("next = %v", got)
	}
	now := from.Add(95 * time.Minute)
	if got := c.latest(from, now); !got.Equal(time.Date(2026, 1, 1, 13, 30, 0, 0, time.UTC)) {
		t.Errorf("latest = %v", got)
	}
	if got := c.latest(from, from.Add(5*time.Minute)); !got.IsZero() {
		t.Errorf("latest before the first tick = %v", got)
	}
	// latest of a minute schedule after a year down: fast, and exact.
	m := mustCron(t, "* * * * *", "Europe/Paris")
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	now = time.Date(2026, 2, 3, 4, 5, 30, 0, time.UTC)
	if got := m.latest(start, now); !got.Equal(time.Date(2026, 2, 3, 4, 5, 0, 0, time.UTC)) {
		t.Errorf("latest minute = %v", got)
	}
	y := mustCron(t, "@yearly", "")
	if got := y.latest(start, now); !got.Equal(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Errorf("latest yearly = %v", got)
	}
}

func TestCronInvalid(t *testing.T) {
	for _, c := range []struct{ expr, tz string }{
		{"", ""}, {"* * * *", ""}, {"0 0 * * * *", ""}, {"TZ=UTC 0 * * * *", ""}, {"61 * * * *", ""},
		{"@every 100ms", ""}, {"@every 1500ms", ""}, {"@every nope", ""}, {"@sometimes", ""},
		{"0 * * * *", "Mars/Olympus"}, {"0 * * * *", "Local"},
	} {
		if _, err := parseCron(c.expr, c.tz); err == nil {
			t.Errorf("parseCron(%q, %q): no error", c.expr, c.tz)
		}
	}
}

// TestCronCount: count is the number of ticks strictly between its bounds,
// exact for @every, capped for cron expressions.
func TestCronCount(t *testing.T) {
	at := func(h, m int) time.Time { return time.Date(2026, 5, 1, h, m, 0, 0, time.UTC) }
	hourly := mustCron(t, "0 * * * *", "")
	every := mustCron(t, "@every 10m", "")
	for _, c := range []struct {
		name          string
		spec          *cronSpec
		after, before time.Time
		limit, want   int
	}{
		{"hourly, none between", hourly, at(10, 0), at(11, 0), 100, 0},
		{"hourly, four between", hourly, at(10, 0), at(15, 0), 100, 4},
		{"hourly, from a non-tick", hourly, at(10, 20), at(15, 0), 100, 4},
		{"hourly, capped", hourly, at(10, 0), at(15, 0), 2, 2},
		{"hourly, empty range", hourly, at(15, 0), at(10, 0), 100, 0},
		{"every, none between", every, at(10, 0), at(10, 10), 100, 0},
		{"every, exact past the limit", every, at(10, 0), at(15, 0), 2, 29},
		{"every, to a non-tick", every, at(10, 0), at(10, 25), 100, 2},
	} {
		if got := c.spec.count(c.after, c.before, c.limit); got != c.want {
			t.Errorf("%s: count = %d, want %d", c.name, got, c.want)
		}
	}
}
