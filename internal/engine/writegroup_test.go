package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// groupWriters is how many writes of a topic's sends are in flight before
// the next ones queue (writegroup.go: one).
const groupWriters = 1

// gatedStore is a memstore whose inserts can be held at a gate and made to
// fail, and which records how many messages each insert carried.
type gatedStore struct {
	*memstore.Store
	mu      sync.Mutex
	gate    chan struct{} // non-nil: inserts wait for it to close
	entered chan struct{} // an insert reached the store
	fail    error
	sizes   []int
	acks    [][]store.AckItem // what each MessageAckMany carried
	ackGate chan struct{}     // non-nil: ack writes wait for it to close
}

func (s *gatedStore) MessageAckMany(ctx context.Context, p *store.MessageAckManyParams) ([]error, error) {
	s.mu.Lock()
	gate := s.ackGate
	s.acks = append(s.acks, append([]store.AckItem(nil), p.Items...))
	s.mu.Unlock()
	if err := s.enter(ctx, gate); err != nil {
		return nil, err
	}
	return s.Store.MessageAckMany(ctx, p)
}

// enter tells the test a write reached the store and waits at gate, if
// any.
func (s *gatedStore) enter(ctx context.Context, gate chan struct{}) error {
	s.entered <- struct{}{}
	if gate == nil {
		return nil
	}
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func newGatedStore() *gatedStore {
	return &gatedStore{Store: memstore.New(), entered: make(chan struct{}, 100)}
}

func (s *gatedStore) MessageInsertMany(ctx context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	s.mu.Lock()
	gate, fail := s.gate, s.fail
	s.sizes = append(s.sizes, len(p.Messages))
	s.mu.Unlock()
	if err := s.enter(ctx, gate); err != nil {
		return nil, err
	}
	if fail != nil {
		return nil, fail
	}
	return s.Store.MessageInsertMany(ctx, p)
}

// Ping makes the engine treat the store as remote: it groups sends.
func (s *gatedStore) Ping(context.Context) error { return nil }

// hold makes the next inserts wait; the returned func lets them go.
func (s *gatedStore) hold() func() {
	g := make(chan struct{})
	s.mu.Lock()
	s.gate = g
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		if s.gate == g {
			s.gate = nil
		}
		s.mu.Unlock()
		close(g)
	}
}

func (s *gatedStore) insertSizes() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.sizes...)
}

func openGated(t *testing.T) (*Engine, *gatedStore) {
	t.Helper()
	st := newGatedStore()
	e, err := Open(context.Background(), Config{Store: st, SafetySweep: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close(context.Background()); st.Close() })
	return e, st
}

// sendAsync sends id to "q" in a goroutine of its own; its error goes to
// out.
func sendAsync(ctx context.Context, e *Engine, id string, out chan<- error) {
	go func() {
		_, err := e.Send(ctx, "q", domain.SendRequest{ID: id, Payload: []byte("x")})
		out <- err
	}()
}

// occupyWriters starts groupWriters sends to "q" and waits until they are
// held at the store's gate, so that the next sends queue; their errors
// go to the channel returned.
func occupyWriters(ctx context.Context, t *testing.T, e *Engine, st *gatedStore, prefix string) chan error {
	t.Helper()
	held := make(chan error, groupWriters)
	for i := 0; i < groupWriters; i++ {
		sendAsync(ctx, e, fmt.Sprintf("%s-%d", prefix, i), held)
	}
	waitEntered(t, st, groupWriters)
	return held
}

// queuedPair is two sends queued behind held writers: "leaves" on a
// context of its own, then "stays".
type queuedPair struct {
	release func() // lets the held writes go
	held    chan error
	leaves  chan error
	stays   chan error
	cancel  func() // ends the context of "leaves"
}

// queueBehindHeldWriters queues the pair, "leaves" first unless
// staysFirst (the first queued writes the next round itself).
func queueBehindHeldWriters(ctx context.Context, t *testing.T, e *Engine, st *gatedStore, staysFirst bool) queuedPair {
	t.Helper()
	q := queuedPair{release: st.hold(), leaves: make(chan error, 1), stays: make(chan error, 1)}
	q.held = occupyWriters(ctx, t, e, st, "held")
	cctx, cancel := context.WithCancel(ctx)
	q.cancel = cancel
	t.Cleanup(cancel)
	first, second := func() { sendAsync(cctx, e, "leaves", q.leaves) }, func() { sendAsync(ctx, e, "stays", q.stays) }
	if staysFirst {
		first, second = second, first
	}
	first()
	waitQueued(t, &e.topic("q").sends, 1)
	second()
	waitQueued(t, &e.topic("q").sends, 2)
	return q
}

// ignoreEntered is for tests that do not count the writes that reach the
// store (the channel would fill).
func ignoreEntered(t *testing.T, st *gatedStore) {
	go func() {
		for range st.entered {
		}
	}()
	t.Cleanup(func() { close(st.entered) })
}

// waitEntered waits until n inserts have reached the store.
func waitEntered(t *testing.T, st *gatedStore, n int) {
	t.Helper()
	for i := 0; i < n; i++ {
		select {
		case <-st.entered:
		case <-time.After(5 * time.Second):
			t.Fatalf("%d of %d inserts reached the store", i, n)
		}
	}
}

// waitUntil polls read (under mu) until done says its value is the one
// wanted, for up to 5 s; what names the value in the failure.
func waitUntil(t *testing.T, mu *sync.Mutex, read func() int, done func(int) bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		v := read()
		mu.Unlock()
		if done(v) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %d after 5s", what, v)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitQueued waits until n calls wait in g behind the write in flight.
func waitQueued[I, R any](t *testing.T, g *writeGroup[I, R], n int) {
	t.Helper()
	waitUntil(t, &g.mu, func() int { return len(g.queue) }, func(q int) bool { return q == n }, fmt.Sprintf("calls queued (want %d)", n))
}

// waitIdle waits until no write of topic's sends is in flight (a round's
// writer answers its callers before it stops).
func waitIdle(t *testing.T, e *Engine, topic string) {
	t.Helper()
	g := &e.topic(topic).sends
	waitUntil(t, &g.mu, func() int {
		if g.writing {
			return 1
		}
		return 0
	}, func(w int) bool { return w == 0 }, "writes still in flight")
}

// TestSendsGroupWhileWritesAreInFlight: sends that arrive while the
// topic's writes are in flight go out together in one store write once
// one ends, and each caller gets its own messages back, in its order.
func TestSendsGroupWhileWritesAreInFlight(t *testing.T) {
	ctx := context.Background()
	e, st := openGated(t)
	release := st.hold()
	type answer struct {
		caller int
		res    []domain.SendResult
		err    error
	}
	answers := make(chan answer, 100)
	send := func(caller int, ids ...string) {
		reqs := make([]domain.SendRequest, len(ids))
		for i, id := range ids {
			reqs[i] = domain.SendRequest{ID: id, Payload: []byte("p-" + id), When: domain.When{Delay: time.Duration(caller) * time.Second}}
		}
		res, err := e.SendBatch(ctx, "q", reqs)
		answers <- answer{caller, res, err}
	}
	for i := 0; i < groupWriters; i++ {
		go send(i, fmt.Sprintf("first-%d", i))
	}
	waitEntered(t, st, groupWriters)
	const queued = 20
	for i := 0; i < queued; i++ {
		// Callers of two messages, one of them an id another caller
		// also sends: a repeat within a write is a duplicate, as it is
		// across writes.
		go send(groupWriters+i, fmt.Sprintf("m-%d", i), fmt.Sprintf("shared-%d", i%5))
	}
	waitQueued(t, &e.topic("q").sends, queued)
	release()
	firsts := map[string]bool{}
	for i := 0; i < groupWriters+queued; i++ {
		a := <-answers
		if a.err != nil {
			t.Fatalf("caller %d: %v", a.caller, a.err)
		}
		for j, r := range a.res {
			if r.Err != nil || r.Message == nil {
				t.Fatalf("caller %d item %d: %v", a.caller, j, r.Err)
			}
			m := r.Message
			if string(m.Payload) != "p-"+m.ID && !m.Duplicate {
				t.Errorf("caller %d got %s with payload %q", a.caller, m.ID, m.Payload)
			}
			if a.caller >= groupWriters {
				want := fmt.Sprintf("m-%d", a.caller-groupWriters)
				if j == 1 {
					want = fmt.Sprintf("shared-%d", (a.caller-groupWriters)%5)
				}
				if m.ID != want {
					t.Errorf("caller %d item %d is %s, want %s", a.caller, j, m.ID, want)
				}
				if j == 1 && !m.Duplicate {
					if firsts[m.ID] {
						t.Errorf("%s created twice", m.ID)
					}
					firsts[m.ID] = true
				}
				if j == 0 && m.Duplicate {
					t.Errorf("caller %d: %s answered as a duplicate", a.caller, m.ID)
				}
			}
		}
	}
	if len(firsts) != 5 {
		t.Errorf("%d shared ids created, want 5", len(firsts))
	}
	sizes := st.insertSizes()
	// The held writes, then the queued callers' messages in one write:
	// the first writer the release frees takes all that queued.
	if len(sizes) != groupWriters+1 || sizes[groupWriters] != 2*queued {
		t.Errorf("store writes carried %v messages: the queued sends were not grouped into one", sizes)
	}
	total := 0
	for _, n := range sizes {
		total += n
	}
	if total != groupWriters+2*queued {
		t.Errorf("the store was asked to write %d messages, want %d", total, groupWriters+2*queued)
	}
	c, err := e.Topic(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Counts.Scheduled+c.Counts.Ready, int64(groupWriters+queued+5); got != want {
		t.Errorf("topic holds %d messages, want %d", got, want)
	}
}

// TestGroupedSendLeftBeforeItsWrite: a caller that gives up while its send
// is queued is answered with its context's error and its message is never
// written; the others in the queue are.
func TestGroupedSendLeftBeforeItsWrite(t *testing.T) {
	ctx := context.Background()
	e, st := openGated(t)
	q := queueBehindHeldWriters(ctx, t, e, st, false)
	release, errs, left, stays, cancel := q.release, q.held, q.leaves, q.stays, q.cancel
	cancel()
	if err := <-left; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left got %v, want context.Canceled", err)
	}
	waitQueued(t, &e.topic("q").sends, 1)
	release()
	for i := 0; i < groupWriters; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-stays; err != nil {
		t.Fatal(err)
	}
	if _, err := e.Get(ctx, "q", "leaves"); !errors.Is(err, domain.ErrNotFound) {
		t.Errorf("the message of the caller that left: %v, want not found", err)
	}
	if _, err := e.Get(ctx, "q", "stays"); err != nil {
		t.Errorf("the message queued beside it: %v", err)
	}
}

// TestGroupedWriteOutlivesACaller: a round's write goes on while any of
// its callers waits, though another has left (answered at once with its
// context's error); a store error reaches every caller of the round.
func TestGroupedWriteOutlivesACaller(t *testing.T) {
	ctx := context.Background()
	e, st := openGated(t)
	// Two callers queue: one that stays (and so writes the round), one
	// that will leave once the round is being written.
	q := queueBehindHeldWriters(ctx, t, e, st, true)
	release, held, cancel := q.release, q.held, q.cancel
	release2 := make(chan struct{})
	st.mu.Lock()
	st.gate = release2 // the grouped write will wait here too
	st.mu.Unlock()
	release()
	for i := 0; i < groupWriters; i++ {
		if err := <-held; err != nil {
			t.Fatal(err)
		}
	}
	waitEntered(t, st, 1) // the grouped write reached the store
	cancel()
	if err := <-q.leaves; !errors.Is(err, context.Canceled) {
		t.Fatalf("the caller that left: %v, want context.Canceled", err)
	}
	close(release2)
	if err := <-q.stays; err != nil {
		t.Fatalf("the caller that stayed: %v", err)
	}
	for _, id := range []string{"stays", "leaves"} {
		if _, err := e.Get(ctx, "q", id); err != nil {
			t.Errorf("message %s of the round: %v", id, err)
		}
	}
	if sizes := st.insertSizes(); sizes[len(sizes)-1] != 2 {
		t.Errorf("the last write carried %d messages, want both queued sends", sizes[len(sizes)-1])
	}

	// A store error: every caller of the round gets it.
	waitIdle(t, e, "q")
	st.mu.Lock()
	st.fail = errors.New("disk on fire")
	st.mu.Unlock()
	release = st.hold()
	held = occupyWriters(ctx, t, e, st, "f-held")
	got := make(chan error, 3)
	for i := 0; i < 3; i++ {
		sendAsync(ctx, e, fmt.Sprintf("f-%d", i), got)
	}
	waitQueued(t, &e.topic("q").sends, 3)
	release()
	for i := 0; i < groupWriters; i++ {
		if err := <-held; !errors.Is(err, domain.ErrUnavailable) {
			t.Errorf("held send: %v, want ErrUnavailable", err)
		}
	}
	for i := 0; i < 3; i++ {
		if err := <-got; !errors.Is(err, domain.ErrUnavailable) {
			t.Errorf("grouped send: %v, want ErrUnavailable", err)
		}
	}
}

// TestGroupedSendsConcurrent: many callers, repeated ids, every answer
// the caller's own message and each id created once (run with -race).
func TestGroupedSendsConcurrent(t *testing.T) {
	ctx := context.Background()
	e, st := openGated(t)
	ignoreEntered(t, st)
	const callers, each, ids = 16, 50, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := map[string]int{}
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				id := fmt.Sprintf("id-%d", (c*each+i*7)%ids)
				m, err := e.Send(ctx, "q", domain.SendRequest{ID: id, Payload: []byte(id)})
				if err != nil {
					t.Error(err)
					return
				}
				if m.ID != id || string(m.Payload) != id {
					t.Errorf("sent %s, answered %s %q", id, m.ID, m.Payload)
				}
				if !m.Duplicate {
					mu.Lock()
					created[id]++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	for id, n := range created {
		if n != 1 {
			t.Errorf("%s created %d times", id, n)
		}
	}
	if len(created) != ids {
		t.Errorf("%d ids created, want %d", len(created), ids)
	}
	if sizes := st.insertSizes(); len(sizes) >= callers*each {
		t.Logf("no send was grouped (%d writes for %d sends): possible on an idle machine", len(sizes), callers*each)
	}
}

// TestAcksGroupWhileWritesAreInFlight: single acks that arrive while the
// topic's ack write is in flight go out together as one MessageAckMany;
// each caller gets its own answer (a stale receipt its conflict), and a
// second ack of one message waits for a write of its own, so it is
// answered as a retried ack always is (ok: the store's conflict, then the
// tombstone holding its receipt).
func TestAcksGroupWhileWritesAreInFlight(t *testing.T) {
	ctx := context.Background()
	e, st := openGated(t)
	ignoreEntered(t, st)
	const n = 12
	for i := 0; i < n; i++ {
		if _, err := e.Send(ctx, "q", domain.SendRequest{ID: fmt.Sprintf("m-%d", i), Payload: []byte("x")}); err != nil {
			t.Fatal(err)
		}
	}
	leased, err := e.Lease(ctx, "q", domain.LeaseRequest{Max: n, Lease: time.Minute})
	if err != nil || len(leased) != n {
		t.Fatalf("lease: %d %v", len(leased), err)
	}
	gate := make(chan struct{})
	st.mu.Lock()
	st.ackGate = gate
	st.mu.Unlock()
	errs := make(chan error, 2*n)
	ack := func(m *domain.Message, receipt string) {
		errs <- e.Ack(ctx, "q", m.ID, receipt)
	}
	go ack(leased[0], leased[0].Receipt) // in flight, held
	waitAckWrites(t, st, 1)
	g := &e.topic("q").acks
	queued := 0
	queue := func(m *domain.Message, receipt string) { // in this order
		go ack(m, receipt)
		queued++
		waitQueued(t, g, queued)
	}
	for _, m := range leased[1:] {
		queue(m, m.Receipt)
	}
	queue(leased[1], "stale-"+leased[1].Receipt)
	queue(leased[2], leased[2].Receipt) // a second ack of one message
	st.mu.Lock()
	st.ackGate = nil
	st.mu.Unlock()
	close(gate)
	var ok, conflicts int
	for i := 0; i < n+2; i++ {
		switch err := <-errs; {
		case err == nil:
			ok++
		case errors.Is(err, domain.ErrConflict):
			conflicts++
		default:
			t.Errorf("ack: %v", err)
		}
	}
	if ok != n+1 || conflicts != 1 {
		t.Errorf("%d acks ok and %d conflicts, want %d and 1", ok, conflicts, n+1)
	}
	st.mu.Lock()
	writes := st.acks
	st.mu.Unlock()
	// The held write, the queued acks in one, and the two repeats after
	// it (a round takes no id it already has).
	if got := ackSizes(writes); len(got) != 3 || got[0] != 1 || got[1] != n-1 || got[2] != 2 {
		t.Errorf("ack writes carried %v", ackSizes(writes))
	}
	for i, w := range writes {
		seen := map[string]bool{}
		for _, it := range w {
			if seen[it.ID] {
				t.Errorf("ack write %d names %s twice", i, it.ID)
			}
			seen[it.ID] = true
		}
	}
	c, err := e.Topic(ctx, "q")
	if err != nil || c.Counts.Inflight != 0 {
		t.Errorf("after the acks: %+v %v", c, err)
	}
}

func ackSizes(writes [][]store.AckItem) []int {
	var n []int
	for _, w := range writes {
		n = append(n, len(w))
	}
	return n
}

// waitAckWrites waits until n ack writes have reached the store.
func waitAckWrites(t *testing.T, st *gatedStore, n int) {
	t.Helper()
	waitUntil(t, &st.mu, func() int { return len(st.acks) }, func(got int) bool { return got >= n }, fmt.Sprintf("ack writes (want %d)", n))
}

// TestGroupLeadPassedOn: the caller first in the queue, to which a write
// hands the next round, may leave at that instant; the round must still
// be written for the caller behind it (no stall), whichever comes first.
func TestGroupLeadPassedOn(t *testing.T) {
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		e, st := openGated(t)
		q := queueBehindHeldWriters(ctx, t, e, st, false)
		go q.cancel()
		q.release()
		select {
		case err := <-q.stays:
			if err != nil {
				t.Fatalf("run %d: the caller that stayed: %v", i, err)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("run %d: the caller behind one that left was never answered", i)
		}
		if err := <-q.leaves; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("run %d: the caller that left: %v", i, err)
		}
		waitIdle(t, e, "q")
	}
}
