package engine

import (
	"context"
	"sync"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
)

// Group commit of sends, for stores on a server of their own (those that
// implement store.Pinger: PostgreSQL, MySQL, Redis). There every write is
// a round trip and a commit (a transaction, a script with its own fsync
// under appendfsync always); 64 callers each sending one message were 64
// of them. Sends to a topic that arrive while its previous write is in
// flight wait for it and then go out together, as one MessageInsertMany.
// A send that finds no write in flight goes out at once: a quiet topic
// waits for nothing, and a busy one waits at most one write more. The
// embedded store is left alone: it already overlaps concurrent inserts to
// a topic and shares one WAL fsync among them, and grouping them as well
// only made a paced send's answer later.
const (
	// groupMaxMessages and groupMaxBytes bound one grouped write: a
	// client's largest batch, and what a store writes in one statement
	// comfortably. A single send is never split, whatever its size.
	groupMaxMessages = domain.MaxBatch
	groupMaxBytes    = 4 << 20
	// groupWriters writes may be in flight per topic before sends queue.
	// One: on PostgreSQL at 1,000 single sends/s, two in flight cost
	// more CPU per message and gave no better tail than one.
	groupWriters = 1
)

// sendGroup queues the sends of one topic while a write is in flight.
type sendGroup struct {
	mu      sync.Mutex
	queue   []*groupedSend
	writers int // goroutines writing rounds; each takes what queues
}

// groupedSend is one caller's messages in a round, and their answer.
type groupedSend struct {
	ctx  context.Context
	msgs []store.InsertMessage
	res  []store.InsertResult
	err  error
	done chan struct{}
	// taken: in a round being written (guarded by sendGroup.mu); a
	// caller that gives up before that leaves the queue, unwritten.
	taken bool
}

// insert writes msgs to topic t: grouped with other sends where the store
// is remote, else at once (now is the sender's).
func (e *Engine) insert(ctx context.Context, t *topic, now int64, msgs []store.InsertMessage) ([]store.InsertResult, error) {
	if e.groupSends {
		return e.insertGrouped(ctx, t, msgs)
	}
	ins, err := e.st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: t.name, Now: now, Messages: msgs})
	if err != nil {
		return nil, err
	}
	e.afterInsert(t, ins)
	return ins, nil
}

// insertGrouped writes msgs to topic t, in one store write with the other
// sends that queue while an earlier write is in flight. Its answer is
// msgs' own results, in order. A caller whose ctx ends before its round is
// written is taken out unwritten (ctx's error); after that the write goes
// on while any caller of the round still waits, and the outcome of a
// caller who left is unknown, as for any send whose answer was lost.
func (e *Engine) insertGrouped(ctx context.Context, t *topic, msgs []store.InsertMessage) ([]store.InsertResult, error) {
	g := &t.sends
	s := &groupedSend{ctx: ctx, msgs: msgs, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, s)
	lead := g.writers < groupWriters
	if lead {
		g.writers++
	}
	g.mu.Unlock()
	if lead {
		// The caller writes the first round itself (no hand-off when the
		// topic is quiet); later rounds, if sends queued meanwhile, go on
		// in the background so that its answer does not wait for them.
		if e.writeRound(t) {
			e.bg.Add(1)
			go func() {
				defer e.bg.Done()
				for e.writeRound(t) {
				}
			}()
		}
	}
	select {
	case <-s.done:
		return s.res, s.err
	case <-ctx.Done():
	}
	g.mu.Lock()
	if !s.taken {
		for i, q := range g.queue {
			if q == s {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
	}
	g.mu.Unlock()
	select {
	case <-s.done: // answered meanwhile: the answer is known
		return s.res, s.err
	default:
		return nil, ctx.Err()
	}
}

// writeRound takes the queued sends (up to the bounds), writes them in one
// store call, and answers each. It reports whether more sends are queued;
// if none, the group is idle again (the next send leads).
func (e *Engine) writeRound(t *topic) bool {
	g := &t.sends
	g.mu.Lock()
	var round []*groupedSend
	n, size := 0, 0
	for len(g.queue) > 0 {
		s := g.queue[0]
		b := 0
		for _, m := range s.msgs {
			b += len(m.Payload)
		}
		if len(round) > 0 && (n+len(s.msgs) > groupMaxMessages || size+b > groupMaxBytes) {
			break
		}
		s.taken = true
		round = append(round, s)
		n += len(s.msgs)
		size += b
		g.queue[0] = nil
		g.queue = g.queue[1:]
	}
	if len(g.queue) == 0 {
		g.queue = nil // let the backing array go
	}
	g.mu.Unlock()
	if len(round) > 0 {
		e.writeSends(t, round, n)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.queue) == 0 {
		g.writers--
		return false
	}
	return true
}

// writeSends is one round's store write. It runs while any of the round's
// callers waits: its context ends when all of theirs have (and carries
// the first caller's values, e.g. its trace).
func (e *Engine) writeSends(t *topic, round []*groupedSend, n int) {
	ctx, cancel := context.WithCancel(context.WithoutCancel(round[0].ctx))
	defer cancel()
	var mu sync.Mutex
	waiting := len(round)
	for _, s := range round {
		stop := context.AfterFunc(s.ctx, func() {
			mu.Lock()
			waiting--
			if waiting == 0 {
				cancel()
			}
			mu.Unlock()
		})
		defer stop()
	}
	msgs := round[0].msgs
	if len(round) > 1 {
		msgs = make([]store.InsertMessage, 0, n)
		for _, s := range round {
			msgs = append(msgs, s.msgs...)
		}
	}
	// The store's now is read at the write: a relative due time is that
	// now plus the delay, never earlier than the sender's now plus it.
	ins, err := e.st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: t.name, Now: e.now(), Messages: msgs})
	if err == nil && len(ins) != len(msgs) {
		err = store.ErrCorrupt
	}
	if err == nil {
		e.afterInsert(t, ins)
	}
	off := 0
	for _, s := range round {
		if err != nil {
			s.err = err
		} else {
			s.res = ins[off : off+len(s.msgs) : off+len(s.msgs)]
			off += len(s.msgs)
		}
		close(s.done)
	}
}
