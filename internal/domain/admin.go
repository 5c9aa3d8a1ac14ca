package domain

import (
	"context"
	"time"
)

// TopicAdmin browses a topic's messages, changes them in bulk and pauses
// topics: what a dashboard or an operator's CLI needs. The engine
// and the HTTP Client implement it. It is separate from Queue so that
// Queue stays stable.
//
// Implementations are safe for concurrent use.
type TopicAdmin interface {
	// ListMessages pages a topic's messages in one state (see
	// MessageFilter for the order).
	ListMessages(ctx context.Context, topic string, req ListRequest) (*MessagePage, error)
	// CancelMessages removes the scheduled or ready messages the filter
	// selects (inflight ones are never cancelled in bulk: a consumer holds
	// them) and answers how many it removed.
	CancelMessages(ctx context.Context, topic string, f MessageFilter) (int, error)
	// RescheduleMessages moves the scheduled or ready messages the filter
	// selects to a new due time and answers how many it moved.
	RescheduleMessages(ctx context.Context, topic string, f MessageFilter, when When) (int, error)
	// PauseTopic pauses (true) or resumes (false) a topic: while paused
	// nothing is leased, pushed or delivered to a broker on any server
	// sharing the store; sends are still accepted and due messages stay
	// due. It answers the topic.
	PauseTopic(ctx context.Context, topic string, paused bool) (*TopicInfo, error)
	// DeleteTopic forgets a topic that holds no scheduled, ready, inflight
	// or dead message: its settings (push and broker targets, rate limit,
	// pause) go and it is no longer listed. Acked messages stay in the
	// dedup window. A topic holding messages: ErrConflict, naming them;
	// unknown: ErrNotFound. A later send or settings change makes the
	// topic again, as new.
	DeleteTopic(ctx context.Context, topic string) error
}

// MessageFilter selects a topic's messages in one state. Scheduled and
// ready messages are in due-time order (then send order) and DueAfter
// (inclusive) and DueBefore (exclusive) bound their due time; inflight
// messages are in lease-expiry order and dead ones in order of death,
// and take no due-time bounds.
type MessageFilter struct {
	State     State
	DueAfter  time.Time // zero: no bound
	DueBefore time.Time // zero: no bound
}

// ListRequest asks for one page of ListMessages.
type ListRequest struct {
	Filter MessageFilter
	Limit  int    // 1..MaxListLimit; 0: DefaultListLimit
	Cursor string // "" for the first page
}

// MessagePage is one page of messages; Next is empty on the last page.
type MessagePage struct {
	Messages []*Message
	Next     string
}

// Page sizes of ListMessages.
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)
