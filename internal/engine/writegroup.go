package engine

import (
	"context"
	"errors"
	"sync"

	"github.com/delayq/delayq/internal/domain"
)

// Group commit, for stores on a server of their own (those that implement
// store.Pinger: PostgreSQL, MySQL, Redis). There every write is a round
// trip and a commit (a transaction, a script with its own fsync under
// appendfsync always); 64 callers each sending or acking one message were
// 64 of them. A topic's sends, and its acks, that arrive while its
// previous write of that kind is in flight wait for it and then go out
// together, as one MessageInsertMany or MessageAckMany. A call that finds
// no write in flight goes out at once: a quiet topic waits for nothing,
// and a busy one waits at most one write more. The embedded store is left
// alone: it already overlaps concurrent inserts to a topic and shares one
// WAL fsync among them, and grouping them as well only made a paced
// send's answer later.
const (
	// groupMaxItems and groupMaxBytes bound one grouped write: a
	// client's largest batch, and what a store writes in one statement
	// comfortably. One caller's items are never split, whatever their size.
	groupMaxItems = domain.MaxBatch
	groupMaxBytes = 4 << 20
)

// errGroupAnswers: a store answered a grouped write with a number of
// results other than its items'.
var errGroupAnswers = errors.New("engine: the store's answer to a grouped write does not have one result per item")

// writeGroup queues one topic's calls of one kind while a write is in
// flight. I is an item written (a message, an ack), R its answer.
type writeGroup[I, R any] struct {
	mu    sync.Mutex
	queue []*groupedCall[I, R]
	// writing: a round is being written; calls queue behind it. One
	// write in flight per topic and kind: on PostgreSQL at 1,000 single
	// sends/s two cost more CPU per message and gave no better tail, and
	// the hand-off to the queue's first caller assumes one writer.
	writing bool
}

// groupedCall is one caller's items in a round, and their answers.
type groupedCall[I, R any] struct {
	ctx   context.Context
	items []I
	res   []R
	err   error
	done  chan struct{}
	// lead is closed when the caller is to write the next round (it is
	// then first in the queue); leading records that under
	// writeGroup.mu, so that a caller who leaves instead passes it on.
	lead    chan struct{}
	leading bool
	// taken: in a round being written (guarded by writeGroup.mu); a
	// caller that gives up before that leaves the queue, unwritten.
	taken bool
}

// groupWriter is what a kind of call does in a group.
type groupWriter[I, R any] struct {
	// size is an item's bytes toward groupMaxBytes.
	size func(I) int
	// key, if set, names what an item writes: a round takes no item whose
	// key it already has (the later call waits for the next round), so
	// two acks of one message stay two writes in their order.
	key func(I) string
	// write writes a round's items and answers each (len(items) answers).
	write func(ctx context.Context, items []I) ([]R, error)
}

// do writes items in one store write with the other calls that queue
// while an earlier write is in flight, and answers items' own results, in
// order. The writing is done by the callers themselves: the first writes
// its round, and hands the next round to the first caller queued
// meanwhile, and so on (no goroutine of its own to outlive the engine). A
// caller whose ctx ends before its round is written is taken out
// unwritten (ctx's error), passing the lead on if it had it; after that
// the write goes on while any caller of the round still waits, and the
// outcome of a caller who left is unknown, as for any call whose answer
// was lost.
func (g *writeGroup[I, R]) do(ctx context.Context, w groupWriter[I, R], items []I) ([]R, error) {
	c := &groupedCall[I, R]{ctx: ctx, items: items, done: make(chan struct{}), lead: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	lead := !g.writing
	g.writing = true
	g.mu.Unlock()
	if lead {
		g.writeRound(w)
	}
	handed := c.lead
	for {
		select {
		case <-c.done:
			return c.res, c.err
		case <-handed:
			handed = nil    // once
			g.writeRound(w) // c is first in the queue: its round
			continue
		case <-ctx.Done():
		}
		break
	}
	g.mu.Lock()
	if !c.taken {
		for i, q := range g.queue {
			if q == c {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
		if c.leading {
			g.handOff()
		}
	}
	g.mu.Unlock()
	select {
	case <-c.done: // answered meanwhile: the answer is known
		return c.res, c.err
	default:
		return nil, ctx.Err()
	}
}

// handOff gives the next round to the first caller queued, or, with none,
// leaves the group idle (the next call leads). g.mu is held.
func (g *writeGroup[I, R]) handOff() {
	if len(g.queue) == 0 {
		g.queue = nil // let the backing array go
		g.writing = false
		return
	}
	next := g.queue[0]
	next.leading = true
	close(next.lead)
}

// writeRound takes the queued calls (in order, up to the bounds), writes
// them in one store call, answers each, and hands the next round on.
func (g *writeGroup[I, R]) writeRound(w groupWriter[I, R]) {
	g.mu.Lock()
	var round []*groupedCall[I, R]
	var keys map[string]bool
	n, size := 0, 0
	for len(g.queue) > 0 {
		c := g.queue[0]
		b := 0
		repeats := false
		for _, it := range c.items {
			b += w.size(it)
			if w.key != nil && keys[w.key(it)] {
				repeats = true
			}
		}
		if len(round) > 0 && (repeats || n+len(c.items) > groupMaxItems || size+b > groupMaxBytes) {
			break
		}
		if w.key != nil {
			if keys == nil {
				keys = map[string]bool{}
			}
			for _, it := range c.items {
				keys[w.key(it)] = true
			}
		}
		c.taken = true
		round = append(round, c)
		n += len(c.items)
		size += b
		g.queue[0] = nil
		g.queue = g.queue[1:]
	}
	g.mu.Unlock()
	if len(round) > 0 {
		writeCalls(w, round, n)
	}
	g.mu.Lock()
	g.handOff()
	g.mu.Unlock()
}

// writeCalls is one round's store write. It runs while any of the round's
// callers waits: its context ends when all of theirs have (and carries
// the first caller's values, e.g. its trace).
func writeCalls[I, R any](w groupWriter[I, R], round []*groupedCall[I, R], n int) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(round[0].ctx))
	defer cancel()
	var mu sync.Mutex
	waiting := len(round)
	for _, c := range round {
		stop := context.AfterFunc(c.ctx, func() {
			mu.Lock()
			waiting--
			if waiting == 0 {
				cancel()
			}
			mu.Unlock()
		})
		defer stop()
	}
	items := round[0].items
	if len(round) > 1 {
		items = make([]I, 0, n)
		for _, c := range round {
			items = append(items, c.items...)
		}
	}
	res, err := w.write(ctx, items)
	if err == nil && len(res) != len(items) {
		err = errGroupAnswers
	}
	off := 0
	for _, c := range round {
		if err != nil {
			c.err = err
		} else {
			c.res = res[off : off+len(c.items) : off+len(c.items)]
			off += len(c.items)
		}
		close(c.done)
	}
}
