package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// printFlags is fs.PrintDefaults as the docs write flags: "--addr", not
// Go's "-addr" (both parse), with durations in short form ("24h", "10y").
func printFlags(w io.Writer, fs *flag.FlagSet) {
	fs.VisitAll(func(f *flag.Flag) {
		if g, ok := f.Value.(flag.Getter); ok {
			if _, isDur := g.Get().(time.Duration); isDur {
				if d, err := time.ParseDuration(f.DefValue); err == nil {
					f.DefValue = humanDur(d)
				}
			}
		}
	})
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	fs.PrintDefaults()
	fs.SetOutput(io.Discard)
	_, _ = w.Write(flagLine.ReplaceAll(buf.Bytes(), []byte("  --")))
}

var flagLine = regexp.MustCompile(`(?m)^  -`)

// dashDash is a flag package error naming flags as the docs do: "flag
// provided but not defined: --bogus", "invalid value … for flag --delay".
func dashDash(err error) string {
	return flagInErr.ReplaceAllString(err.Error(), "$1 --$2")
}

var flagInErr = regexp.MustCompile(`(flag|defined:|needs an argument:) -([a-z])`)

const (
	day  = 24 * time.Hour
	year = 365 * day
)

// humanDur is d exactly, without zero tails and in days and years where
// they divide it: "30m", "1h", "1h30m", "24h", "10y", "7d". parseDur
// reads it back.
func humanDur(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	neg := ""
	if d < 0 {
		neg, d = "-", -d
	}
	var s string
	switch {
	case d%year == 0:
		s = fmt.Sprintf("%dy", d/year)
	case d >= 2*day && d%day == 0:
		s = fmt.Sprintf("%dd", d/day)
	default:
		s = d.String()
		if strings.HasSuffix(s, "m0s") {
			s = strings.TrimSuffix(s, "0s")
		}
		if strings.HasSuffix(s, "h0m") {
			s = strings.TrimSuffix(s, "0m")
		}
	}
	return neg + s
}

var dayYear = regexp.MustCompile(`^(?:(\d+)y)?(?:(\d+)d)?(.*)$`)

// parseDur is time.ParseDuration that also takes leading whole years
// (365 days) and days: "10y", "7d", "1d12h".
func parseDur(s string) (time.Duration, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return d, nil
	}
	m := dayYear.FindStringSubmatch(s)
	if m == nil || (m[1] == "" && m[2] == "") {
		return 0, fmt.Errorf("%q is not a duration such as 30s, 1h30m, 7d or 10y", s)
	}
	var d time.Duration
	for _, p := range []struct {
		n    string
		unit time.Duration
	}{{m[1], year}, {m[2], day}} {
		if p.n == "" {
			continue
		}
		n, err := strconv.ParseInt(p.n, 10, 64)
		if err != nil || n > int64(math.MaxInt64/p.unit) {
			return 0, fmt.Errorf("%q is too long a duration", s)
		}
		d += time.Duration(n) * p.unit
	}
	if m[3] != "" {
		rest, err := time.ParseDuration(m[3])
		if err != nil || rest < 0 {
			return 0, fmt.Errorf("%q is not a duration such as 30s, 1h30m, 7d or 10y", s)
		}
		d += rest
	}
	if d < 0 {
		return 0, fmt.Errorf("%q is too long a duration", s)
	}
	return d, nil
}

// durValue is a duration flag that reads parseDur's forms and prints
// humanDur's.
type durValue time.Duration

func (d *durValue) String() string { return humanDur(time.Duration(*d)) }

func (d *durValue) Set(s string) error {
	v, err := parseDur(s)
	if err != nil {
		return err
	}
	*d = durValue(v)
	return nil
}

func (d *durValue) Get() any { return time.Duration(*d) }

// durVar defines a duration flag that also takes days and years.
func durVar(fs *flag.FlagSet, p *time.Duration, name string, def time.Duration, usage string) {
	*p = def
	fs.Var((*durValue)(p), name, usage)
}

// Size units: SI (KB = 1000) and IEC (KiB = 1024), case-insensitive.
var sizeUnits = map[string]int64{
	"": 1, "b": 1,
	"kb": 1e3, "mb": 1e6, "gb": 1e9,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
	"k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
}

var sizeRE = regexp.MustCompile(`^(-?\d+(?:\.\d+)?)\s*([A-Za-z]*)$`)

// parseSize reads "1048576", "1MiB", "512 KiB", "1.5MB", "-1".
func parseSize(s string) (int64, error) {
	m := sizeRE.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("%q is not a size such as 1048576, 512KiB, 1MiB or 1MB", s)
	}
	unit, ok := sizeUnits[strings.ToLower(m[2])]
	if !ok {
		return 0, fmt.Errorf("%q: unknown unit %q (B, KB, MB, GB, KiB, MiB, GiB)", s, m[2])
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || math.Abs(n*float64(unit)) >= math.MaxInt64/2 {
		return 0, fmt.Errorf("%q is too large", s)
	}
	v := n * float64(unit)
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%q is not a whole number of bytes", s)
	}
	return int64(v), nil
}

// formatSize is n in the largest IEC unit that divides it: "1MiB", "300".
func formatSize(n int64) string {
	for _, u := range []struct {
		name string
		size int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}} {
		if n != 0 && n%u.size == 0 {
			return fmt.Sprintf("%d%s", n/u.size, u.name)
		}
	}
	return strconv.FormatInt(n, 10)
}

// sizeValue is a byte-size flag (int64) that takes units.
type sizeValue int64

func (v *sizeValue) String() string { return formatSize(int64(*v)) }

func (v *sizeValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	*v = sizeValue(n)
	return nil
}

// sizeIntValue is sizeValue for an int.
type sizeIntValue int

func (v *sizeIntValue) String() string { return formatSize(int64(*v)) }

func (v *sizeIntValue) Set(s string) error {
	n, err := parseSize(s)
	if err != nil {
		return err
	}
	if n > math.MaxInt32 {
		return fmt.Errorf("%q is too large", s)
	}
	*v = sizeIntValue(n)
	return nil
}
