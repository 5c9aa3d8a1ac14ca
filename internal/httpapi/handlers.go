package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// maxReasonBytes bounds a nack reason (it becomes the message's last_error).
const maxReasonBytes = 4 << 10

// maxCursorBytes bounds a dead-letter page cursor.
const maxCursorBytes = 1 << 10

// empty is the body of endpoints that take none: {} or nothing at all.
type empty struct{}

func (s *Server) send(c *call) (int, any, error) {
	var in wire.SendRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	req, err := in.ToDomain()
	if err != nil {
		return 0, nil, err
	}
	req.Headers = s.withTraceparent(c.r.Context(), req.Headers)
	m, err := s.cfg.Queue.Send(c.r.Context(), c.topic, req)
	if err != nil {
		return 0, nil, in.NameFields(err)
	}
	if m.Duplicate {
		return http.StatusOK, wire.FromSentMessage(m), nil
	}
	return http.StatusCreated, wire.FromSentMessage(m), nil
}

// sendBatch converts and checks every item first: one malformed item, or
// one the engine would refuse by its limits (Limits.CheckSend, which the
// engine applies again), rejects the whole batch with 400 or 413 naming it
// (messages[i].field), so nothing is stored. Engine outcomes that depend
// on the clock or the store (duplicates, deliver_at and max_attempts
// bounds) come back per item in a 200.
func (s *Server) sendBatch(c *call) (int, any, error) {
	var in wire.SendBatchRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if len(in.Messages) == 0 || len(in.Messages) > domain.MaxBatch {
		return 0, nil, domain.Invalid("messages", "must have 1 to %d items, got %d", domain.MaxBatch, len(in.Messages))
	}
	reqs := make([]domain.SendRequest, len(in.Messages))
	for i, raw := range in.Messages {
		prefix := "messages[" + strconv.Itoa(i) + "]"
		var item wire.SendRequest
		if err := wire.DecodeSendItem(raw, &item, prefix); err != nil {
			return 0, nil, err
		}
		req, err := item.ToDomain()
		if err == nil {
			err = item.NameFields(s.cfg.Limits.CheckSend(req))
		}
		if err != nil {
			return 0, nil, prefixed(prefix+".", err)
		}
		req.Headers = s.withTraceparent(c.r.Context(), req.Headers)
		reqs[i] = req
	}
	res, err := s.cfg.Queue.SendBatch(c.r.Context(), c.topic, reqs)
	if err != nil {
		return 0, nil, err
	}
	out := wire.SendBatchResponse{Results: make([]wire.BatchResult, len(res))}
	for i, r := range res {
		if r.Err != nil {
			_, eb := toHTTP(r.Err)
			out.Results[i].Error = &eb
			continue
		}
		out.Results[i].Message = wire.FromSentMessage(r.Message)
	}
	return http.StatusOK, out, nil
}

func (s *Server) get(c *call) (int, any, error) {
	m, err := s.cfg.Queue.Get(c.r.Context(), c.topic, c.id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromMessage(m), nil
}

func (s *Server) cancel(c *call) (int, any, error) {
	m, err := s.cfg.Queue.Cancel(c.r.Context(), c.topic, c.id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CancelResponse{Cancelled: true, PriorState: string(m.State), Message: wire.FromMessage(m)}, nil
}

func (s *Server) reschedule(c *call) (int, any, error) {
	var in wire.RescheduleRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	when, err := in.ToDomain()
	if err != nil {
		return 0, nil, err
	}
	m, err := s.cfg.Queue.Reschedule(c.r.Context(), c.topic, c.id, when)
	if err != nil {
		return 0, nil, in.NameFields(err)
	}
	return http.StatusOK, wire.FromMessage(m), nil
}

// lease long-polls up to wait. The wait ends early when the client goes
// away (the request context) or the server starts draining; both answer
// an empty list, never an error, so a draining server lets consumers move
// on at once.
func (s *Server) lease(c *call) (int, any, error) {
	var in wire.LeaseRequest
	if err := wire.DecodeStrict(c.body, &in, true); err != nil {
		return 0, nil, err
	}
	req := domain.LeaseRequest{Max: 1}
	if in.Max != nil {
		if *in.Max < 1 || *in.Max > domain.MaxBatch {
			return 0, nil, domain.Invalid("max", "must be between 1 and %d, got %d", domain.MaxBatch, *in.Max)
		}
		req.Max = *in.Max
	}
	if in.Lease != nil {
		if *in.Lease <= 0 {
			return 0, nil, domain.Invalid("lease", "must be positive (omit it for the topic's default)")
		}
		req.Lease = time.Duration(*in.Lease)
	}
	if in.Wait != nil {
		if *in.Wait < 0 || time.Duration(*in.Wait) > domain.MaxWait {
			return 0, nil, domain.Invalid("wait", "must be between 0s and %s, got %s", domain.MaxWait, time.Duration(*in.Wait))
		}
		req.Wait = time.Duration(*in.Wait)
	}
	acks, err := ackRequests(in.Acks)
	if err != nil {
		return 0, nil, err
	}
	var ackResults []wire.AckResult
	if len(acks) > 0 {
		// Durable before the lease looks: a lease that then fails or
		// finds nothing still answers them.
		if ackResults, err = s.ackAll(c.r.Context(), c.topic, acks); err != nil {
			return 0, nil, err
		}
	}
	ctx, cancel := context.WithCancel(c.r.Context())
	defer cancel()
	stop := context.AfterFunc(s.drainCtx, cancel)
	defer stop()
	msgs, err := s.cfg.Queue.Lease(ctx, c.topic, req)
	if err != nil {
		if ctx.Err() == nil && !(s.Draining() && errors.Is(err, domain.ErrUnavailable)) {
			if len(acks) > 0 {
				// The acks were carried out: say so, and that the
				// lease failed (the client sends them again: acks are
				// idempotent, so that answers ok).
				return 0, nil, fmt.Errorf("%w (the request's %d acks were carried out)", err, len(acks))
			}
			return 0, nil, err
		}
		msgs = nil // client gone or draining: nothing was handed out
	}
	// Read before the answer goes: once it has, a client that closes its
	// connection after reading it (curl) ends the context too.
	gone := c.r.Context().Err() != nil
	if !writeLease(c.w, msgs, ackResults) {
		writeJSON(c.w, http.StatusOK, wire.MessagesResponse{Messages: wire.FromMessages(msgs), Acks: ackResults})
	}
	if len(msgs) > 0 {
		s.giveBackUndelivered(c, msgs, gone)
	}
	return 0, nil, nil
}

// undeliveredReason is the failure recorded for a lease given back
// because its answer could not reach the consumer.
const undeliveredReason = "lease answer not delivered: the consumer went away"

// giveBackTimeout bounds giving back the leases of an undelivered answer;
// past it, the leases left run out as any other.
const giveBackTimeout = 10 * time.Second

// giveBackUndelivered ends at once the leases of an answer that cannot
// have reached its consumer: the client hung up while its messages were
// being leased (a long-poll whose caller timed out or was stopped as a
// message came due), or writing the answer failed. Nobody holds those
// messages; left alone they would wait out their lease (30 s by default)
// before another consumer could take them. Each is nacked to be due now,
// which counts a failed delivery, as the lease's expiry would have. An
// answer lost after it left (a proxy timing out as it passed) cannot be
// told from here: its leases run out as before.
// gone says the client hung up before the answer was written.
func (s *Server) giveBackUndelivered(c *call, msgs []*domain.Message, gone bool) {
	// Flushed here rather than after the handler, so that a failed write
	// is seen.
	err := http.NewResponseController(c.w).Flush()
	if err == nil && !gone {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(c.r.Context()), giveBackTimeout)
	defer cancel()
	given := 0
	var firstErr error // of the leases not given back (the store down, the server closing): they run out
	for _, m := range msgs {
		_, err := s.cfg.Queue.Nack(ctx, c.topic, m.ID, m.Receipt, domain.NackRequest{HasDelay: true, Reason: undeliveredReason})
		if err == nil {
			given++
		} else if firstErr == nil {
			firstErr = err
		}
	}
	level, args := slog.LevelInfo, []any{"topic", c.topic, "given_back", given, "of", len(msgs), "request_id", requestID(c.w)}
	if firstErr != nil {
		level, args = slog.LevelWarn, append(args, "err", firstErr)
	}
	s.log.Log(ctx, level, "lease: the consumer went away before its answer was delivered; leases given back", args...)
}

func (s *Server) ack(c *call) (int, any, error) {
	var in wire.AckRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if in.Receipt == "" {
		return 0, nil, domain.Invalid("receipt", "is required")
	}
	if err := s.cfg.Queue.Ack(c.r.Context(), c.topic, c.id, in.Receipt); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.AckResult{ID: c.id, OK: true}, nil
}

func (s *Server) ackBatch(c *call) (int, any, error) {
	var in wire.AckBatchRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if len(in.Acks) == 0 {
		return 0, nil, domain.Invalid("acks", "must have 1 to %d items, got 0", domain.MaxBatch)
	}
	reqs, err := ackRequests(in.Acks)
	if err != nil {
		return 0, nil, err
	}
	results, err := s.ackAll(c.r.Context(), c.topic, reqs)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.AckBatchResponse{Results: results}, nil
}

// ackRequests checks a batch ack's items (of POST …/acks, or a lease's
// acks) and converts them; a malformed one is named by its index.
func ackRequests(items []wire.AckItem) ([]domain.AckRequest, error) {
	if len(items) > domain.MaxBatch {
		// "At most": a lease may carry none; an empty batch ack is
		// refused by ackBatch.
		return nil, domain.Invalid("acks", "must have at most %d items, got %d", domain.MaxBatch, len(items))
	}
	reqs := make([]domain.AckRequest, len(items))
	for i, a := range items {
		if err := domain.ValidateID(a.ID); err != nil {
			return nil, prefixed("acks["+strconv.Itoa(i)+"].", err)
		}
		if a.Receipt == "" {
			return nil, domain.Invalid("acks["+strconv.Itoa(i)+"].receipt", "is required")
		}
		reqs[i] = domain.AckRequest{ID: a.ID, Receipt: a.Receipt}
	}
	return reqs, nil
}

// ackAll acks reqs as one batch and answers each item's outcome, in
// order; the error is the whole call's (nothing acked).
func (s *Server) ackAll(ctx context.Context, topic string, reqs []domain.AckRequest) ([]wire.AckResult, error) {
	errs, err := s.cfg.Queue.AckBatch(ctx, topic, reqs)
	if err != nil {
		return nil, err
	}
	results := make([]wire.AckResult, len(reqs))
	for i, a := range reqs {
		results[i] = wire.AckResult{ID: a.ID, OK: i < len(errs) && errs[i] == nil}
		if i < len(errs) && errs[i] != nil {
			_, eb := toHTTP(errs[i])
			results[i].Error = &eb
		}
	}
	return results, nil
}

func (s *Server) nack(c *call) (int, any, error) {
	var in wire.NackRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if in.Receipt == "" {
		return 0, nil, domain.Invalid("receipt", "is required")
	}
	if len(in.Reason) > maxReasonBytes {
		return 0, nil, domain.Invalid("reason", "is %d bytes, the limit is %d", len(in.Reason), maxReasonBytes)
	}
	req := domain.NackRequest{Reason: in.Reason, Dead: in.Dead}
	if in.Delay != nil {
		req.Delay, req.HasDelay = time.Duration(*in.Delay), true
	}
	m, err := s.cfg.Queue.Nack(c.r.Context(), c.topic, c.id, in.Receipt, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromMessage(m), nil
}

func (s *Server) extend(c *call) (int, any, error) {
	var in wire.ExtendRequest
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	switch {
	case in.Receipt == "":
		return 0, nil, domain.Invalid("receipt", "is required")
	case in.Lease == nil:
		return 0, nil, domain.Invalid("lease", "is required, e.g. \"30s\"")
	case *in.Lease <= 0:
		return 0, nil, domain.Invalid("lease", "must be positive")
	}
	m, err := s.cfg.Queue.Extend(c.r.Context(), c.topic, c.id, in.Receipt, time.Duration(*in.Lease))
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromMessage(m), nil
}

// topics lists the topics the caller may read (all of them with auth off).
func (s *Server) topics(c *call) (int, any, error) {
	infos, err := s.cfg.Queue.Topics(c.r.Context())
	if err != nil {
		return 0, nil, err
	}
	now := s.cfg.Now()
	out := wire.TopicsResponse{Topics: []wire.Topic{}}
	for i := range infos {
		if c.allowed(auth.Consume, infos[i].Name) {
			out.Topics = append(out.Topics, wire.FromTopicInfo(&infos[i], now))
		}
	}
	return http.StatusOK, out, nil
}

func (s *Server) topic(c *call) (int, any, error) {
	info, err := s.cfg.Queue.Topic(c.r.Context(), c.topic)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTopicInfo(info, s.cfg.Now()), nil
}

func (s *Server) putTopic(c *call) (int, any, error) {
	var in wire.TopicSettings
	if err := wire.DecodeStrict(c.body, &in, false); err != nil {
		return 0, nil, err
	}
	if err := in.ResolveMS(); err != nil {
		return 0, nil, err
	}
	if err := checkSettingsShape(&in); err != nil {
		return 0, nil, err
	}
	set := in.ToDomain()
	if err := s.checkPushURL(c, set); err != nil {
		return 0, nil, err
	}
	// A PUT replaces every setting: one that sets, say, a rate limit on a
	// push topic without repeating its push target turns push delivery
	// off. Allowed (it is what PUT means), but said, in the answer and the
	// log, since it usually is a mistake PATCH avoids.
	var dropped string
	if set.Push == nil {
		if info, err := s.cfg.Queue.Topic(c.r.Context(), c.topic); err == nil && info.Settings.Push != nil {
			dropped = info.Settings.Push.URL
		}
	}
	got, err := s.cfg.Queue.SetTopicSettings(c.r.Context(), c.topic, set)
	if err != nil {
		return 0, nil, err
	}
	out := wire.FromTopicSettings(*got)
	if dropped != "" {
		out.Warning = fmt.Sprintf("push delivery to %s removed (with its secret): PUT replaces all settings and this body has no push; use PATCH /v1/topics/%s to change some settings only", dropped, c.topic)
		s.log.WarnContext(c.r.Context(), "topic settings: a PUT removed the push target", "topic", c.topic, "push_url", dropped, "request_id", requestID(c.w))
	}
	return http.StatusOK, out, nil
}

// patchTopic changes some settings: the body is a JSON merge patch
// (RFC 7386) of the topic's own settings (not the defaults in force, so
// that a later change of a server default still reaches the topic).
// Concurrent PATCHes of one topic: the last write wins.
func (s *Server) patchTopic(c *call) (int, any, error) {
	var own domain.TopicSettings
	if s.cfg.OwnTopicSettings != nil {
		var err error
		if own, err = s.cfg.OwnTopicSettings(c.r.Context(), c.topic); err != nil {
			return 0, nil, err
		}
	} else {
		info, err := s.cfg.Queue.Topic(c.r.Context(), c.topic)
		switch {
		case errors.Is(err, domain.ErrNotFound):
		case err != nil:
			return 0, nil, err
		default:
			own = info.Settings
		}
	}
	in, err := wire.MergeTopicSettings(wire.NewTopicSettingsRequest(own), c.body)
	if err != nil {
		return 0, nil, err
	}
	if err := in.ResolveMS(); err != nil {
		return 0, nil, err
	}
	if err := checkSettingsShape(in); err != nil {
		return 0, nil, err
	}
	set := in.ToDomain()
	if err := s.checkPushURL(c, set); err != nil {
		return 0, nil, err
	}
	got, err := s.cfg.Queue.SetTopicSettings(c.r.Context(), c.topic, set)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromTopicSettings(*got), nil
}

// checkPushURL refuses a new push URL or deliver endpoint from a token
// without admin on "*" (see auth.MaySetPushURL). The current settings are
// read first: a topic admin must be able to PUT the settings back with
// the destination unchanged.
func (s *Server) checkPushURL(c *call, set domain.TopicSettings) error {
	if c.token == nil || (set.Push == nil && set.Deliver == nil) || c.token.AllowsEverywhere(auth.Admin) {
		return nil
	}
	var old domain.TopicSettings
	info, err := s.cfg.Queue.Topic(c.r.Context(), c.topic)
	switch {
	case errors.Is(err, domain.ErrNotFound):
	case err != nil:
		return err
	default:
		old = info.Settings
	}
	if set.Push != nil {
		var oldURL string
		if old.Push != nil {
			oldURL = old.Push.URL
		}
		if !auth.MaySetPushURL(c.token, oldURL, set.Push.URL) {
			return fmt.Errorf("%w: setting or changing push.url needs a token with admin on \"*\" (token %q is admin on some topics only); other settings may be changed with push.url as it is", domain.ErrForbidden, c.token.Name)
		}
	}
	if set.Deliver != nil && !auth.MaySetPushURL(c.token, old.Deliver.Endpoint(), set.Deliver.Endpoint()) {
		return fmt.Errorf("%w: setting or changing the deliver target's address needs a token with admin on \"*\" (token %q is admin on some topics only); other settings may be changed with it as it is", domain.ErrForbidden, c.token.Name)
	}
	return nil
}

func (s *Server) deadList(c *call) (int, any, error) {
	q := c.r.URL.Query()
	req := domain.DeadListRequest{Cursor: q.Get("cursor")}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > domain.MaxBatch {
			return 0, nil, domain.Invalid("limit", "must be an integer between 1 and %d", domain.MaxBatch)
		}
		req.Limit = n
	}
	if len(req.Cursor) > maxCursorBytes {
		return 0, nil, domain.Invalid("cursor", "is longer than %d bytes", maxCursorBytes)
	}
	page, err := s.cfg.Queue.DeadList(c.r.Context(), c.topic, req)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.DeadPage{Messages: wire.FromMessages(page.Messages), Next: page.Next}, nil
}

func (s *Server) deadReplay(c *call) (int, any, error) {
	if err := wire.DecodeStrict(c.body, &empty{}, true); err != nil {
		return 0, nil, err
	}
	m, err := s.cfg.Queue.DeadReplay(c.r.Context(), c.topic, c.id)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.FromMessage(m), nil
}

func (s *Server) deadReplayAll(c *call) (int, any, error) {
	if err := wire.DecodeStrict(c.body, &empty{}, true); err != nil {
		return 0, nil, err
	}
	n, err := s.cfg.Queue.DeadReplayAll(c.r.Context(), c.topic)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: n}, nil
}

func (s *Server) deadDelete(c *call) (int, any, error) {
	if err := s.cfg.Queue.DeadDelete(c.r.Context(), c.topic, c.id); err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: 1}, nil
}

func (s *Server) deadPurge(c *call) (int, any, error) {
	n, err := s.cfg.Queue.DeadPurge(c.r.Context(), c.topic)
	if err != nil {
		return 0, nil, err
	}
	return http.StatusOK, wire.CountResponse{Count: n}, nil
}

// openAPI serves the API's OpenAPI document as it is embedded: the
// bytes are the document, not a re-encoding of it.
func (s *Server) openAPI(c *call) (int, any, error) {
	h := c.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(OpenAPIDocument)))
	c.w.WriteHeader(http.StatusOK)
	_, _ = io.WriteString(c.w, OpenAPIDocument) // the client went away: nothing left to tell it
	return 0, nil, nil
}

func (s *Server) healthz(*call) (int, any, error) {
	return http.StatusOK, wire.HealthResponse{Status: "ok", Version: s.cfg.Version, Revision: s.cfg.Revision}, nil
}

// readyz is 503 while draining (so load balancers stop sending) or when
// the engine does not answer within 2 s.
func (s *Server) readyz(c *call) (int, any, error) {
	if s.Draining() {
		return 0, nil, errShutdown
	}
	if s.cfg.Ready != nil {
		ctx, cancel := context.WithTimeout(c.r.Context(), 2*time.Second)
		defer cancel()
		if err := s.cfg.Ready(ctx); err != nil {
			return 0, nil, fmt.Errorf("%w: %v", domain.ErrUnavailable, err)
		}
	}
	return http.StatusOK, wire.StatusResponse{Status: "ready"}, nil
}

// backup streams the store's online backup. The archive can outlast the
// server's write timeout, so the deadline is lifted for this answer; an
// error after the first byte can only cut the connection, which leaves
// the client an archive without its end marker (the CLI checks for it).
func (s *Server) backup(c *call) (int, any, error) {
	if s.cfg.Backup == nil {
		return 0, nil, errNoBackup
	}
	rc := http.NewResponseController(c.w)
	_ = rc.SetWriteDeadline(time.Time{}) // not every ResponseWriter supports it: then the timeout stands
	h := c.w.Header()
	h.Set("Content-Type", "application/x-tar")
	h.Set("Content-Disposition", `attachment; filename="delayq-backup-`+time.Now().UTC().Format("20060102T150405Z")+`.tar"`)
	h.Set("Cache-Control", "no-store")
	w := &startedWriter{w: c.w}
	if err := s.cfg.Backup(c.r.Context(), w); err != nil {
		if !w.started {
			return 0, nil, err
		}
		s.log.Error("backup failed mid-stream; cutting the connection", "err", err, "request_id", requestID(c.w))
		panic(http.ErrAbortHandler)
	}
	return 0, nil, nil
}

// startedWriter reports whether anything was written (the status line is
// then sent, and an error can no longer be answered as one).
type startedWriter struct {
	w       http.ResponseWriter
	started bool
}

func (w *startedWriter) Write(p []byte) (int, error) {
	if !w.started {
		w.started = true
		w.w.WriteHeader(http.StatusOK)
	}
	return w.w.Write(p)
}

func (s *Server) metrics(c *call) (int, any, error) {
	if s.cfg.Metrics == nil {
		return 0, nil, fmt.Errorf("%w: metrics are not enabled", errRouteNotFound)
	}
	s.cfg.Metrics.ServeHTTP(c.w, c.r)
	return 0, nil, nil
}
