package delayqtest

import (
	"context"
	"time"

	"github.com/delayq/delayq"
)

// The delayq.Queue and delayq.Scheduler methods, with the engine's
// semantics. Times are the queue's clock's.

// Send implements delayq.Queue.
func (q *Queue) Send(ctx context.Context, topic string, req delayq.SendRequest) (*delayq.Message, error) {
	return q.e.Send(ctx, topic, req)
}

// SendBatch implements delayq.Queue.
func (q *Queue) SendBatch(ctx context.Context, topic string, reqs []delayq.SendRequest) ([]delayq.SendResult, error) {
	return q.e.SendBatch(ctx, topic, reqs)
}

// Get implements delayq.Queue.
func (q *Queue) Get(ctx context.Context, topic, id string) (*delayq.Message, error) {
	return q.e.Get(ctx, topic, id)
}

// Cancel implements delayq.Queue.
func (q *Queue) Cancel(ctx context.Context, topic, id string) (*delayq.Message, error) {
	return q.e.Cancel(ctx, topic, id)
}

// Reschedule implements delayq.Queue.
func (q *Queue) Reschedule(ctx context.Context, topic, id string, when delayq.When) (*delayq.Message, error) {
	return q.e.Reschedule(ctx, topic, id, when)
}

// Lease implements delayq.Queue. Its Wait runs on the real clock; after
// Advance, a Lease without Wait finds every message that came due.
func (q *Queue) Lease(ctx context.Context, topic string, req delayq.LeaseRequest) ([]*delayq.Message, error) {
	return q.e.Lease(ctx, topic, req)
}

// Ack implements delayq.Queue.
func (q *Queue) Ack(ctx context.Context, topic, id, receipt string) error {
	return q.e.Ack(ctx, topic, id, receipt)
}

// AckBatch implements delayq.Queue.
func (q *Queue) AckBatch(ctx context.Context, topic string, acks []delayq.AckRequest) ([]error, error) {
	return q.e.AckBatch(ctx, topic, acks)
}

// Nack implements delayq.Queue.
func (q *Queue) Nack(ctx context.Context, topic, id, receipt string, req delayq.NackRequest) (*delayq.Message, error) {
	return q.e.Nack(ctx, topic, id, receipt, req)
}

// Extend implements delayq.Queue.
func (q *Queue) Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*delayq.Message, error) {
	return q.e.Extend(ctx, topic, id, receipt, lease)
}

// Topics implements delayq.Queue.
func (q *Queue) Topics(ctx context.Context) ([]delayq.TopicInfo, error) { return q.e.Topics(ctx) }

// Topic implements delayq.Queue.
func (q *Queue) Topic(ctx context.Context, topic string) (*delayq.TopicInfo, error) {
	return q.e.Topic(ctx, topic)
}

// SetTopicSettings implements delayq.Queue.
func (q *Queue) SetTopicSettings(ctx context.Context, topic string, s delayq.TopicSettings) (*delayq.TopicSettings, error) {
	return q.e.SetTopicSettings(ctx, topic, s)
}

// DeadList implements delayq.Queue.
func (q *Queue) DeadList(ctx context.Context, topic string, req delayq.DeadListRequest) (*delayq.DeadPage, error) {
	return q.e.DeadList(ctx, topic, req)
}

// DeadReplay implements delayq.Queue.
func (q *Queue) DeadReplay(ctx context.Context, topic, id string) (*delayq.Message, error) {
	return q.e.DeadReplay(ctx, topic, id)
}

// DeadReplayAll implements delayq.Queue.
func (q *Queue) DeadReplayAll(ctx context.Context, topic string) (int, error) {
	return q.e.DeadReplayAll(ctx, topic)
}

// DeadDelete implements delayq.Queue.
func (q *Queue) DeadDelete(ctx context.Context, topic, id string) error {
	return q.e.DeadDelete(ctx, topic, id)
}

// DeadPurge implements delayq.Queue.
func (q *Queue) DeadPurge(ctx context.Context, topic string) (int, error) {
	return q.e.DeadPurge(ctx, topic)
}

// ScheduleSet implements delayq.Scheduler. Ticks count on the queue's
// clock; Advance fires a schedule at most once (its latest tick).
func (q *Queue) ScheduleSet(ctx context.Context, s delayq.Schedule) (*delayq.Schedule, error) {
	return q.e.ScheduleSet(ctx, s)
}

// ScheduleGet implements delayq.Scheduler.
func (q *Queue) ScheduleGet(ctx context.Context, name string) (*delayq.Schedule, error) {
	return q.e.ScheduleGet(ctx, name)
}

// ScheduleList implements delayq.Scheduler.
func (q *Queue) ScheduleList(ctx context.Context) ([]delayq.Schedule, error) {
	return q.e.ScheduleList(ctx)
}

// ScheduleDelete implements delayq.Scheduler.
func (q *Queue) ScheduleDelete(ctx context.Context, name string) error {
	return q.e.ScheduleDelete(ctx, name)
}

// SchedulePause implements delayq.Scheduler.
func (q *Queue) SchedulePause(ctx context.Context, name string, paused bool) (*delayq.Schedule, error) {
	return q.e.SchedulePause(ctx, name, paused)
}
