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
	register("messages", "browse or change a topic's messages: messages list|cancel|reschedule TOPIC [--state S] [--due-after T] [--due-before T]", runMessages)
	register("topic", "pause, resume or delete a topic: topic pause|resume|delete TOPIC", runTopic)
}

const messagesSynopsis = "messages list TOPIC --state scheduled|ready|inflight|dead [--due-after TIME] [--due-before TIME] [--limit N] [--cursor C]" +
	" | messages cancel TOPIC [--state scheduled|ready] [--due-after TIME] [--due-before TIME]" +
	" | messages reschedule TOPIC [--state scheduled|ready] [--due-after TIME] [--due-before TIME] (--delay D | --at TIME)"

func runMessages(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("messages", messagesSynopsis, stdout, stderr)
	state := c.fs.String("state", "", "messages in this `state`: scheduled, ready, inflight or dead (list: required; cancel and reschedule: scheduled, ready, or both when absent)")
	after := c.fs.String("due-after", "", "only messages due at or after this RFC 3339 `time`")
	before := c.fs.String("due-before", "", "only messages due before this RFC 3339 `time`")
	limit := c.fs.Int("limit", 100, "list: messages per page (at most 1000)")
	cursor := c.fs.String("cursor", "", "list: continue after this page `cursor`")
	var wf whenFlags
	wf.register(c.fs)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	action, topic := pos[0], pos[1]
	f := delayq.MessageFilter{State: delayq.State(*state)}
	for _, t := range []struct {
		name, v string
		dst     *time.Time
	}{{"due-after", *after, &f.DueAfter}, {"due-before", *before, &f.DueBefore}} {
		if t.v == "" {
			continue
		}
		v, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			return c.usageErr("invalid %s: %q is not an RFC 3339 time such as 2030-01-02T09:00:00Z", t.name, t.v)
		}
		*t.dst = v
	}
	var w delayq.When
	switch action {
	case "list":
		if *state == "" {
			return c.usageErr("list needs --state (scheduled, ready, inflight or dead)")
		}
		if wf.delay != "" || wf.at != "" {
			return c.usageErr("list takes no --delay or --at")
		}
	case "cancel":
		if wf.delay != "" || wf.at != "" {
			return c.usageErr("cancel takes no --delay or --at")
		}
	case "reschedule":
		var err error
		if w, err = wf.when(true); err != nil {
			return c.usageErr("%v", err)
		}
	default:
		return c.usageErr("unknown action %q; want list, cancel or reschedule", action)
	}
	c.subject = "topic " + topic
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	switch action {
	case "list":
		page, err := cl.ListMessages(ctx, topic, delayq.ListRequest{Filter: f, Limit: *limit, Cursor: *cursor})
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.MessagePage{Messages: toWireMessages(page.Messages), Next: page.Next})
		}
		tw := table(stdout)
		fmt.Fprintln(tw, "ID\tSTATE\tDUE\tPRIORITY\tATTEMPTS\tFAILURES")
		for _, m := range page.Messages {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\n", m.ID, m.State, when(m.DeliverAt), m.Priority, m.Attempt, m.Failures)
		}
		_ = tw.Flush()
		if page.Next != "" {
			fmt.Fprintf(stdout, "more: delayq messages list %s --state %s --cursor %s\n", topic, *state, page.Next)
		}
		return exitOK
	case "cancel":
		n, err := cl.CancelMessages(ctx, topic, f)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: n})
		}
		fmt.Fprintf(stdout, "cancelled %d messages of %s\n", n, topic)
	default:
		n, err := cl.RescheduleMessages(ctx, topic, f, w)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: n})
		}
		fmt.Fprintf(stdout, "rescheduled %d messages of %s\n", n, topic)
	}
	return exitOK
}

func runTopic(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("topic", "topic pause|resume|delete TOPIC [--json]", stdout, stderr)
	pos, code, ok := c.parse(args, 2, 2)
	if !ok {
		return code
	}
	action, topic := pos[0], pos[1]
	if action != "pause" && action != "resume" && action != "delete" {
		return c.usageErr("unknown action %q; want pause, resume or delete", action)
	}
	c.subject = "topic " + topic
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	if action == "delete" {
		// Only an empty topic: the server answers 409 naming what it holds.
		if err := cl.DeleteTopic(ctx, topic); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: 1})
		}
		fmt.Fprintf(stdout, "deleted topic %s\n", topic)
		return exitOK
	}
	info, err := cl.PauseTopic(ctx, topic, action == "pause")
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(toWireTopic(info))
	}
	state := "resumed"
	if info.Paused {
		state = "paused"
	}
	fmt.Fprintf(stdout, "%s %s: %d scheduled, %d ready, %d inflight, %d dead\n", state, topic,
		info.Counts.Scheduled, info.Counts.Ready, info.Counts.Inflight, info.Counts.Dead)
	return exitOK
}
