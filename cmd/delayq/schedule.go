package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/delayq/delayq"
	"github.com/delayq/delayq/internal/wire"
)

func init() {
	register("schedule", "recurring schedules: schedule set|list|get|delete|pause|resume", runSchedule)
}

// scheduleSynopsis is one line: usage errors quote it. CRON is 5 fields
// ("30 2 * * *"), a descriptor (@daily) or "@every 10m".
const scheduleSynopsis = `schedule set NAME TOPIC CRON [PAYLOAD|-] [--timezone ZONE] [--delay D] [--header k=v]... [--max-attempts N] [--priority N] [--missed fire-once|skip] [--paused] | list | get NAME | delete NAME | pause NAME | resume NAME`

// runSchedule: delayq schedule ACTION [args]. set replaces the whole
// schedule (PUT); pause and resume change only the paused flag (PATCH).
func runSchedule(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("schedule", scheduleSynopsis, stdout, stderr)
	tz := c.fs.String("timezone", "", "set: IANA `zone` of the cron (default UTC)")
	delay := c.fs.Duration("delay", 0, "set: deliver each message this `long` after its tick")
	headers := headerFlag{}
	c.fs.Var(headers, "header", "set: message header `key=value` (repeatable)")
	maxAttempts := c.fs.Int("max-attempts", 0, "set: failures before a message goes dead (default: the topic's)")
	priority := c.fs.Int("priority", 0, "set: each message's priority, 0 (the most urgent, default) to 255")
	missed := c.fs.String("missed", "", "set: ticks missed while no server ran: fire-once (default) or skip")
	paused := c.fs.Bool("paused", false, "set: create the schedule paused")
	pos, code, ok := c.parse(args, 1, 5)
	if !ok {
		return code
	}
	action := pos[0]
	want := map[string][2]int{"set": {4, 5}, "list": {1, 1}, "get": {2, 2}, "delete": {2, 2}, "pause": {2, 2}, "resume": {2, 2}}
	n, known := want[action]
	switch {
	case !known:
		return c.usageErr("unknown action %q; want set, list, get, delete, pause or resume", action)
	case len(pos) < n[0] || len(pos) > n[1]:
		return c.usageErr("wrong arguments for %s; usage: delayq %s", action, scheduleSynopsis)
	}
	if len(pos) > 1 {
		c.subject = "schedule " + pos[1]
	}
	var s delayq.Schedule
	if action == "set" {
		s = delayq.Schedule{Name: pos[1], Topic: pos[2], Cron: pos[3], Timezone: *tz, Delay: *delay,
			MaxAttempts: *maxAttempts, Priority: *priority, Missed: delayq.MissedPolicy(*missed), Paused: *paused}
		if len(headers) > 0 {
			s.Headers = headers
		}
		if len(pos) == 5 {
			s.Payload = []byte(pos[4])
			if pos[4] == "-" {
				var err error
				if s.Payload, err = io.ReadAll(io.LimitReader(stdin, 64<<20)); err != nil {
					return c.usageErr("read payload from standard input: %v", err)
				}
			}
		}
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	var out *delayq.Schedule
	var err error
	switch action {
	case "list":
		list, err := cl.ScheduleList(ctx)
		if err != nil {
			return c.fail(err)
		}
		return c.printSchedules(list)
	case "delete":
		if err := cl.ScheduleDelete(ctx, pos[1]); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: 1})
		}
		fmt.Fprintf(stdout, "deleted schedule %s\n", pos[1])
		return exitOK
	case "set":
		out, err = cl.ScheduleSet(ctx, s)
	case "get":
		out, err = cl.ScheduleGet(ctx, pos[1])
	case "pause", "resume":
		out, err = cl.SchedulePause(ctx, pos[1], action == "pause")
	}
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(scheduleJSON(out))
	}
	printSchedule(stdout, out)
	return exitOK
}

func (c *cliCmd) printSchedules(list []delayq.Schedule) int {
	if c.json {
		out := wire.SchedulesResponse{Schedules: make([]wire.Schedule, len(list))}
		for i := range list {
			out.Schedules[i] = scheduleJSON(&list[i])
		}
		return c.printJSON(out)
	}
	tw := table(c.stdout)
	fmt.Fprintln(tw, "NAME\tTOPIC\tCRON\tZONE\tSTATE\tNEXT TICK\tLAST TICK")
	for _, s := range list {
		state := "active"
		if s.Paused {
			state = "paused"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Topic, s.Cron, dashIfEmpty(s.Timezone), state, tickText(s.NextTick), tickText(s.LastTick))
	}
	_ = tw.Flush()
	return exitOK
}

func printSchedule(w io.Writer, s *delayq.Schedule) {
	tw := table(w)
	fmt.Fprintf(tw, "name\t%s\n", s.Name)
	fmt.Fprintf(tw, "topic\t%s\n", s.Topic)
	fmt.Fprintf(tw, "cron\t%s\n", s.Cron)
	fmt.Fprintf(tw, "timezone\t%s\n", dashIfEmpty(s.Timezone))
	fmt.Fprintf(tw, "paused\t%v\n", s.Paused)
	fmt.Fprintf(tw, "missed\t%s\n", s.Missed)
	fmt.Fprintf(tw, "next tick\t%s\n", tickText(s.NextTick))
	fmt.Fprintf(tw, "last tick\t%s\n", tickText(s.LastTick))
	if s.Delay > 0 {
		fmt.Fprintf(tw, "delay\t%s\n", humanDur(s.Delay))
	}
	if s.MaxAttempts > 0 {
		fmt.Fprintf(tw, "max attempts\t%d\n", s.MaxAttempts)
	}
	if s.Priority > 0 {
		fmt.Fprintf(tw, "priority\t%d\n", s.Priority)
	}
	if len(s.Headers) > 0 {
		fmt.Fprintf(tw, "headers\t%s\n", headersText(s.Headers))
	}
	fmt.Fprintf(tw, "payload\t%s\n", payloadText(s.Payload))
	_ = tw.Flush()
}

func tickText(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return when(t)
}

// scheduleJSON is the API's JSON shape of a schedule (internal/wire's mapping).
func scheduleJSON(s *delayq.Schedule) wire.Schedule { return *wire.FromSchedule(s) }
