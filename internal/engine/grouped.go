package engine

import (
	"context"

	"github.com/delayq/delayq/internal/store"
)

// insert writes msgs to topic t: grouped with the topic's other sends
// where the store is remote (writegroup.go), else at once (now is the
// sender's). A new message's answer may lack its payload and headers
// (store.MessageInsertManyParams.SenderKeepsBodies): sendBatch has them.
func (e *Engine) insert(ctx context.Context, t *topic, now int64, msgs []store.InsertMessage) ([]store.InsertResult, error) {
	if e.groupWrites {
		return t.sends.do(ctx, e.sendWriter(t), msgs)
	}
	ins, err := e.st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: t.name, Now: now, Messages: msgs, SenderKeepsBodies: true})
	if err != nil {
		return nil, err
	}
	e.afterInsert(t, ins)
	return ins, nil
}

// sendWriter writes a round of t's sends.
func (e *Engine) sendWriter(t *topic) groupWriter[store.InsertMessage, store.InsertResult] {
	return groupWriter[store.InsertMessage, store.InsertResult]{
		size: func(m store.InsertMessage) int { return len(m.Payload) },
		write: func(ctx context.Context, msgs []store.InsertMessage) ([]store.InsertResult, error) {
			// The store's now is read at the write: a relative due time
			// is that now plus the delay, never earlier than the
			// sender's now plus it. Repeated ids are the store's to
			// settle (the later ones are duplicates), as in one batch.
			ins, err := e.st.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: t.name, Now: e.now(), Messages: msgs, SenderKeepsBodies: true})
			if err == nil && len(ins) == len(msgs) {
				e.afterInsert(t, ins)
			}
			return ins, err
		},
	}
}

// ackMany acks items of topic: grouped with the topic's other acks where
// the store is remote, else at once. Its answer has an error per item.
func (e *Engine) ackMany(ctx context.Context, topic string, items []store.AckItem) ([]error, error) {
	if !e.groupWrites {
		return e.st.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Items: items, Now: e.now()})
	}
	return e.topic(topic).acks.do(ctx, groupWriter[store.AckItem, error]{
		size: func(it store.AckItem) int { return len(it.ID) + len(it.Receipt) },
		// Two acks of one message in one write would be the store's to
		// order; in two writes the second is answered as it always was.
		key: func(it store.AckItem) string { return it.ID },
		write: func(ctx context.Context, items []store.AckItem) ([]error, error) {
			return e.st.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: topic, Items: items, Now: e.now()})
		},
	}, items)
}
