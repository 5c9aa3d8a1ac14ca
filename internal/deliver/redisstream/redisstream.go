// Package redisstream is the Redis Streams target of broker delivery:
// each message is one XADD (MAXLEN ~ when a maximum length is set) with
// the fields id, topic, attempt, payload and headers (a JSON object),
// pipelined per batch. A message counts as confirmed when its XADD
// answered an entry id.
//
// Streams cannot dedup: a message redelivered after a lost answer is
// added again; consumers dedup by the id field.
package redisstream

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/deliver"
	"github.com/delayq/delayq/internal/domain"
)

// Config configures a Target.
type Config struct {
	Target domain.RedisTarget
}

// Target XADDs to one stream.
type Target struct {
	rdb    *redis.Client
	stream string
	maxLen int64
}

var _ deliver.Target = (*Target)(nil)

// New makes a Target. It does not connect: the first Publish does.
func New(_ context.Context, cfg Config) (*Target, error) {
	r := cfg.Target
	if r.Addr == "" || r.Stream == "" {
		return nil, errors.New("redis: addr and stream are required")
	}
	var tc *tls.Config
	tc, err := deliver.TLSOf(r.TLS).Config()
	if err != nil {
		return nil, fmt.Errorf("redis: %w", err)
	}
	rdb := redis.NewClient(&redis.Options{
		Addr: r.Addr, Username: r.Username, Password: r.Password, DB: r.DB, TLSConfig: tc,
		// delayq retries with the topic's backoff; a client retry would
		// only stretch a publish past its timeout.
		MaxRetries: -1,
		PoolSize:   4,
		// Publish's ctx bounds every call.
		ContextTimeoutEnabled: true,
		// No CLIENT SETINFO: older servers and proxies refuse it.
		DisableIdentity: true,
	})
	return &Target{rdb: rdb, stream: r.Stream, maxLen: r.MaxLen}, nil
}

// Fields are the stream entry's fields for m.
func Fields(m deliver.Message) []any {
	h, _ := json.Marshal(m.Headers) // map[string]string: cannot fail
	if m.Headers == nil {
		h = []byte("{}")
	}
	return []any{"id", m.ID, "topic", m.Topic, "attempt", strconv.Itoa(m.Attempt), "priority", strconv.Itoa(m.Priority), "payload", m.Payload, "headers", string(h)}
}

// Publish XADDs msgs in one pipeline and waits for the answers.
func (t *Target) Publish(ctx context.Context, msgs []deliver.Message) []error {
	pipe := t.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(msgs))
	for i, m := range msgs {
		a := &redis.XAddArgs{Stream: t.stream, Values: Fields(m)}
		if t.maxLen > 0 {
			a.MaxLen, a.Approx = t.maxLen, true
		}
		cmds[i] = pipe.XAdd(ctx, a)
	}
	_, _ = pipe.Exec(ctx) // each command carries its own error
	errs := make([]error, len(msgs))
	for i, c := range cmds {
		if err := c.Err(); err != nil {
			errs[i] = fmt.Errorf("redis: XADD %s: %w", t.stream, err)
		} else if c.Val() == "" {
			errs[i] = fmt.Errorf("redis: XADD %s answered no entry id", t.stream)
		}
	}
	return errs
}

// Close closes the connections.
func (t *Target) Close() error { return t.rdb.Close() }
