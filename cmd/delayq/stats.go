package main

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/wire"
)

func init() {
	register("stats", "counts per state, next due time and lag: stats [TOPIC]", runStats)
	register("topics", "list topic names, one per line", runTopics)
}

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("stats", "stats [TOPIC] [--json]", stdout, stderr)
	pos, code, ok := c.parse(args, 0, 1)
	if !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	if len(pos) == 1 {
		c.subject = "topic " + pos[0]
		t, err := cl.Topic(ctx, pos[0])
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(toWireTopic(t))
		}
		printTopic(stdout, t)
		return exitOK
	}
	topics, err := cl.Topics(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		out := wire.TopicsResponse{Topics: make([]wire.Topic, len(topics))}
		for i := range topics {
			out.Topics[i] = toWireTopic(&topics[i])
		}
		return c.printJSON(out)
	}
	tw := table(stdout)
	fmt.Fprintln(tw, "TOPIC\tSCHEDULED\tREADY\tINFLIGHT\tDEAD\tNEXT DUE\tOLDEST READY")
	for _, t := range topics {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%s\t%s\n", t.Name, t.Counts.Scheduled, t.Counts.Ready, t.Counts.Inflight, t.Counts.Dead, relTime(t.NextDue), relTime(t.OldestReady))
	}
	_ = tw.Flush()
	return exitOK
}

func printTopic(w io.Writer, t *delayq.TopicInfo) {
	tw := table(w)
	fmt.Fprintf(tw, "topic\t%s\n", t.Name)
	fmt.Fprintf(tw, "scheduled\t%d\n", t.Counts.Scheduled)
	fmt.Fprintf(tw, "ready\t%d\n", t.Counts.Ready)
	fmt.Fprintf(tw, "inflight\t%d\n", t.Counts.Inflight)
	fmt.Fprintf(tw, "dead\t%d\n", t.Counts.Dead)
	fmt.Fprintf(tw, "next due\t%s\n", when(t.NextDue))
	fmt.Fprintf(tw, "oldest ready\t%s\n", when(t.OldestReady))
	s := t.Settings
	fmt.Fprintf(tw, "max attempts\t%d\n", s.MaxAttempts)
	fmt.Fprintf(tw, "lease\t%s\n", humanDur(s.Lease))
	b := s.Backoff
	fmt.Fprintf(tw, "backoff\t%s ×%g up to %s, jitter ±%g%%\n", humanDur(b.Initial), b.Multiplier, humanDur(b.Max), b.Jitter*100)
	if r := s.RateLimit; r != nil {
		fmt.Fprintf(tw, "rate limit\t%g/s, burst %d\n", r.PerSecond, r.Burst)
	}
	if p := s.Push; p != nil {
		fmt.Fprintf(tw, "push\t%s (timeout %s, concurrency %d)\n", p.URL, humanDur(p.Timeout), p.Concurrency)
	}
	if d := s.Deliver; d != nil {
		// Endpoint is redacted: no credentials on screen.
		fmt.Fprintf(tw, "deliver\t%s (max in flight %d, timeout %s)\n", d.Endpoint(), d.MaxInFlight, d.Timeout)
	}
	_ = tw.Flush()
}

func runTopics(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("topics", "topics [--json]", stdout, stderr)
	if _, code, ok := c.parse(args, 0, 0); !ok {
		return code
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	topics, err := cl.Topics(ctx)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		out := wire.TopicsResponse{Topics: make([]wire.Topic, len(topics))}
		for i := range topics {
			out.Topics[i] = toWireTopic(&topics[i])
		}
		return c.printJSON(out)
	}
	names := make([]string, len(topics))
	for i, t := range topics {
		names[i] = t.Name
	}
	if len(names) > 0 {
		fmt.Fprintln(stdout, strings.Join(names, "\n"))
	}
	return exitOK
}
