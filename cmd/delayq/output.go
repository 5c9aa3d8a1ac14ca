package main

import (
	"encoding/base64"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/wire"
)

// Output of the CLI: --json prints the API's JSON shapes (internal/wire),
// one value per line; otherwise aligned text with relative times.

// now is the CLI's clock for relative times; tests replace it.
var now = time.Now

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// toWireMessage is m as the API answers it (internal/wire's mapping).
func toWireMessage(m *delayq.Message) *wire.Message { return wire.FromMessage(m) }

func toWireMessages(ms []*delayq.Message) []*wire.Message { return wire.FromMessages(ms) }

// toWireTopic is t as the API answers it, its oldest ready age dated now.
func toWireTopic(t *delayq.TopicInfo) wire.Topic { return wire.FromTopicInfo(t, now()) }

// relTime says when t is relative to now: "in 30m", "3s ago", "now".
func relTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return relTimeAt(t, now())
}

func relTimeAt(t, now time.Time) string {
	// Rounded, not truncated: a 30m delay read back a few ms later says
	// "in 30m", not "in 29m59s".
	d := t.Sub(now).Round(time.Second)
	switch {
	case d >= time.Second:
		return "in " + shortDur(d)
	case d <= -time.Second:
		return shortDur(-d) + " ago"
	}
	return "now"
}

// when formats t as "in 30m (2030-01-02T09:00:00.000Z)".
func when(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return relTime(t) + " (" + t.UTC().Format(timeLayout) + ")"
}

// shortDur is d truncated to the second (the hour past a day, the day
// past a year), without zero tails: "29m59s", "2h30m", "3d4h", "6y336d".
func shortDur(d time.Duration) string {
	if d >= year {
		y, days := d/year, (d%year)/day
		if days == 0 {
			return fmt.Sprintf("%dy", y)
		}
		return fmt.Sprintf("%dy%dd", y, days)
	}
	if d >= 24*time.Hour {
		days := d / (24 * time.Hour)
		h := (d % (24 * time.Hour)) / time.Hour
		if h == 0 {
			return fmt.Sprintf("%dd", days)
		}
		return fmt.Sprintf("%dd%dh", days, h)
	}
	s := d.Truncate(time.Second).String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// payloadText shows a payload on one line: text as is (quoted when it has
// control characters), anything else as base64.
func payloadText(p []byte) string {
	if !utf8.Valid(p) {
		return "base64:" + base64.StdEncoding.EncodeToString(p)
	}
	s := string(p)
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsControl(r) }) >= 0 {
		return strconv.Quote(s)
	}
	return s
}

func headersText(h map[string]string) string {
	if len(h) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + h[k]
	}
	return strings.Join(parts, " ")
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func table(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// printMessage writes a message as aligned "key  value" lines.
func printMessage(w io.Writer, m *delayq.Message) {
	tw := table(w)
	fmt.Fprintf(tw, "topic\t%s\n", m.Topic)
	fmt.Fprintf(tw, "id\t%s\n", m.ID)
	fmt.Fprintf(tw, "state\t%s\n", m.State)
	fmt.Fprintf(tw, "deliver at\t%s\n", when(m.DeliverAt))
	fmt.Fprintf(tw, "attempt\t%d\n", m.Attempt)
	fmt.Fprintf(tw, "failures\t%d of %d\n", m.Failures, m.MaxAttempts)
	fmt.Fprintf(tw, "priority\t%d\n", m.Priority)
	fmt.Fprintf(tw, "last error\t%s\n", dashIfEmpty(m.LastError))
	if !m.LeaseExpiresAt.IsZero() {
		fmt.Fprintf(tw, "lease expires\t%s\n", when(m.LeaseExpiresAt))
	}
	fmt.Fprintf(tw, "created\t%s\n", when(m.CreatedAt))
	fmt.Fprintf(tw, "updated\t%s\n", when(m.UpdatedAt))
	fmt.Fprintf(tw, "headers\t%s\n", headersText(m.Headers))
	fmt.Fprintf(tw, "payload\t%s\n", payloadText(m.Payload))
	_ = tw.Flush()
}
