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
	register("dead", "dead letters: dead list|replay|purge TOPIC [ID] [--all]", runDead)
}

const deadSynopsis = "dead list TOPIC [--limit N] [--cursor C] | dead replay TOPIC (ID | --all) | dead purge TOPIC (ID | --all)"

func runDead(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := newCLI("dead", deadSynopsis, stdout, stderr)
	all := c.fs.Bool("all", false, "replay or purge every dead message of the topic")
	limit := c.fs.Int("limit", 100, "list: messages per page")
	cursor := c.fs.String("cursor", "", "list: continue after this page `cursor`")
	pos, code, ok := c.parse(args, 2, 3)
	if !ok {
		return code
	}
	action, topic := pos[0], pos[1]
	var id string
	if len(pos) == 3 {
		id = pos[2]
	}
	switch action {
	case "list":
		if id != "" || *all {
			return c.usageErr("list takes no ID and no --all; usage: delayq %s", deadSynopsis)
		}
	case "replay", "purge":
		if (id == "") == !*all {
			return c.usageErr("%s needs an ID or --all (not both)", action)
		}
	default:
		return c.usageErr("unknown action %q; want list, replay or purge", action)
	}
	c.subject = "topic " + topic
	if id != "" {
		c.subject = "dead message " + topic + "/" + id
	}
	cl, code, ok := c.client()
	if !ok {
		return code
	}
	switch {
	case action == "list":
		return c.deadList(ctx, cl, topic, delayq.DeadListRequest{Limit: *limit, Cursor: *cursor})
	case action == "replay" && id != "":
		m, err := cl.DeadReplay(ctx, topic, id)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(toWireMessage(m))
		}
		fmt.Fprintf(stdout, "replayed %s/%s: %s, due %s\n", topic, id, m.State, when(m.DeliverAt))
	case action == "replay":
		n, err := cl.DeadReplayAll(ctx, topic)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: n})
		}
		fmt.Fprintf(stdout, "replayed %d dead messages of %s\n", n, topic)
	case id != "":
		if err := cl.DeadDelete(ctx, topic, id); err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: 1})
		}
		fmt.Fprintf(stdout, "purged %s/%s\n", topic, id)
	default:
		n, err := cl.DeadPurge(ctx, topic)
		if err != nil {
			return c.fail(err)
		}
		if c.json {
			return c.printJSON(wire.CountResponse{Count: n})
		}
		fmt.Fprintf(stdout, "purged %d dead messages of %s\n", n, topic)
	}
	return exitOK
}

func (c *cliCmd) deadList(ctx context.Context, cl *delayq.Client, topic string, req delayq.DeadListRequest) int {
	page, err := cl.DeadList(ctx, topic, req)
	if err != nil {
		return c.fail(err)
	}
	if c.json {
		return c.printJSON(wire.DeadPage{Messages: toWireMessages(page.Messages), Next: page.Next})
	}
	tw := table(c.stdout)
	fmt.Fprintln(tw, "ID\tFAILURES\tDIED\tLAST ERROR")
	for _, m := range page.Messages {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\n", m.ID, m.Failures, relTime(m.UpdatedAt), dashIfEmpty(strings.ReplaceAll(m.LastError, "\n", " ")))
	}
	_ = tw.Flush()
	if page.Next != "" {
		fmt.Fprintf(c.stdout, "more: delayq dead list %s --cursor %s\n", topic, page.Next)
	}
	return exitOK
}
