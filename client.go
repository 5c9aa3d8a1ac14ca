package delayq

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/delayq/delayq/internal/wire"
)

// Client is a Queue backed by a delayq server's HTTP API v1.
//
// A Client is safe for concurrent use by many goroutines. Create one per
// server and reuse it: it pools connections through its http.Client.
//
// Every method takes a context; cancelling it aborts the request and any
// pending retry. Errors answered by the server are *APIError values that
// match the package's sentinels with errors.Is (ErrNotFound, ErrConflict,
// ErrInvalid, …); a bad request also matches *InvalidError with errors.As.
// Transport failures (connection refused, reset, timeout) match
// ErrUnavailable.
//
// # Retries
//
// A call is retried, with exponential backoff, when the server answers 503
// (ErrUnavailable), 502, 504, 408 (its body did not reach the server
// within the server's read timeout) or 429 (ErrRateLimited; Retry-After is
// honoured) — these mean the request was not carried out. Connection errors
// and timeouts, where the request may or may not have been carried out, are
// retried only for calls that are safe to repeat: reads, Extend, Reschedule,
// SetTopicSettings, sends, acks and nacks. A send is made safe to repeat by
// giving it an ID before the first attempt (see NewID) when the caller gave
// none, so a retried send that had in fact succeeded finds its own message
// instead of creating a second one; the server answers an ack repeated with
// the receipt that acked the message as it answered the first (a receipt of
// an earlier delivery is still ErrConflict), and a nack repeated with its
// receipt and reason with the message as that nack left it, its failure
// counted once. Cancel, Lease and the dead-letter operations are not
// repeated after a connection error: their outcome is unknown and the error
// says so.
//
// A retried send with Delay is due Delay after the attempt that reached the
// server; use At for a due time that does not move.
//
// # Tracing
//
// When a call's context carries an OpenTelemetry span (from the
// application's tracer; with no OpenTelemetry SDK set up there is none),
// the request carries its W3C traceparent header, and each sent message
// without a "traceparent" header gets one naming that span, so a Worker
// with WorkerConfig.TracerProvider links the handling to the send. Without
// a span nothing is added.
type Client struct {
	base       string // scheme://host[/prefix], no trailing slash
	token      string
	hc         *http.Client
	timeout    time.Duration
	retries    int
	backoff    time.Duration
	maxBackoff time.Duration
}

var _ Queue = (*Client)(nil)

// ClientOption configures a Client; see NewClient.
type ClientOption func(*Client)

// WithToken sends "Authorization: Bearer token" with every request.
func WithToken(token string) ClientOption { return func(c *Client) { c.token = token } }

// WithHTTPClient uses hc for requests (default: a new http.Client with no
// overall timeout; WithTimeout bounds each attempt instead). If hc has a
// Timeout, Lease calls use a copy whose Timeout also covers the long-poll.
func WithHTTPClient(hc *http.Client) ClientOption { return func(c *Client) { c.hc = hc } }

// WithRetry sets how many times a failed call is retried after the first
// attempt (default 3; 0 disables retries and client-made send IDs) and the
// first backoff (default 100ms), which doubles per retry up to 5s, with
// ±25% jitter.
func WithRetry(retries int, backoff time.Duration) ClientOption {
	return func(c *Client) { c.retries, c.backoff = retries, backoff }
}

// WithTimeout bounds each attempt of a call (default 30s; 0 means no
// bound). A Lease attempt gets its Wait on top, so a long-poll never times
// out on the client first.
func WithTimeout(d time.Duration) ClientOption { return func(c *Client) { c.timeout = d } }

// NewClient returns a client for the server at baseURL, such as
// "http://127.0.0.1:7070". A path in baseURL is kept as a prefix (for a
// server behind a reverse proxy).
func NewClient(baseURL string, opts ...ClientOption) (*Client, error) {
	// host:port, as `delayq serve --addr` takes it, means http://host:port.
	if !strings.Contains(baseURL, "://") && baseURL != "" {
		baseURL = "http://" + baseURL
	}
	u, err := url.Parse(baseURL)
	if err != nil {
		return nil, fmt.Errorf("delayq: server URL %q: want http://host:port, https://host:port or host:port", baseURL)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("delayq: server URL %q: want http://host:port or https://host:port", baseURL)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("delayq: server URL %q: must not have a query or fragment", baseURL)
	}
	c := &Client{
		base:       strings.TrimRight(u.Scheme+"://"+u.Host+u.EscapedPath(), "/"),
		hc:         &http.Client{},
		timeout:    30 * time.Second,
		retries:    3,
		backoff:    100 * time.Millisecond,
		maxBackoff: 5 * time.Second,
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		return nil, errors.New("delayq: WithHTTPClient(nil)")
	}
	if c.retries < 0 || c.backoff < 0 || c.timeout < 0 {
		return nil, errors.New("delayq: negative retry count, backoff or timeout")
	}
	return c, nil
}

// Enqueue is Send with the request built from payload and options:
//
//	c.Enqueue(ctx, "orders", body, delayq.After(30*time.Minute), delayq.WithID("order-42"))
func (c *Client) Enqueue(ctx context.Context, topic string, payload []byte, opts ...SendOption) (*Message, error) {
	return c.Send(ctx, topic, NewSendRequest(payload, opts...))
}

// Send implements Queue. With retries enabled, a request without an ID
// gets one from NewID before the first attempt.
func (c *Client) Send(ctx context.Context, topic string, req SendRequest) (*Message, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	generated := c.assignID(&req)
	req.Headers = wire.AddTraceparent(ctx, req.Headers)
	body, err := wire.FromSendRequest(req)
	if err != nil {
		return nil, err
	}
	var out wire.Message
	err = c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "messages"), in: body, out: &out, idempotent: true})
	if err != nil {
		return nil, err
	}
	m := out.ToDomain()
	fillPayload(m, &out, req.Payload)
	if generated {
		m.Duplicate = false // our own earlier attempt made it: this call created it
	}
	return m, nil
}

// fillPayload restores the payload the server leaves out of send answers
// (it echoes only a duplicate's stored payload): it is the one just sent.
func fillPayload(m *Message, w *wire.Message, sent []byte) {
	if w.Payload == nil && w.PayloadBase64 == nil {
		m.Payload = sent
	}
}

// SendBatch implements Queue. With retries enabled, requests without an ID
// get one from NewID before the first attempt.
func (c *Client) SendBatch(ctx context.Context, topic string, reqs []SendRequest) ([]SendResult, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	// IDs go on a copy: the caller's slice is not ours to change.
	withIDs := make([]SendRequest, len(reqs))
	generated := make([]bool, len(reqs))
	for i, r := range reqs {
		generated[i] = c.assignID(&r)
		r.Headers = wire.AddTraceparent(ctx, r.Headers)
		withIDs[i] = r
	}
	body, err := wire.EncodeSendBatch(withIDs)
	if err != nil {
		return nil, err
	}
	var out wire.SendBatchResponse
	err = c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "messages:batch"), raw: body, out: &out, idempotent: true,
		fast: func(b []byte) bool { return wire.DecodeSendBatchResponse(b, &out) }})
	if err != nil {
		return nil, err
	}
	if len(out.Results) != len(reqs) {
		return nil, fmt.Errorf("delayq: batch send: server answered %d results for %d messages", len(out.Results), len(reqs))
	}
	res := make([]SendResult, len(out.Results))
	for i, r := range out.Results {
		switch {
		case r.Error != nil:
			res[i].Err = errorFromBody(http.StatusOK, r.Error)
		case r.Message != nil:
			res[i].Message = r.Message.ToDomain()
			fillPayload(res[i].Message, r.Message, reqs[i].Payload)
			if generated[i] {
				res[i].Message.Duplicate = false
			}
		default:
			res[i].Err = fmt.Errorf("delayq: batch send: result %d has neither message nor error", i)
		}
	}
	return res, nil
}

// assignID gives req a client-made ID when it has none and retries are on.
func (c *Client) assignID(req *SendRequest) bool {
	if req.ID != "" || c.retries == 0 {
		return false
	}
	req.ID = NewID()
	return true
}

// Get implements Queue.
func (c *Client) Get(ctx context.Context, topic, id string) (*Message, error) {
	p, err := messagePath(topic, id, "")
	if err != nil {
		return nil, err
	}
	var out wire.Message
	if err := c.do(ctx, &call{method: http.MethodGet, path: p, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
}

// Cancel implements Queue. The returned message's State is the state it
// was in when cancelled.
func (c *Client) Cancel(ctx context.Context, topic, id string) (*Message, error) {
	p, err := messagePath(topic, id, "")
	if err != nil {
		return nil, err
	}
	var out wire.CancelResponse
	if err := c.do(ctx, &call{method: http.MethodDelete, path: p, out: &out}); err != nil {
		return nil, err
	}
	m := &Message{Topic: topic, ID: id}
	if out.Message != nil {
		m = out.Message.ToDomain()
	}
	if out.PriorState != "" {
		m.State = State(out.PriorState)
	}
	return m, nil
}

// Reschedule implements Queue.
func (c *Client) Reschedule(ctx context.Context, topic, id string, when When) (*Message, error) {
	p, err := messagePath(topic, id, "")
	if err != nil {
		return nil, err
	}
	var body wire.RescheduleRequest
	body.Delay, body.DeliverAt = wire.FromWhen(when)
	var out wire.Message
	if err := c.do(ctx, &call{method: http.MethodPatch, path: p, in: body, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
}

// Lease implements Queue. The attempt's timeout is extended by req.Wait.
func (c *Client) Lease(ctx context.Context, topic string, req LeaseRequest) ([]*Message, error) {
	msgs, _, err := c.AckAndLease(ctx, topic, nil, req)
	return msgs, err
}

// AckAndLease acks acks, as AckBatch would, then leases as Lease would,
// in one call: a consumer that acks what it handled with its next lease
// makes one round trip where it made two. The acks are carried out first
// and durably (before a long-poll waits); errs has each one's outcome, in
// order (nil: acked). A non-nil err is the whole call's: no message is
// returned (one leased all the same comes again when its lease runs out),
// and the acks may or may not have been carried out — send them again
// (AckBatch: an ack repeated with its receipt answers ok). Like Lease,
// the call is not retried; its attempt timeout is extended by req.Wait.
// It implements AckLeaser, which Worker uses.
func (c *Client) AckAndLease(ctx context.Context, topic string, acks []AckRequest, req LeaseRequest) (msgs []*Message, errs []error, err error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, nil, err
	}
	if len(acks) > MaxBatch {
		return nil, nil, Invalid("acks", "has %d items; a lease carries at most %d", len(acks), MaxBatch)
	}
	in := wire.NewLeaseRequest(req)
	in.Acks = ackItems(acks)
	var out wire.MessagesResponse
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "lease"), in: in, out: &out, wait: max(req.Wait, 0)}); err != nil {
		var ae *APIError
		if len(acks) > 0 && errors.As(err, &ae) && ae.StatusCode == http.StatusBadRequest && ae.Field == "acks" {
			// Every item was well formed and there were few enough: a
			// server older than the field refuses it.
			err = fmt.Errorf("%w: %w", ErrAcksWithLeaseUnsupported, err)
		}
		return nil, nil, err
	}
	if len(acks) > 0 {
		if errs, err = ackErrors(out.Acks, len(acks), "lease"); err != nil {
			// Leased, but the answer is not what was asked: the leases
			// run out and the messages come again.
			return nil, nil, err
		}
	}
	msgs = make([]*Message, len(out.Messages))
	for i, m := range out.Messages {
		msgs[i] = m.ToDomain()
	}
	return msgs, errs, nil
}

// ErrAcksWithLeaseUnsupported is wrapped by AckAndLease's error when the
// server does not take acks with a lease: one older than them refuses the
// field (400, field "acks"). Nothing was acked or leased; send the acks
// in a batch ack (AckBatch) and lease without them.
var ErrAcksWithLeaseUnsupported = errors.New("delayq: the server does not take acks with a lease")

// ackItems is acks as a request body carries them.
func ackItems(acks []AckRequest) []wire.AckItem {
	items := make([]wire.AckItem, len(acks))
	for i, a := range acks {
		items[i] = wire.AckItem{ID: a.ID, Receipt: a.Receipt}
	}
	return items
}

// ackErrors is the outcome of n acks from an answer's results (of a
// batch ack, or of a lease's acks).
func ackErrors(results []wire.AckResult, n int, op string) ([]error, error) {
	if len(results) != n {
		return nil, fmt.Errorf("delayq: %s: server answered %d ack results for %d acks", op, len(results), n)
	}
	errs := make([]error, n)
	for i, r := range results {
		switch {
		case r.Error != nil:
			errs[i] = errorFromBody(http.StatusOK, r.Error)
		case !r.OK:
			errs[i] = fmt.Errorf("delayq: %s: ack result %d is neither ok nor an error", op, i)
		}
	}
	return errs, nil
}

// Ack implements Queue.
func (c *Client) Ack(ctx context.Context, topic, id, receipt string) error {
	p, err := messagePath(topic, id, "/ack")
	if err != nil {
		return err
	}
	return c.do(ctx, &call{method: http.MethodPost, path: p, in: wire.AckRequest{Receipt: receipt}, idempotent: true})
}

// AckBatch implements Queue.
func (c *Client) AckBatch(ctx context.Context, topic string, acks []AckRequest) ([]error, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	body := wire.AckBatchRequest{Acks: ackItems(acks)}
	var out wire.AckBatchResponse
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "acks"), in: body, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return ackErrors(out.Results, len(acks), "batch ack")
}

// Nack implements Queue.
func (c *Client) Nack(ctx context.Context, topic, id, receipt string, req NackRequest) (*Message, error) {
	p, err := messagePath(topic, id, "/nack")
	if err != nil {
		return nil, err
	}
	body := wire.NackRequest{Receipt: receipt, Reason: req.Reason, Dead: req.Dead}
	if req.HasDelay {
		d := wire.Duration(req.Delay)
		body.Delay = &d
	}
	var out wire.Message
	if err := c.do(ctx, &call{method: http.MethodPost, path: p, in: body, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
}

// Extend implements Queue.
func (c *Client) Extend(ctx context.Context, topic, id, receipt string, lease time.Duration) (*Message, error) {
	p, err := messagePath(topic, id, "/extend")
	if err != nil {
		return nil, err
	}
	d := wire.Duration(lease)
	var out wire.Message
	err = c.do(ctx, &call{method: http.MethodPost, path: p, in: wire.ExtendRequest{Receipt: receipt, Lease: &d}, out: &out, idempotent: true})
	if err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
}

// Topics implements Queue.
func (c *Client) Topics(ctx context.Context) ([]TopicInfo, error) {
	var out wire.TopicsResponse
	if err := c.do(ctx, &call{method: http.MethodGet, path: "/v1/topics", out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	now := time.Now()
	infos := make([]TopicInfo, len(out.Topics))
	for i := range out.Topics {
		infos[i] = out.Topics[i].ToDomain(now)
	}
	return infos, nil
}

// Topic implements Queue. OldestReady is computed from the server's
// "oldest ready age" and this machine's clock.
func (c *Client) Topic(ctx context.Context, topic string) (*TopicInfo, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	var out wire.Topic
	if err := c.do(ctx, &call{method: http.MethodGet, path: topicPath(topic, ""), out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	info := out.ToDomain(time.Now())
	return &info, nil
}

// SetTopicSettings implements Queue.
func (c *Client) SetTopicSettings(ctx context.Context, topic string, s TopicSettings) (*TopicSettings, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	var out wire.TopicSettings
	err := c.do(ctx, &call{method: http.MethodPut, path: topicPath(topic, ""), in: wire.NewTopicSettingsRequest(s), out: &out, idempotent: true})
	if err != nil {
		return nil, err
	}
	got := out.ToDomain()
	return &got, nil
}

// PatchTopicSettings changes the topic settings patch names and keeps the
// others (PATCH /v1/topics/{topic}, a JSON merge patch): patch is any
// value that marshals to a JSON object, such as
// map[string]any{"rate_limit": map[string]any{"per_second": 50}}; a
// null member resets that setting to the server's default. It answers
// the topic's settings in force afterwards.
func (c *Client) PatchTopicSettings(ctx context.Context, topic string, patch any) (*TopicSettings, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, fmt.Errorf("delayq: encode settings patch: %w", err)
	}
	if len(body) == 0 || body[0] != '{' {
		return nil, fmt.Errorf("delayq: a settings patch must be a JSON object, not %.20s", body)
	}
	var out wire.TopicSettings
	if err := c.do(ctx, &call{method: http.MethodPatch, path: topicPath(topic, ""), raw: body, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	got := out.ToDomain()
	return &got, nil
}

// DeadList implements Queue.
func (c *Client) DeadList(ctx context.Context, topic string, req DeadListRequest) (*DeadPage, error) {
	if err := ValidateTopic(topic); err != nil {
		return nil, err
	}
	q := url.Values{}
	if req.Limit > 0 {
		q.Set("limit", strconv.Itoa(req.Limit))
	}
	if req.Cursor != "" {
		q.Set("cursor", req.Cursor)
	}
	var out wire.DeadPage
	if err := c.do(ctx, &call{method: http.MethodGet, path: topicPath(topic, "dead"), query: q, out: &out, idempotent: true}); err != nil {
		return nil, err
	}
	page := &DeadPage{Messages: make([]*Message, len(out.Messages)), Next: out.Next}
	for i, m := range out.Messages {
		page.Messages[i] = m.ToDomain()
	}
	return page, nil
}

// DeadReplay implements Queue.
func (c *Client) DeadReplay(ctx context.Context, topic, id string) (*Message, error) {
	p, err := deadPath(topic, id, "/replay")
	if err != nil {
		return nil, err
	}
	var out wire.Message
	if err := c.do(ctx, &call{method: http.MethodPost, path: p, out: &out}); err != nil {
		return nil, err
	}
	return out.ToDomain(), nil
}

// DeadReplayAll implements Queue (POST /v1/topics/{topic}/dead/replay).
func (c *Client) DeadReplayAll(ctx context.Context, topic string) (int, error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, err
	}
	var out wire.CountResponse
	if err := c.do(ctx, &call{method: http.MethodPost, path: topicPath(topic, "dead/replay"), out: &out}); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// DeadDelete implements Queue.
func (c *Client) DeadDelete(ctx context.Context, topic, id string) error {
	p, err := deadPath(topic, id, "")
	if err != nil {
		return err
	}
	return c.do(ctx, &call{method: http.MethodDelete, path: p})
}

// DeadPurge implements Queue (DELETE /v1/topics/{topic}/dead).
func (c *Client) DeadPurge(ctx context.Context, topic string) (int, error) {
	if err := ValidateTopic(topic); err != nil {
		return 0, err
	}
	var out wire.CountResponse
	if err := c.do(ctx, &call{method: http.MethodDelete, path: topicPath(topic, "dead"), out: &out}); err != nil {
		return 0, err
	}
	return out.Count, nil
}

// Ready asks the server whether it can serve requests now (GET /readyz,
// once, without retries): nil, or an error matching ErrUnavailable with
// the server's reason (store unreachable, shutting down) or the transport
// error. For health probes.
func (c *Client) Ready(ctx context.Context) error {
	c2 := *c
	c2.retries = 0
	return c2.do(ctx, &call{method: http.MethodGet, path: "/readyz", idempotent: true})
}

// Backup writes an online backup of the server's embedded store to w: a
// tar archive of a consistent checkpoint holding every write acknowledged
// before the call (GET /v1/admin/backup; admin on "*"). Restore by
// extracting it into an empty data directory. It returns the bytes
// written, and fails — with part of the archive already in w — when the
// archive arrives incomplete. It is not retried, and not bounded by the
// client's timeout (bound it with ctx). Servers on Redis, PostgreSQL or
// MySQL answer 501: those are backed up with their own tools.
func (c *Client) Backup(ctx context.Context, w io.Writer) (int64, error) {
	c2 := *c
	c2.retries = 0
	cw := &countingWriter{w: w}
	err := c2.do(ctx, &call{method: http.MethodGet, path: "/v1/admin/backup", stream: func(body io.Reader) error {
		// Read it through a tar reader: a connection cut mid-archive is
		// an error here rather than a truncated file found at restore.
		tr := tar.NewReader(io.TeeReader(body, cw))
		for {
			_, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil { // Next reads through each entry's data: a cut one fails here
				return fmt.Errorf("backup archive: %w", err)
			}
		}
		_, err := io.Copy(cw, body) // the end marker's padding
		return err
	}})
	return cw.n, err
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// Paths. Topic and id are validated first, so they never need escaping
// beyond what url.PathEscape does and cannot smuggle a "/" or "..".

func topicPath(topic, rest string) string {
	p := "/v1/topics/" + url.PathEscape(topic)
	if rest != "" {
		p += "/" + rest
	}
	return p
}

func messagePath(topic, id, suffix string) (string, error) {
	if err := ValidateTopic(topic); err != nil {
		return "", err
	}
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return topicPath(topic, "messages/"+url.PathEscape(id)) + suffix, nil
}

func deadPath(topic, id, suffix string) (string, error) {
	if err := ValidateTopic(topic); err != nil {
		return "", err
	}
	if err := ValidateID(id); err != nil {
		return "", err
	}
	return topicPath(topic, "dead/"+url.PathEscape(id)) + suffix, nil
}

// call is one API call: what to send, where to decode the answer, and
// whether it may be repeated after a connection error.
type call struct {
	method, path string
	query        url.Values
	in           any               // JSON body; nil: none
	raw          []byte            // a body already encoded; used instead of in
	fast         func([]byte) bool // decodes a whole answer into out, or false: encoding/json does
	out          any               // decoded from a 2xx answer; nil: body discarded
	idempotent   bool
	wait         time.Duration // server-side long-poll; added to the attempt timeout
	// stream, when set, reads a 2xx answer's body instead of out, with no
	// attempt timeout (a backup archive takes as long as it takes).
	stream func(io.Reader) error
}

// do runs c with retries; see the Client doc for which failures are retried.
func (c *Client) do(ctx context.Context, cl *call) error {
	body := cl.raw
	if body == nil && cl.in != nil {
		var err error
		if body, err = json.Marshal(cl.in); err != nil {
			return fmt.Errorf("delayq: encode request: %w", err)
		}
	}
	for attempt := 0; ; attempt++ {
		retryAfter, err := c.attempt(ctx, cl, body)
		if err == nil {
			return nil
		}
		if attempt >= c.retries || !retryable(err, cl.idempotent) {
			return err
		}
		if !sleepCtx(ctx, c.backoffFor(attempt, retryAfter)) {
			return fmt.Errorf("delayq: %s %s: %w (gave up retrying after: %v)", cl.method, cl.path, ctx.Err(), err)
		}
	}
}

// retryable reports whether err means the request was not carried out
// (always safe to repeat), or is a transport failure and cl is idempotent.
func retryable(err error, idempotent bool) bool {
	var ae *APIError
	if errors.As(err, &ae) {
		switch ae.StatusCode {
		case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusTooManyRequests, http.StatusRequestTimeout:
			return true
		}
		return false
	}
	var te *transportError
	return idempotent && errors.As(err, &te)
}

func (c *Client) backoffFor(attempt int, retryAfter time.Duration) time.Duration {
	if retryAfter > 0 {
		return min(retryAfter, c.maxBackoff)
	}
	d := c.backoff << min(attempt, 20)
	if d <= 0 || d > c.maxBackoff {
		d = c.maxBackoff
	}
	// ±25% jitter, so clients that failed together do not retry together.
	return time.Duration(float64(d) * (0.75 + rand.Float64()/2)) // #nosec G404 -- retry jitter, not a secret: predictability does no harm
}

// attempt makes one HTTP request. It returns the server's Retry-After, if any.
func (c *Client) attempt(parent context.Context, cl *call, body []byte) (time.Duration, error) {
	hc, ctx := c.hc, parent
	if c.timeout > 0 && cl.stream == nil {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.timeout+cl.wait)
		defer cancel()
	}
	if cl.wait > 0 && hc.Timeout > 0 && hc.Timeout < cl.wait+10*time.Second {
		cp := *hc // a long-poll must not be cut short by the caller's http.Client
		cp.Timeout = cl.wait + max(c.timeout, 10*time.Second)
		hc = &cp
	}
	u := c.base + cl.path
	if len(cl.query) > 0 {
		u += "?" + cl.query.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, cl.method, u, rd)
	if err != nil {
		return 0, fmt.Errorf("delayq: %s %s: %w", cl.method, cl.path, err)
	}
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "delayq-go-client")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	propagation.TraceContext{}.Inject(ctx, propagation.HeaderCarrier(req.Header)) // nothing without a span
	resp, err := hc.Do(req)
	if err != nil {
		if parent.Err() != nil { // the caller gave up: not the server's fault
			return 0, fmt.Errorf("delayq: %s %s: %w", cl.method, cl.path, parent.Err())
		}
		return 0, &transportError{op: cl.method + " " + cl.path, err: err}
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // let the connection be reused
		_ = resp.Body.Close()
	}()
	if resp.StatusCode >= 300 {
		return parseRetryAfter(resp.Header.Get("Retry-After")), decodeError(resp)
	}
	if cl.stream != nil {
		if err := cl.stream(resp.Body); err != nil {
			if parent.Err() != nil {
				return 0, fmt.Errorf("delayq: %s %s: %w", cl.method, cl.path, parent.Err())
			}
			return 0, fmt.Errorf("delayq: %s %s: %w", cl.method, cl.path, err)
		}
		return 0, nil
	}
	if cl.out == nil {
		return 0, nil
	}
	if err := decodeAnswer(resp, cl); err != nil {
		if parent.Err() != nil {
			return 0, fmt.Errorf("delayq: %s %s: %w", cl.method, cl.path, parent.Err())
		}
		if ctx.Err() != nil {
			return 0, &transportError{op: cl.method + " " + cl.path, err: err}
		}
		return 0, fmt.Errorf("delayq: %s %s: decode answer: %w", cl.method, cl.path, err)
	}
	return 0, nil
}

// maxFastAnswer bounds the answers decodeAnswer reads whole for a
// hand-written decoder (a batch answer of 1000 messages is ~300 KB);
// larger ones stream through encoding/json.
const maxFastAnswer = 4 << 20

// decodeAnswer decodes a 2xx answer into cl.out: with cl.fast when the
// call has one and the answer's length is known, else (or when cl.fast
// does not take the bytes) with encoding/json.
func decodeAnswer(resp *http.Response, cl *call) error {
	n := resp.ContentLength
	if cl.fast == nil || n <= 0 || n > maxFastAnswer {
		return json.NewDecoder(resp.Body).Decode(cl.out)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(resp.Body, b); err != nil {
		return err
	}
	if cl.fast(b) {
		return nil
	}
	return json.NewDecoder(bytes.NewReader(b)).Decode(cl.out)
}

func parseRetryAfter(v string) time.Duration {
	if s, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && s > 0 {
		return time.Duration(s) * time.Second
	}
	return 0
}

// transportError is a request that got no HTTP answer: the server may or
// may not have carried it out. It matches ErrUnavailable.
type transportError struct {
	op  string
	err error
}

func (e *transportError) Error() string {
	return "delayq: " + e.op + ": " + e.err.Error()
}

func (e *transportError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// APIError is an error answered by the server. It matches the sentinel of
// its code with errors.Is (ErrNotFound for 404 / "not_found", …) and, for
// invalid input, unwraps to an *InvalidError naming the field.
type APIError struct {
	// StatusCode is the HTTP status (200 for an item of a batch answer).
	StatusCode int
	// Code is the wire error code, such as "not_found"; empty when the
	// answer was not a delayq error body (e.g. from a proxy).
	Code string
	// Message is the server's explanation, meant for people.
	Message string
	// Field names the offending request field for invalid input.
	Field string
	// RequestID is the server's id for the request (its X-Request-Id),
	// which its log lines about the request carry: quote it when
	// reporting a failure. Empty for the items of a batch answer, and when
	// the answer named none (a proxy's own error page, say).
	RequestID string
}

func (e *APIError) Error() string {
	if e.Message != "" {
		return e.Message
	}
	if e.Code != "" {
		return e.Code
	}
	return fmt.Sprintf("HTTP %d %s", e.StatusCode, http.StatusText(e.StatusCode))
}

// Unwrap returns the matching sentinel (or *InvalidError), if any.
func (e *APIError) Unwrap() error {
	s := sentinelFor(e.Code, e.StatusCode)
	if s == ErrInvalid {
		reason := strings.TrimPrefix(e.Message, "invalid "+e.Field+": ")
		if e.Field == "" {
			reason = strings.TrimPrefix(e.Message, "invalid request: ")
		}
		return &InvalidError{Field: e.Field, Reason: reason}
	}
	return s
}

// sentinelFor maps a wire code, or failing that an HTTP status, to a sentinel.
func sentinelFor(code string, status int) error {
	switch code {
	case wire.CodeInvalid:
		return ErrInvalid
	case wire.CodeUnauthenticated:
		return ErrUnauthorized
	case wire.CodeForbidden:
		return ErrForbidden
	case wire.CodeNotFound:
		return ErrNotFound
	case wire.CodeConflict:
		return ErrConflict
	case wire.CodeTooLarge, wire.CodeHeaderTooLarge:
		return ErrTooLarge
	case wire.CodeRateLimited:
		return ErrRateLimited
	case wire.CodeUnavailable, wire.CodeTimeout:
		return ErrUnavailable
	case "":
	default:
		return nil // a code we do not know (e.g. "internal"): match nothing
	}
	switch status {
	case http.StatusBadRequest:
		return ErrInvalid
	case http.StatusUnauthorized:
		return ErrUnauthorized
	case http.StatusForbidden:
		return ErrForbidden
	case http.StatusNotFound:
		return ErrNotFound
	case http.StatusConflict:
		return ErrConflict
	case http.StatusRequestEntityTooLarge, http.StatusRequestHeaderFieldsTooLarge:
		return ErrTooLarge
	case http.StatusTooManyRequests:
		return ErrRateLimited
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout, http.StatusRequestTimeout:
		return ErrUnavailable
	}
	return nil
}

func decodeError(resp *http.Response) error {
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var er wire.ErrorResponse
	if json.Unmarshal(raw, &er) == nil && er.Error.Code != "" {
		if er.Error.RequestID == "" {
			er.Error.RequestID = resp.Header.Get(wire.HeaderRequestID)
		}
		return errorFromBody(resp.StatusCode, &er.Error)
	}
	msg := strings.TrimSpace(string(raw))
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	if msg == "" || strings.HasPrefix(msg, "<") { // empty or an HTML page from a proxy
		msg = fmt.Sprintf("HTTP %d %s", resp.StatusCode, http.StatusText(resp.StatusCode))
	} else {
		msg = fmt.Sprintf("HTTP %d: %s", resp.StatusCode, msg)
	}
	return &APIError{StatusCode: resp.StatusCode, Message: msg, RequestID: resp.Header.Get(wire.HeaderRequestID)}
}

func errorFromBody(status int, b *wire.ErrorBody) error {
	return &APIError{StatusCode: status, Code: b.Code, Message: b.Message, Field: b.Field, RequestID: b.RequestID}
}
