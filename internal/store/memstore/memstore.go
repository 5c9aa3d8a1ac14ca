// Package memstore is the in-memory reference implementation of
// store.Store. It is the model the randomized conformance test
// (storetest.RunModel) compares the durable backends against, so it favours
// being obviously correct over being clever: one mutex, one map of messages
// per topic, and for each state one ordered structure that every state
// change leaves through detach and enters through attach.
//
// It is not quadratic: the orders the contract asks for (scheduled by
// (DueAt, Seq), ready by (Priority, DueAt, Seq) and, for OldestReady, by
// (DueAt, Seq), inflight by LeaseUntil, tombstones by AckedAt) are indexed
// binary heaps, so promote, lease, expire, purge, cancel and reschedule are
// O(log n). Dead messages, which must be paged in order, are a sorted slice;
// they are few and mostly appended at the end.
//
// Beyond the rules of package store, it chooses:
//   - Records handed out are deep copies; inputs are copied too.
//   - No headers (nil or empty map) and no payload (nil or empty) are kept
//     and returned as nil.
//   - Max (and DeadList's Limit) <= 0 means none.
//   - Ties when Max cuts LeaseExpire, DeadReplay, DeadDelete or DedupPurge
//     short go by Seq: (LeaseUntil, Seq), (DeadAt, Seq), (AckedAt, Seq).
package memstore

import (
	"container/heap"
	"context"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/delayq/delayq/internal/store"
)

// Store is an in-memory store.Store. The zero value is not usable; call New.
type Store struct {
	mu     sync.Mutex
	closed bool
	seq    uint64
	topics map[string]*topic
	// Global orders: LeaseExpire and DedupPurge work across topics.
	inflight heapq // by (LeaseUntil, Seq); entry.gidx
	acked    heapq // by (AckedAt, Seq); entry.idx

	schedules map[string]*store.Schedule
}

type topic struct {
	name      string
	settings  []byte
	msgs      map[string]*entry
	scheduled heapq    // by (DueAt, Seq); entry.idx
	ready     heapq    // by (Priority, DueAt, Seq), the lease order; entry.idx
	readyDue  heapq    // by (DueAt, Seq), for OldestReady; entry.gidx
	inflight  heapq    // by (LeaseUntil, Seq); entry.idx, for NextLeaseExpiry
	dead      []*entry // sorted by (DeadAt, Seq), for paging
	nAcked    int64
	// deleted: TopicDelete forgot the topic; the next insert or settings
	// put makes it known again. The struct stays for its tombstones.
	deleted bool
}

// entry is a message and its positions in the heaps of its current state.
type entry struct {
	rec  store.Record
	idx  int // position in the heap of its state (topic's, or the global acked heap)
	gidx int // position in the global inflight heap, or in readyDue
}

var _ store.Store = (*Store)(nil)

// New returns an empty store.
func New() *Store {
	return &Store{
		topics:   make(map[string]*topic),
		inflight: heapq{less: byLease, pos: gpos},
		acked:    heapq{less: byAcked, pos: ipos},

		schedules: make(map[string]*store.Schedule),
	}
}

func byDue(a, b *entry) bool {
	if a.rec.DueAt != b.rec.DueAt {
		return a.rec.DueAt < b.rec.DueAt
	}
	return a.rec.Seq < b.rec.Seq
}

func byPriority(a, b *entry) bool {
	if a.rec.Priority != b.rec.Priority {
		return a.rec.Priority < b.rec.Priority
	}
	return byDue(a, b)
}

func byLease(a, b *entry) bool {
	if a.rec.LeaseUntil != b.rec.LeaseUntil {
		return a.rec.LeaseUntil < b.rec.LeaseUntil
	}
	return a.rec.Seq < b.rec.Seq
}

func byAcked(a, b *entry) bool {
	if a.rec.AckedAt != b.rec.AckedAt {
		return a.rec.AckedAt < b.rec.AckedAt
	}
	return a.rec.Seq < b.rec.Seq
}

func byDead(a, b *entry) bool {
	if a.rec.DeadAt != b.rec.DeadAt {
		return a.rec.DeadAt < b.rec.DeadAt
	}
	return a.rec.Seq < b.rec.Seq
}

func ipos(e *entry) *int { return &e.idx }
func gpos(e *entry) *int { return &e.gidx }

// heapq is an indexed min-heap: each entry knows its position (through pos),
// so any entry can be removed in O(log n).
type heapq struct {
	es   []*entry
	less func(a, b *entry) bool
	pos  func(e *entry) *int
}

func (h *heapq) Len() int           { return len(h.es) }
func (h *heapq) Less(i, j int) bool { return h.less(h.es[i], h.es[j]) }
func (h *heapq) Swap(i, j int) {
	h.es[i], h.es[j] = h.es[j], h.es[i]
	*h.pos(h.es[i]) = i
	*h.pos(h.es[j]) = j
}
func (h *heapq) Push(x any) {
	e := x.(*entry)
	*h.pos(e) = len(h.es)
	h.es = append(h.es, e)
}
func (h *heapq) Pop() any {
	n := len(h.es) - 1
	e := h.es[n]
	h.es[n] = nil
	h.es = h.es[:n]
	*h.pos(e) = -1
	return e
}

// min returns the least entry, or nil.
func (h *heapq) min() *entry {
	if len(h.es) == 0 {
		return nil
	}
	return h.es[0]
}

func (h *heapq) add(e *entry)    { heap.Push(h, e) }
func (h *heapq) remove(e *entry) { heap.Remove(h, *h.pos(e)) }

func newTopic(name string) *topic {
	return &topic{
		name:      name,
		msgs:      make(map[string]*entry),
		scheduled: heapq{less: byDue, pos: ipos},
		ready:     heapq{less: byPriority, pos: ipos},
		readyDue:  heapq{less: byDue, pos: gpos},
		inflight:  heapq{less: byLease, pos: ipos},
	}
}

// detach removes e from the structures of its current state. Every state
// change is detach, mutate, attach, so the structures cannot drift.
func (s *Store) detach(t *topic, e *entry) {
	switch e.rec.State {
	case store.StateScheduled:
		t.scheduled.remove(e)
	case store.StateReady:
		t.ready.remove(e)
		t.readyDue.remove(e)
	case store.StateInflight:
		t.inflight.remove(e)
		s.inflight.remove(e)
	case store.StateDead:
		i := t.deadIndex(e)
		if i == len(t.dead) || t.dead[i] != e {
			panic("memstore: dead index out of sync")
		}
		t.dead = append(t.dead[:i], t.dead[i+1:]...)
	case store.StateAcked:
		s.acked.remove(e)
		t.nAcked--
	default:
		panic("memstore: invalid state " + e.rec.State.String())
	}
}

// attach adds e to the structures of its (new) state.
func (s *Store) attach(t *topic, e *entry) {
	switch e.rec.State {
	case store.StateScheduled:
		t.scheduled.add(e)
	case store.StateReady:
		t.ready.add(e)
		t.readyDue.add(e)
	case store.StateInflight:
		t.inflight.add(e)
		s.inflight.add(e)
	case store.StateDead:
		i := t.deadIndex(e)
		t.dead = append(t.dead, nil)
		copy(t.dead[i+1:], t.dead[i:])
		t.dead[i] = e
	case store.StateAcked:
		s.acked.add(e)
		t.nAcked++
	default:
		panic("memstore: invalid state " + e.rec.State.String())
	}
}

// deadIndex is the first position in t.dead not before e.
func (t *topic) deadIndex(e *entry) int {
	return sort.Search(len(t.dead), func(i int) bool { return !byDead(t.dead[i], e) })
}

// deadAfter is the first position in t.dead strictly after (deadAt, seq).
func (t *topic) deadAfter(deadAt int64, seq uint64) int {
	return sort.Search(len(t.dead), func(i int) bool {
		r := &t.dead[i].rec
		return r.DeadAt > deadAt || (r.DeadAt == deadAt && r.Seq > seq)
	})
}

func (t *topic) delete(s *Store, e *entry) {
	s.detach(t, e)
	delete(t.msgs, e.rec.ID)
}

func clone(r *store.Record) *store.Record {
	c := *r
	c.Payload = cloneBytes(r.Payload)
	c.Headers = cloneHeaders(r.Headers)
	return &c
}

func cloneBytes(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}

func cloneHeaders(h map[string]string) map[string]string {
	if len(h) == 0 {
		return nil
	}
	return maps.Clone(h)
}

func notFound(topic, id string) error {
	return fmt.Errorf("memstore: message %q in topic %q: %w", id, topic, store.ErrNotFound)
}

func conflict(r *store.Record, what string) error {
	return fmt.Errorf("memstore: message %q in topic %q is %s: %s: %w", r.ID, r.Topic, r.State, what, store.ErrConflict)
}

// lock takes the mutex unless the store is closed.
func (s *Store) lock() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return store.ErrClosed
	}
	return nil
}

// find returns the topic and the entry of a message, or ErrNotFound.
func (s *Store) find(topicName, id string) (*topic, *entry, error) {
	t := s.topics[topicName]
	if t == nil {
		return nil, nil, notFound(topicName, id)
	}
	e := t.msgs[id]
	if e == nil {
		return nil, nil, notFound(topicName, id)
	}
	return t, e, nil
}

// MessageInsertMany implements store.Store.
func (s *Store) MessageInsertMany(_ context.Context, p *store.MessageInsertManyParams) ([]store.InsertResult, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]store.InsertResult, len(p.Messages))
	if len(p.Messages) == 0 {
		return out, nil
	}
	t := s.topics[p.Topic]
	if t == nil {
		t = newTopic(p.Topic)
		s.topics[p.Topic] = t
	}
	t.deleted = false
	for i, m := range p.Messages {
		// A repeated ID within one call is a duplicate of the first.
		if e := t.msgs[m.ID]; e != nil {
			out[i] = store.InsertResult{Record: clone(&e.rec), Duplicate: true}
			continue
		}
		s.seq++
		due := m.Due(p.Now)
		e := &entry{idx: -1, gidx: -1, rec: store.Record{
			Topic:       p.Topic,
			ID:          m.ID,
			Seq:         s.seq,
			State:       store.StateScheduled,
			Payload:     cloneBytes(m.Payload),
			Headers:     cloneHeaders(m.Headers),
			DueAt:       due,
			CreatedAt:   p.Now,
			UpdatedAt:   p.Now,
			MaxAttempts: m.MaxAttempts,
			Priority:    m.Priority,
		}}
		if due <= p.Now {
			e.rec.State = store.StateReady
		}
		t.msgs[m.ID] = e
		s.attach(t, e)
		if p.SenderKeepsBodies {
			r := e.rec
			r.Payload, r.Headers = nil, nil
			out[i] = store.InsertResult{Record: &r}
			continue
		}
		out[i] = store.InsertResult{Record: clone(&e.rec)}
	}
	return out, nil
}

// MessageGet implements store.Store.
func (s *Store) MessageGet(_ context.Context, topic, id string) (*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	_, e, err := s.find(topic, id)
	if err != nil {
		return nil, err
	}
	return clone(&e.rec), nil
}

// MessageCancel implements store.Store.
func (s *Store) MessageCancel(_ context.Context, p *store.MessageCancelParams) (*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, e, err := s.find(p.Topic, p.ID)
	if err != nil {
		return nil, err
	}
	switch e.rec.State {
	case store.StateScheduled, store.StateReady, store.StateInflight:
	default:
		return nil, conflict(&e.rec, "cannot cancel")
	}
	old := clone(&e.rec)
	t.delete(s, e)
	return old, nil
}

// MessageReschedule implements store.Store.
func (s *Store) MessageReschedule(_ context.Context, p *store.MessageRescheduleParams) (*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, e, err := s.find(p.Topic, p.ID)
	if err != nil {
		return nil, err
	}
	switch e.rec.State {
	case store.StateScheduled, store.StateReady:
	default:
		return nil, conflict(&e.rec, "cannot reschedule")
	}
	s.detach(t, e)
	e.rec.DueAt = p.Due(p.Now)
	e.rec.State = store.StateScheduled
	if e.rec.DueAt <= p.Now {
		e.rec.State = store.StateReady
	}
	e.rec.UpdatedAt = p.Now
	s.attach(t, e)
	return clone(&e.rec), nil
}

// MessagePromote implements store.Store.
func (s *Store) MessagePromote(_ context.Context, p *store.MessagePromoteParams) (*store.PromoteResult, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	res := &store.PromoteResult{}
	t := s.topics[p.Topic]
	if t == nil {
		return res, nil
	}
	for res.Promoted < p.Max {
		e := t.scheduled.min()
		if e == nil || e.rec.DueAt > p.Now {
			break
		}
		s.detach(t, e)
		e.rec.State = store.StateReady
		e.rec.UpdatedAt = p.Now
		s.attach(t, e)
		res.Promoted++
	}
	if e := t.scheduled.min(); e != nil {
		res.NextDue = e.rec.DueAt
	}
	return res, nil
}

// MessageLease implements store.Store.
func (s *Store) MessageLease(_ context.Context, p *store.MessageLeaseParams) ([]*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t := s.topics[p.Topic]
	if t == nil {
		return nil, nil
	}
	var out []*store.Record
	// A ready message not yet due (see store.Store.MessageLease) is set
	// aside, not a barrier: those after it in lease order may be due.
	var notDue []*entry
	defer func() {
		for _, e := range notDue {
			t.ready.add(e)
		}
	}()
	for len(out) < p.Max {
		e := t.ready.min()
		if e == nil {
			break
		}
		if e.rec.DueAt > p.Now {
			t.ready.remove(e)
			notDue = append(notDue, e)
			continue
		}
		s.detach(t, e)
		e.rec.State = store.StateInflight
		e.rec.Deliveries++
		e.rec.LeaseUntil = p.Now + p.LeaseFor
		e.rec.Receipt = p.Token + "-" + strconv.FormatInt(int64(e.rec.Deliveries), 10)
		e.rec.UpdatedAt = p.Now
		s.attach(t, e)
		out = append(out, clone(&e.rec))
	}
	return out, nil
}

// leased returns the inflight message holding receipt, or ErrNotFound /
// ErrConflict.
func (s *Store) leased(topic, id, receipt string) (*topic, *entry, error) {
	t, e, err := s.find(topic, id)
	if err != nil {
		return nil, nil, err
	}
	if e.rec.State != store.StateInflight {
		return nil, nil, conflict(&e.rec, "not leased")
	}
	if e.rec.Receipt != receipt {
		return nil, nil, conflict(&e.rec, "stale receipt")
	}
	return t, e, nil
}

func (s *Store) ackLocked(topic, id, receipt string, now int64) error {
	t, e, err := s.leased(topic, id, receipt)
	if err != nil {
		return err
	}
	s.detach(t, e)
	e.rec.State = store.StateAcked
	e.rec.Payload = nil
	e.rec.Headers = nil
	e.rec.LeaseUntil = 0 // the receipt stays: the one that acked
	e.rec.AckedAt = now
	e.rec.UpdatedAt = now
	s.attach(t, e)
	return nil
}

// MessageAck implements store.Store.
func (s *Store) MessageAck(_ context.Context, p *store.MessageAckParams) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	return s.ackLocked(p.Topic, p.ID, p.Receipt, p.Now)
}

// MessageAckMany implements store.Store.
func (s *Store) MessageAckMany(_ context.Context, p *store.MessageAckManyParams) ([]error, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]error, len(p.Items))
	for i, it := range p.Items {
		out[i] = s.ackLocked(p.Topic, it.ID, it.Receipt, p.Now)
	}
	return out, nil
}

// fail counts a failure of a detached, formerly inflight entry and sends it
// to dead or back to scheduled/ready at retryAt, as Nack and LeaseExpire do.
func fail(e *entry, now, retryAt int64, reason string, final bool) {
	r := &e.rec
	r.Failures++
	r.LastError = reason
	r.LeaseUntil = 0 // Receipt stays: the failed delivery's (store.Record)
	r.UpdatedAt = now
	switch {
	case final || r.Failures >= r.MaxAttempts:
		r.State = store.StateDead
		r.DeadAt = now
	case retryAt <= now:
		r.State = store.StateReady
		r.DueAt = retryAt
	default:
		r.State = store.StateScheduled
		r.DueAt = retryAt
	}
}

// MessageNack implements store.Store.
func (s *Store) MessageNack(_ context.Context, p *store.MessageNackParams) (*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, e, err := s.leased(p.Topic, p.ID, p.Receipt)
	if err != nil {
		return nil, err
	}
	s.detach(t, e)
	fail(e, p.Now, p.Now+p.RetryDelay, p.Error, p.Final)
	s.attach(t, e)
	return clone(&e.rec), nil
}

// MessageExtend implements store.Store.
func (s *Store) MessageExtend(_ context.Context, p *store.MessageExtendParams) (*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t, e, err := s.leased(p.Topic, p.ID, p.Receipt)
	if err != nil {
		return nil, err
	}
	s.detach(t, e)
	e.rec.LeaseUntil = p.Now + p.LeaseFor
	e.rec.UpdatedAt = p.Now
	s.attach(t, e)
	return clone(&e.rec), nil
}

// LeaseExpiredError is the LastError of a message whose lease ran out.
const LeaseExpiredError = "lease expired"

// LeaseExpire implements store.Store.
func (s *Store) LeaseExpire(_ context.Context, p *store.LeaseExpireParams) ([]*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	var out []*store.Record
	for len(out) < p.Max {
		e := s.inflight.min()
		if e == nil || e.rec.LeaseUntil > p.Now {
			break
		}
		t := s.topics[e.rec.Topic]
		s.detach(t, e)
		fail(e, p.Now, p.Now, LeaseExpiredError, false)
		s.attach(t, e)
		out = append(out, clone(&e.rec))
	}
	return out, nil
}

// The DeadList cursor is the (DeadAt, Seq) of the last record returned.
func deadCursor(r *store.Record) string {
	return strconv.FormatInt(r.DeadAt, 10) + "." + strconv.FormatUint(r.Seq, 10)
}

func parseDeadCursor(c string) (int64, uint64, error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		deadAt, err1 := strconv.ParseInt(a, 10, 64)
		seq, err2 := strconv.ParseUint(b, 10, 64)
		if err1 == nil && err2 == nil {
			return deadAt, seq, nil
		}
	}
	return 0, 0, fmt.Errorf("memstore: invalid dead-list cursor %q: %w", c, store.ErrBadCursor)
}

// DeadList implements store.Store.
func (s *Store) DeadList(_ context.Context, p *store.DeadListParams) ([]*store.Record, string, error) {
	if err := s.lock(); err != nil {
		return nil, "", err
	}
	defer s.mu.Unlock()
	t := s.topics[p.Topic]
	if t == nil || p.Limit <= 0 {
		return nil, "", nil
	}
	start := 0
	if p.Cursor != "" {
		deadAt, seq, err := parseDeadCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		start = t.deadAfter(deadAt, seq)
	}
	end := min(start+p.Limit, len(t.dead))
	var out []*store.Record
	for _, e := range t.dead[start:end] {
		out = append(out, clone(&e.rec))
	}
	next := ""
	if end < len(t.dead) {
		next = deadCursor(&t.dead[end-1].rec)
	}
	return out, next, nil
}

// deadOne returns a dead message of a topic, or ErrNotFound.
func (s *Store) deadOne(topic, id string) (*topic, *entry, error) {
	t, e, err := s.find(topic, id)
	if err != nil {
		return nil, nil, err
	}
	if e.rec.State != store.StateDead {
		return nil, nil, fmt.Errorf("memstore: message %q in topic %q is %s, not dead: %w", id, topic, e.rec.State, store.ErrNotFound)
	}
	return t, e, nil
}

// DeadReplay implements store.Store.
func (s *Store) DeadReplay(_ context.Context, p *store.DeadReplayParams) ([]*store.Record, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	replay := func(t *topic, e *entry) *store.Record {
		s.detach(t, e)
		e.rec.State = store.StateReady
		e.rec.DueAt = p.Now
		e.rec.Failures = 0
		e.rec.DeadAt = 0
		e.rec.UpdatedAt = p.Now
		s.attach(t, e)
		return clone(&e.rec)
	}
	if p.ID != "" {
		t, e, err := s.deadOne(p.Topic, p.ID)
		if err != nil {
			return nil, err
		}
		return []*store.Record{replay(t, e)}, nil
	}
	t := s.topics[p.Topic]
	if t == nil {
		return nil, nil
	}
	var out []*store.Record
	for len(out) < p.Max && len(t.dead) > 0 {
		out = append(out, replay(t, t.dead[0]))
	}
	return out, nil
}

// DeadDelete implements store.Store.
func (s *Store) DeadDelete(_ context.Context, p *store.DeadDeleteParams) (int, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if p.ID != "" {
		t, e, err := s.deadOne(p.Topic, p.ID)
		if err != nil {
			return 0, err
		}
		t.delete(s, e)
		return 1, nil
	}
	t := s.topics[p.Topic]
	if t == nil {
		return 0, nil
	}
	n := 0
	for n < p.Max && len(t.dead) > 0 {
		t.delete(s, t.dead[0])
		n++
	}
	return n, nil
}

// DedupPurge implements store.Store.
func (s *Store) DedupPurge(_ context.Context, p *store.DedupPurgeParams) (int, error) {
	if err := s.lock(); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	n := 0
	for n < p.Max {
		e := s.acked.min()
		if e == nil || e.rec.AckedAt > p.Now-p.Window {
			break
		}
		s.topics[e.rec.Topic].delete(s, e)
		n++
	}
	return n, nil
}

func (t *topic) record() *store.TopicRecord {
	tr := &store.TopicRecord{
		Name: t.name,
		Counts: store.Counts{
			Scheduled: int64(t.scheduled.Len()),
			Ready:     int64(t.ready.Len()),
			Inflight:  int64(t.inflight.Len()),
			Dead:      int64(len(t.dead)),
			Acked:     t.nAcked,
		},
	}
	if t.settings != nil {
		tr.Settings = append([]byte{}, t.settings...)
	}
	if e := t.scheduled.min(); e != nil {
		tr.NextDue = e.rec.DueAt
	}
	if e := t.readyDue.min(); e != nil {
		tr.OldestReady = e.rec.DueAt
	}
	if e := t.inflight.min(); e != nil {
		tr.NextLeaseExpiry = e.rec.LeaseUntil
	}
	return tr
}

// TopicGet implements store.Store.
func (s *Store) TopicGet(_ context.Context, topic string) (*store.TopicRecord, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil || t.hidden() {
		return nil, fmt.Errorf("memstore: topic %q: %w", topic, store.ErrNotFound)
	}
	return t.record(), nil
}

// live is how many messages the topic holds that TopicDelete refuses to
// forget.
func (t *topic) live() int {
	return t.scheduled.Len() + t.ready.Len() + t.inflight.Len() + len(t.dead)
}

// hidden says TopicGet and TopicList do not show the topic.
func (t *topic) hidden() bool { return t.deleted && t.live() == 0 }

// TopicDelete implements store.Store.
func (s *Store) TopicDelete(_ context.Context, topic string) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil || t.hidden() {
		return fmt.Errorf("memstore: topic %q: %w", topic, store.ErrNotFound)
	}
	if n := t.live(); n > 0 {
		return fmt.Errorf("memstore: topic %q holds %d messages: %w", topic, n, store.ErrConflict)
	}
	t.settings = nil
	t.deleted = true
	return nil
}

// TopicList implements store.Store.
func (s *Store) TopicList(_ context.Context) ([]*store.TopicRecord, error) {
	if err := s.lock(); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]*store.TopicRecord, 0, len(s.topics))
	for _, t := range s.topics {
		if !t.hidden() {
			out = append(out, t.record())
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// TopicSettingsPut implements store.Store.
func (s *Store) TopicSettingsPut(_ context.Context, topic string, settings []byte) error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	t := s.topics[topic]
	if t == nil {
		t = newTopic(topic)
		s.topics[topic] = t
	}
	// Non-nil even when empty: nil means "never set".
	t.settings = append([]byte{}, settings...)
	t.deleted = false
	return nil
}

// Close implements store.Store. A second Close returns ErrClosed.
func (s *Store) Close() error {
	if err := s.lock(); err != nil {
		return err
	}
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
