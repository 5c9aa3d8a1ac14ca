// Package store defines the persistence seam of delayq: the Store interface,
// its records and its errors. It names no driver type, so the embedded
// (Pebble) and Redis backends both fit it; the engine (internal/engine) owns
// scheduling, leases policy, retries and stats on top of any Store.
//
// # Contract
//
// A Store keeps messages per topic in these states:
//
//	scheduled --promote(due<=now)--> ready --lease--> inflight --ack--> acked (tombstone)
//	    ^                              ^                 |  \--nack/expire (failures < max)--> scheduled
//	    |                              |                 \----nack/expire (failures >= max)--> dead
//	    +---------- reschedule --------+                                                        |
//	                                   +---------------------- replay -------------------------+
//
// Times are Unix milliseconds (int64). "Now" is always passed in; a Store
// never reads a clock except where a backend documents a single time source
// of its own (Redis TIME; see Clock). Instants that follow from "now" are
// passed as durations (a relative due time, RetryDelay, LeaseFor, the
// dedup Window) and resolved by the store against the now it judges by, so
// that on a store shared by several servers every instant comes from one
// clock: a server whose clock is off by a few ms or seconds then neither
// releases early nor hands out a lease that has already expired. Absolute
// due times (deliver_at) are stored as given.
//
// Ordering: ready messages are leased in (Priority, DueAt, Seq) order,
// where Priority is the sender's (0, the default, first) and Seq is a
// per-store increasing number assigned at insert (send order). Priority
// orders only what is due: a message is never leased before its DueAt
// whatever its priority, and promotion (scheduled to ready) goes by
// (DueAt, Seq) alone. A message keeps its priority through retries,
// reschedules and replays.
//
// Durability: InsertMany, Cancel, Reschedule, Ack, AckMany, Nack, the Dead*
// methods, TopicSettingsPut and the Schedule writes (Upsert, Delete, Tick)
// are durable when they return nil (embedded: fsync'd, with group commit;
// Redis: as its persistence is configured). RateTake is not. Promote,
// Lease, Extend and LeaseExpire may be lost by a crash: each loss only
// means a message is promoted, delivered or expired again, which the
// at-least-once contract allows.
//
// Counts per state are maintained incrementally; TopicGet never scans.
//
// Errors: ErrNotFound, ErrConflict (wrong state or stale receipt),
// ErrUnavailable (wrapping the cause) for I/O faults. Validation of names,
// sizes and limits is the engine's job; a Store may assume valid input.
//
// # Rules every backend follows
//
// The engine and the HTTP API rely on one behaviour, so these points are
// fixed for every backend (internal/store/storetest checks them; memstore
// is the reference):
//
//   - Seq increases in insert order within a topic (the order leases need);
//     only its order means anything, never its value.
//   - No headers: nil and an empty map are equivalent and may come back as
//     either; likewise an empty payload.
//   - LeaseUntil is zero outside inflight, DeadAt outside dead, AckedAt
//     outside acked; Receipt is zero outside inflight and acked. An acked
//     tombstone keeps every field except Payload and Headers (dropped) and
//     LeaseUntil: its Receipt is the one that acked it (the engine answers
//     an ack retried with it as the first was; a tombstone not made by an
//     ack, or by an older build, has none).
//   - A receipt is the lease's Token + "-" + the delivery's Deliveries.
//     It never repeats for a message: a lease a crash undid may be
//     handed out again with the same Deliveries, never the same Token.
//   - Ack, Nack and Extend check the receipt, not the clock: a lease whose
//     LeaseUntil has passed but that LeaseExpire has not yet expired is
//     still current.
//   - A topic is known from its first insert or settings put and stays
//     known when its messages are gone, until TopicDelete. MessagePromote, MessageLease,
//     DeadList and the "up to Max" forms of DeadReplay and DeadDelete on an
//     unknown topic answer empty with no error and do not create it;
//     operations naming a message answer ErrNotFound (in MessageAckMany:
//     per item).
//   - Max and Limit are positive (the engine ensures it); a store need not
//     handle values <= 0.
package store

import (
	"cmp"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// State of a record.
type State uint8

// Record states. The zero value is invalid on purpose.
const (
	StateScheduled State = iota + 1
	StateReady
	StateInflight
	StateDead
	StateAcked // tombstone kept for the dedup window; no payload
)

var stateNames = [...]string{"invalid", "scheduled", "ready", "inflight", "dead", "acked"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "invalid"
}

// Record is a stored message.
type Record struct {
	Topic   string
	ID      string
	Seq     uint64
	State   State
	Payload []byte
	Headers map[string]string
	// Priority orders ready messages: lower first (see Ordering).
	Priority uint8

	DueAt     int64 // when it is (or was) due
	CreatedAt int64
	UpdatedAt int64

	Deliveries  int32 // leases so far
	Failures    int32 // nacks + lease expiries
	MaxAttempts int32 // dead when Failures reaches it
	LastError   string

	// Receipt is the current lease's when inflight; when acked, the
	// receipt that acked it; after a nack or a lease expiry, the failed
	// delivery's until the next lease (so the engine can tell a retried
	// nack from a stale one). Records written before a store kept it
	// there may have none. Only an inflight record's is a lease.
	Receipt    string
	LeaseUntil int64 // inflight only
	DeadAt     int64 // dead only
	AckedAt    int64 // acked tombstones only
}

// Store is the persistence seam. Implementations are safe for concurrent use.
type Store interface {
	// MessageInsertMany inserts new messages. A message whose ID exists in
	// the topic in any state (including an acked tombstone not yet purged)
	// is not inserted: its result is the existing record with Duplicate set.
	// An ID repeated within one call is a duplicate of its first
	// occurrence. Messages due at or before now go straight to ready.
	MessageInsertMany(ctx context.Context, p *MessageInsertManyParams) ([]InsertResult, error)

	// MessageGet returns the record (acked tombstones included) or ErrNotFound.
	MessageGet(ctx context.Context, topic, id string) (*Record, error)

	// MessageCancel deletes a scheduled, ready or inflight message (no
	// tombstone: the id may be sent again) and returns it as it was.
	// Dead or acked: ErrConflict. Unknown: ErrNotFound.
	MessageCancel(ctx context.Context, p *MessageCancelParams) (*Record, error)

	// MessageReschedule sets DueAt of a scheduled or ready message (ready
	// when it is due by now, scheduled otherwise) and returns the new record.
	// Inflight, dead, acked: ErrConflict.
	MessageReschedule(ctx context.Context, p *MessageRescheduleParams) (*Record, error)

	// MessagePromote moves up to Max scheduled messages with DueAt <= Now to
	// ready, in (DueAt, Seq) order, atomically per call.
	MessagePromote(ctx context.Context, p *MessagePromoteParams) (*PromoteResult, error)

	// MessageLease takes up to Max ready messages with DueAt <= Now in
	// (Priority, DueAt, Seq) order and makes them inflight (a ready message due after
	// Now can exist when a promotion with a later clock reading raced this
	// call; handing it out would be early by this call's Now, and it does
	// not hold back messages after it that are due): Deliveries+1,
	// LeaseUntil = now + LeaseFor, and Receipt = Token + "-" + Deliveries
	// (see the points above). It does not promote.
	MessageLease(ctx context.Context, p *MessageLeaseParams) ([]*Record, error)

	// MessageAck acknowledges an inflight message whose Receipt matches:
	// the message becomes an acked tombstone (payload dropped, receipt
	// kept) kept until DedupPurge removes it. Wrong receipt or not
	// inflight (acked included, whatever the receipt): ErrConflict.
	// Unknown: ErrNotFound.
	MessageAck(ctx context.Context, p *MessageAckParams) error

	// MessageAckMany acks many in one durable write; one error per item.
	MessageAckMany(ctx context.Context, p *MessageAckManyParams) ([]error, error)

	// MessageNack records a failure of an inflight message whose Receipt
	// matches: Failures+1, LastError; then dead (DeadAt=Now) if Failures
	// reaches MaxAttempts, else scheduled (or ready) at now + RetryDelay.
	// MaxAttempts is used as given (0: the first failure kills); a kill
	// leaves DueAt unchanged. Returns the new record. Wrong receipt or not
	// inflight: ErrConflict.
	MessageNack(ctx context.Context, p *MessageNackParams) (*Record, error)

	// MessageExtend sets LeaseUntil = now + LeaseFor of an inflight message
	// whose Receipt matches. Wrong receipt or not inflight: ErrConflict.
	MessageExtend(ctx context.Context, p *MessageExtendParams) (*Record, error)

	// LeaseExpire treats up to Max inflight messages (of any topic) with
	// LeaseUntil <= Now as failed: Failures+1, LastError "lease expired",
	// then dead or ready (DueAt=Now) as MessageNack does (a kill leaves
	// DueAt unchanged). When Max cuts it short, the earliest LeaseUntil go
	// first; ties are the backend's choice. Returns the new records.
	LeaseExpire(ctx context.Context, p *LeaseExpireParams) ([]*Record, error)

	// DeadList pages dead messages of a topic, oldest DeadAt first. Cursor
	// is opaque ("" for the first page); the returned cursor is "" at the
	// end. A cursor is a position, not an offset: removing items already
	// returned does not make the next page skip any. A cursor the store did
	// not make: ErrBadCursor.
	DeadList(ctx context.Context, p *DeadListParams) ([]*Record, string, error)

	// MessageList pages a topic's messages in one state (scheduled, ready,
	// inflight or dead) in the order of that state's index: (DueAt, Seq)
	// for scheduled, the lease order (Priority, DueAt, Seq) for ready,
	// (LeaseUntil, Seq) for inflight, (DeadAt, Seq) for dead. DueFrom <=
	// DueAt < DueTo bounds scheduled and ready messages (for ready, within
	// each priority) (read from the index, not filtered after a scan); it is
	// ignored for other states. Cursor works as in DeadList (a position,
	// so messages added or removed meanwhile never make a page skip or
	// repeat one that stays put); a page holds up to Limit records and the
	// returned cursor is "" at the end. A store may read its index in
	// time and Seq order, nothing more: it never scans the whole topic.
	MessageList(ctx context.Context, p *MessageListParams) ([]*Record, string, error)

	// DeadReplay moves dead messages back to ready (DueAt=Now, Failures=0,
	// LastError kept). With ID set, only that one (ErrNotFound if it is not
	// dead in the topic); otherwise up to Max of the topic, from the head of
	// the DeadList order. Returns records.
	DeadReplay(ctx context.Context, p *DeadReplayParams) ([]*Record, error)

	// DeadDelete purges dead messages: one (ID set; ErrNotFound if it is not
	// dead) or up to Max of the topic, from the head of the DeadList order.
	// Returns how many were deleted.
	DeadDelete(ctx context.Context, p *DeadDeleteParams) (int, error)

	// DedupPurge deletes acked tombstones with AckedAt <= now - Window, up
	// to Max, earliest AckedAt first (ties are the backend's choice).
	DedupPurge(ctx context.Context, p *DedupPurgeParams) (int, error)

	// TopicGet returns a topic's counts and due times, or ErrNotFound if
	// the topic never had a message or settings.
	TopicGet(ctx context.Context, topic string) (*TopicRecord, error)
	// TopicList returns every known topic, sorted by name.
	TopicList(ctx context.Context) ([]*TopicRecord, error)
	// TopicSettingsPut stores a topic's settings (an opaque, engine-encoded
	// blob), creating the topic if needed.
	TopicSettingsPut(ctx context.Context, topic string, settings []byte) error
	// TopicDelete forgets a topic that holds no scheduled, ready, inflight
	// or dead message: its settings go, and TopicGet and TopicList no
	// longer show it. Its acked tombstones stay until DedupPurge (a send of
	// an acked id within the dedup window is still a duplicate). A later
	// insert call or settings put makes the topic known again, as new. A topic
	// holding messages: ErrConflict, nothing changed. Unknown: ErrNotFound.
	//
	// Whatever the interleaving with a concurrent insert, no message ends
	// up in a topic TopicList does not show: a store either serializes the
	// two, or shows any topic that holds messages, deleted or not.
	TopicDelete(ctx context.Context, topic string) error

	// ScheduleUpsert creates or replaces a recurring schedule's Spec (an
	// opaque, engine-encoded blob). On create, CreatedAt = Now and
	// LastTick = p.LastTick; on replace, CreatedAt is kept and LastTick
	// becomes max(stored, p.LastTick). UpdatedAt = Now. Returns the record.
	ScheduleUpsert(ctx context.Context, p *ScheduleUpsertParams) (*Schedule, error)
	// ScheduleGet returns a schedule or ErrNotFound.
	ScheduleGet(ctx context.Context, name string) (*Schedule, error)
	// ScheduleList returns every schedule, sorted by name.
	ScheduleList(ctx context.Context) ([]*Schedule, error)
	// ScheduleDelete removes a schedule, or answers ErrNotFound.
	ScheduleDelete(ctx context.Context, name string) error
	// ScheduleTick records that the ticks up to Tick were handled:
	// LastTick becomes max(stored, Tick), atomically with respect to
	// ScheduleUpsert (a concurrent upsert's Spec is never overwritten).
	// Spec, CreatedAt and UpdatedAt are unchanged. Unknown: ErrNotFound.
	// Returns the record.
	ScheduleTick(ctx context.Context, p *ScheduleTickParams) (*Schedule, error)

	// Close releases resources. Calls after Close fail with ErrClosed.
	Close() error
}

// Notifier is implemented by stores that several engines share (Redis).
// Each engine subscribes, and the store tells it when any engine made a
// message scheduled or ready, so every engine can arm its timers and wake
// its long-polls without polling.
type Notifier interface {
	// Subscribe calls fn(topic, dueAt) for each notification until ctx
	// ends or the subscription fails; it blocks. dueAt == 0 means "ready
	// now" (stated, not inferred from a clock: a server whose clock lags
	// would read a ready-now notification as "not yet" and leave its
	// long-polls asleep); otherwise dueAt is when a message becomes due, by
	// the store's clock; dueAt == NotifySettings says the topic's
	// settings changed (a store may not announce that: engines' safety
	// sweep re-reads them too). It calls subscribed once the subscription is live, so the
	// caller can re-read the store for anything sent before that moment.
	// Notifications may still be lost (e.g. while reconnecting): engines
	// also run a slow safety sweep.
	Subscribe(ctx context.Context, subscribed func(), fn func(topic string, dueAt int64)) error
}

// NotifySettings is the dueAt a Notifier reports when a topic's settings
// changed (TopicSettingsPut), so every engine re-reads them at once (a
// pause takes effect on every server).
const NotifySettings int64 = -1

// NotifyDue is the dueAt a Notifier reports for r: 0 when r is ready now —
// stated rather than left to the receiver's clock, which may lag the one
// that made r ready — else r's due time.
func NotifyDue(r *Record) int64 {
	if r.State == StateReady {
		return 0
	}
	return r.DueAt
}

// TopicSettingsLister is implemented by stores that can list the topics'
// settings without reading their counts and queues. The push and broker
// delivery watches of every server read every topic's settings every 5 s
// (and at each change); TopicList also sums each topic's counts and reads
// the heads of its queues, which on Redis is a script per topic and
// partition. A store without it is asked for TopicList.
type TopicSettingsLister interface {
	// TopicSettingsList returns, in name order, every topic whose
	// settings were put (TopicSettingsPut) and not deleted since, with
	// Name and Settings set and nothing else. Topics without settings may
	// be left out.
	TopicSettingsList(ctx context.Context) ([]*TopicRecord, error)
}

// Pinger is implemented by stores on a server of their own (a database,
// Redis): Ping answers whether the store takes requests now, in a round
// trip to each server it uses, whatever it holds. Readiness checks, which
// load balancers make every few seconds, call it; a store without it is
// asked for its topic list instead, which reads every topic. The engine
// also groups a topic's concurrent sends, and its acks, into one write
// for such a store (a write there is a round trip and a commit).
type Pinger interface {
	Ping(ctx context.Context) error
}

// Clock is implemented by stores that judge time by a clock of their own
// (Redis TIME): they ignore each call's Now where a decision depends on
// time. The engine reads StoreNow to estimate the offset between its clock
// and the store's, so that it arms its timers at the store's instants
// rather than at the same numbers on its own clock.
type Clock interface {
	// StoreNow reads the store's time (Unix ms). ok is false when this
	// store judges time by each call's Now after all (a test mode), and the
	// engine then uses its own clock.
	StoreNow(ctx context.Context) (now int64, ok bool, err error)
}

// RateLimiter is implemented by stores that several engines share
// (Redis), so that a topic's rate limit holds across all of them. Engines
// on other stores use a local token bucket.
type RateLimiter interface {
	// RateTake takes up to p.N tokens from the topic's bucket (refilled
	// at PerSecond, holding at most Burst; a bucket never seen is full)
	// and answers how many it granted. When it granted fewer than N,
	// retryAfter is how long until the next token. p.N < 0 returns -N
	// tokens (unused ones) to the bucket, capped at Burst, granting 0.
	RateTake(ctx context.Context, p *RateTakeParams) (granted int, retryAfter time.Duration, err error)
}

// DueLeaser is implemented by stores whose lease can take a scheduled
// message that is due without its promotion first (PostgreSQL: one
// transaction and WAL flush between due and lease instead of two). The
// engine then wakes a topic's waiting long-polls when its timer fires and
// promotes only what they left unleased for longer than a grace.
type DueLeaser interface {
	// MessageLeaseDue is MessageLease over the ready messages due by Now
	// and the scheduled messages due by Now, as if promoted first: up to
	// Max in (Priority, DueAt, Seq) order among the first Max of each.
	MessageLeaseDue(ctx context.Context, p *MessageLeaseParams) ([]*Record, error)
	// MessagePromoteGrace is MessagePromote of the messages due by
	// now − grace (ms). HeldDue is the earliest scheduled message due by
	// now (left to the leases, or held by another transaction; 0: none),
	// NextDue the earliest due after now (0: none), unless Max cut the
	// call short; Now is the now it judged by, not shifted by grace.
	// A store may instead answer Busy (nothing done) rather than wait
	// for a lease holding the topic: that lease takes what is due.
	MessagePromoteGrace(ctx context.Context, p *MessagePromoteParams, grace int64) (*PromoteResult, error)
}

// NextDueLeaser is a DueLeaser whose due lease also reports when the
// topic's next scheduled message comes due. The engine's timer, having
// woken a long-poll, then leaves the store alone and lets that lease
// tell it when to fire next: one store call per release instead of two
// (the lease and a promotion that, on a queue whose consumers keep up,
// finds nothing to promote).
type NextDueLeaser interface {
	DueLeaser
	// MessageLeaseDueNext is MessageLeaseDue, reporting what it left.
	MessageLeaseDueNext(ctx context.Context, p *MessageLeaseParams) (*LeaseDueResult, error)
	// ReportsNextDue is false when this store's MessageLeaseDueNext
	// cannot report NextDue (the engine then asks MessagePromoteGrace).
	ReportsNextDue() bool
}

// LeaseDueResult is what NextDueLeaser.MessageLeaseDueNext answers.
type LeaseDueResult struct {
	Records []*Record
	// NextDue is at most the DueAt of the earliest message left scheduled
	// (0: none): firing then finds it due or finds nothing, never misses
	// it. It may be <= Now when the lease left due messages (Max).
	NextDue int64
	// Now is the time the store judged "due" by: 0 means Params.Now, as
	// PromoteResult.Now.
	Now int64
}

// RateTakeParams are the arguments of RateTake.
type RateTakeParams struct {
	Topic     string
	N         int
	PerSecond float64
	Burst     int
	// Now is the caller's time (Unix ms); a store with its own clock
	// (Redis TIME) may ignore it.
	Now int64
}

// Schedule is a stored recurring schedule. Times are Unix ms.
type Schedule struct {
	Name string
	// Spec is the engine-encoded definition (cron, zone, topic, template,
	// paused, missed policy), opaque to the store.
	Spec []byte
	// LastTick is the latest tick handled (fired or deliberately
	// skipped); it only moves forward.
	LastTick  int64
	CreatedAt int64
	UpdatedAt int64
}

// ScheduleUpsertParams are the arguments of ScheduleUpsert.
type ScheduleUpsertParams struct {
	Name     string
	Spec     []byte
	LastTick int64
	Now      int64
}

// ScheduleTickParams are the arguments of ScheduleTick.
type ScheduleTickParams struct {
	Name string
	Tick int64
}

// InsertMessage is one message to insert.
type InsertMessage struct {
	ID      string
	Payload []byte
	Headers map[string]string
	// DueAt is an absolute due time (deliver_at), used when Relative is
	// false. With Relative, the due time is the store's now + Delay (ms).
	DueAt       int64
	Relative    bool
	Delay       int64
	MaxAttempts int32
	// Priority orders the message among ready ones (see Ordering).
	Priority uint8
	// Generated says the engine made ID (a ULID: ms time, then 80 random
	// bits incremented within a ms) rather than the sender, so it is new
	// (a clash needs 80 random bits to repeat in the same ms) and a store
	// may skip its duplicate lookup. Stores may ignore it.
	Generated bool
}

// Due resolves the message's due time against the store's now.
func (m *InsertMessage) Due(now int64) int64 { return resolveDue(m.DueAt, m.Relative, m.Delay, now) }

func resolveDue(at int64, relative bool, delay, now int64) int64 {
	if relative {
		return now + delay
	}
	return at
}

// MessageInsertManyParams are the arguments of MessageInsertMany.
type MessageInsertManyParams struct {
	Topic    string
	Now      int64
	Messages []InsertMessage
	// SenderKeepsBodies says the caller has the Payload and Headers it
	// sent and leaves them unchanged: a new message's answer may carry
	// them nil instead of a copy (a payload copied per message only to be
	// dropped by a caller that answers without it). A duplicate's answer
	// still carries the stored ones. Stores may ignore it.
	SenderKeepsBodies bool
}

// InsertResult is one item of MessageInsertMany's answer.
type InsertResult struct {
	Record    *Record
	Duplicate bool
}

// MessageCancelParams are the arguments of MessageCancel.
type MessageCancelParams struct {
	Topic string
	ID    string
	Now   int64
}

// MessageRescheduleParams are the arguments of MessageReschedule. The new
// due time is DueAt, or the store's now + Delay (ms) with Relative.
type MessageRescheduleParams struct {
	Topic    string
	ID       string
	DueAt    int64
	Relative bool
	Delay    int64
	Now      int64
}

// Due resolves the new due time against the store's now.
func (p *MessageRescheduleParams) Due(now int64) int64 {
	return resolveDue(p.DueAt, p.Relative, p.Delay, now)
}

// MessagePromoteParams are the arguments of MessagePromote.
type MessagePromoteParams struct {
	Topic string
	Now   int64
	Max   int
}

// PromoteResult says what MessagePromote did.
type PromoteResult struct {
	Promoted int
	// NextDue is the DueAt of the earliest message still scheduled after
	// the call (0 if none); it may be <= Now when Max cut the call short.
	NextDue int64
	// Now is the time the store judged "due" by: 0 means Params.Now. A
	// backend with its own time source (Redis TIME) reports it, so the
	// engine sleeps NextDue-Now rather than trusting its own clock.
	Now int64
	// HeldDue: see DueLeaser.MessagePromoteGrace (0 from MessagePromote).
	HeldDue int64
	// Busy: MessagePromoteGrace did nothing because another call held
	// the topic; the caller retries shortly (false from MessagePromote).
	Busy bool
}

// MessageLeaseParams are the arguments of MessageLease.
type MessageLeaseParams struct {
	Topic string
	Now   int64
	Max   int
	// LeaseFor is the lease's length (ms, > 0): LeaseUntil = now + LeaseFor.
	LeaseFor int64
	// Token is a random string unique to this call, for making receipts.
	Token string
}

// MessageAckParams are the arguments of MessageAck.
type MessageAckParams struct {
	Topic   string
	ID      string
	Receipt string
	Now     int64
}

// AckItem is one item of MessageAckMany.
type AckItem struct {
	ID      string
	Receipt string
}

// MessageAckManyParams are the arguments of MessageAckMany.
type MessageAckManyParams struct {
	Topic string
	Items []AckItem
	Now   int64
}

// MessageNackParams are the arguments of MessageNack.
type MessageNackParams struct {
	Topic   string
	ID      string
	Receipt string
	Now     int64
	// RetryDelay (ms, >= 0): the message is due again at now + RetryDelay.
	RetryDelay int64
	Error      string
	// Final moves the message to dead letters now, whatever attempts it
	// has left (a handler that knows a retry cannot succeed); the failure
	// is counted as usual and RetryDelay is ignored.
	Final bool
}

// MessageExtendParams are the arguments of MessageExtend.
type MessageExtendParams struct {
	Topic   string
	ID      string
	Receipt string
	Now     int64
	// LeaseFor (ms, > 0): the lease now ends at now + LeaseFor.
	LeaseFor int64
}

// LeaseExpireParams are the arguments of LeaseExpire.
type LeaseExpireParams struct {
	Now int64
	Max int
}

// DeadListParams are the arguments of DeadList.
type DeadListParams struct {
	Topic  string
	Limit  int
	Cursor string
}

// MessageListParams are the arguments of MessageList.
type MessageListParams struct {
	Topic string
	State State // scheduled, ready, inflight or dead
	// DueFrom and DueTo bound DueAt of scheduled and ready messages:
	// DueFrom <= DueAt < DueTo. Unbounded: math.MinInt64, math.MaxInt64.
	DueFrom, DueTo int64
	Limit          int
	Cursor         string
}

// ListKey is the time a record of MessageList's state is ordered by.
func ListKey(r *Record) int64 {
	switch r.State {
	case StateInflight:
		return r.LeaseUntil
	case StateDead:
		return r.DeadAt
	}
	return r.DueAt
}

// ListPosition is a place in MessageList's order: (Priority, Key, Seq),
// where Priority counts only for ready messages (0 in other states).
type ListPosition struct {
	Priority uint8
	Key      int64
	Seq      uint64
}

// ListPositionOf is r's place in MessageList's order for r's state.
func ListPositionOf(r *Record) ListPosition {
	p := ListPosition{Key: ListKey(r), Seq: r.Seq}
	if r.State == StateReady {
		p.Priority = r.Priority
	}
	return p
}

// Compare orders positions: -1, 0 or +1 as p is before, at or after q.
func (p ListPosition) Compare(q ListPosition) int {
	return cmp.Or(cmp.Compare(p.Priority, q.Priority), cmp.Compare(p.Key, q.Key), cmp.Compare(p.Seq, q.Seq))
}

// ListCursor is the position after r in MessageList's order, "key.seq",
// or "key.seq.priority" for a ready message of a priority other than 0:
// a format every store can use (stores may make their own).
func ListCursor(r *Record) string {
	p := ListPositionOf(r)
	c := strconv.FormatInt(p.Key, 10) + "." + strconv.FormatUint(p.Seq, 10)
	if p.Priority != 0 {
		c += "." + strconv.FormatUint(uint64(p.Priority), 10)
	}
	return c
}

// ParseListCursor reads a cursor of ListCursor; ErrBadCursor otherwise.
func ParseListCursor(c string) (ListPosition, error) {
	parts := strings.Split(c, ".")
	if len(parts) == 2 || len(parts) == 3 {
		k, err1 := strconv.ParseInt(parts[0], 10, 64)
		q, err2 := strconv.ParseUint(parts[1], 10, 64)
		var prio uint64
		var err3 error
		if len(parts) == 3 {
			prio, err3 = strconv.ParseUint(parts[2], 10, 8)
		}
		if err1 == nil && err2 == nil && err3 == nil {
			return ListPosition{Priority: uint8(prio), Key: k, Seq: q}, nil
		}
	}
	return ListPosition{}, fmt.Errorf("invalid list cursor %q: %w", c, ErrBadCursor)
}

// DeadReplayParams are the arguments of DeadReplay.
type DeadReplayParams struct {
	Topic string
	ID    string // empty: up to Max of the topic
	Now   int64
	Max   int
}

// DeadDeleteParams are the arguments of DeadDelete.
type DeadDeleteParams struct {
	Topic string
	ID    string // empty: up to Max of the topic
	Max   int
}

// DedupPurgeParams are the arguments of DedupPurge: tombstones acked at
// or before now - Window go.
type DedupPurgeParams struct {
	Now    int64
	Window int64 // ms
	Max    int
}

// TopicRecord is a topic's stored state.
type TopicRecord struct {
	Name     string
	Settings []byte // as given to TopicSettingsPut; nil if never set
	Counts   Counts
	// NextDue is the DueAt of the earliest scheduled message (0 if none).
	NextDue int64
	// OldestReady is the least DueAt among ready messages, whatever their
	// priority (0 if none).
	OldestReady int64
	// NextLeaseExpiry is the earliest LeaseUntil of an inflight message (0 if none).
	NextLeaseExpiry int64
}

// Counts are messages per state in a topic.
type Counts struct {
	Scheduled int64
	Ready     int64
	Inflight  int64
	Dead      int64
	Acked     int64 // tombstones currently kept
}

// Live counts the messages that keep a topic from TopicDelete: all but
// acked tombstones.
func (c Counts) Live() int64 { return c.Scheduled + c.Ready + c.Inflight + c.Dead }
