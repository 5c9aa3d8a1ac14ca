// Package natsjs is the NATS JetStream delivery target: it publishes due
// messages to one subject that a JetStream stream captures, and counts a
// message as delivered once the stream's PubAck for it arrived.
//
// Every message carries Nats-Msg-Id = the delayq message id, so a
// redelivery inside the stream's duplicate window (2 minutes by default)
// is dropped by JetStream and acknowledged as a duplicate, which the
// target treats as delivered. Delayq-Topic, Delayq-Attempt, Delayq-Priority and the
// message's own headers are carried too; a user header named Nats-* is
// not, since JetStream reads those as instructions. A subject no stream
// captures fails each message with an error saying so.
//
// Delayed delivery in NATS itself: the nats-server 2.9 line (2.9.10 is the
// Debian package) has none on the publishing side; a consumer can only
// postpone redelivery of what it already received (NakWithDelay, a
// consumer BackOff). Message schedules arrived in nats-server 2.12: a
// stream with allow_msg_schedules keeps a message published with
// "Nats-Schedule: @at <RFC 3339 time>" and, at that time, publishes its
// body to the Nats-Schedule-Target subject of the same stream (2.14 added
// @every, cron and time zones; the v2.15 Go module has all of it). A
// schedule is keyed by its subject, so one pending message needs a
// subject of its own, cancelling is purging that subject, and listing,
// rescheduling, per-topic retries with backoff and dead letters are left
// to the application. delayq keeps all of that in its own store and uses
// JetStream only as the destination, which works with any JetStream
// server, 2.9 included.
package natsjs
