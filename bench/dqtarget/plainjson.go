package dqtarget

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/domain"
)

// PlainPrefix before an HTTP target (json+serve:…, json+serve-redis:…,
// json+http://…) makes its sends, leases and acks go through plainQueue.
const PlainPrefix = "json+"

// queueAPI is what QueueTarget calls: the SDK client, the engine, or
// plainQueue.
type queueAPI interface {
	Send(ctx context.Context, topic string, req domain.SendRequest) (*domain.Message, error)
	SendBatch(ctx context.Context, topic string, reqs []domain.SendRequest) ([]domain.SendResult, error)
	Lease(ctx context.Context, topic string, req domain.LeaseRequest) ([]*domain.Message, error)
	Ack(ctx context.Context, topic, id, receipt string) error
	AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error)
}

// plainQueue is the client a team writes against the HTTP API in an
// afternoon: net/http, encoding/json, structs with []byte payloads
// (base64), one request per call, no retries. The SDK decodes with a
// hand-written codec (internal/wire); measuring through this one shows
// what the server costs a user who did not take the SDK.
type plainQueue struct {
	base string
	hc   *http.Client
}

func newPlainQueue(base string) *plainQueue {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 1024
	return &plainQueue{base: strings.TrimSuffix(base, "/"), hc: &http.Client{Transport: tr}}
}

type plainSend struct {
	PayloadBase64 []byte `json:"payload_base64"`
	DeliverAt     string `json:"deliver_at,omitempty"`
}

type plainError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

type plainMessage struct {
	ID            string `json:"id"`
	Receipt       string `json:"receipt"`
	Payload       string `json:"payload"`
	PayloadBase64 []byte `json:"payload_base64"`
}

func toPlainSend(r domain.SendRequest) plainSend {
	s := plainSend{PayloadBase64: r.Payload}
	if !r.When.DeliverAt.IsZero() {
		s.DeliverAt = r.When.DeliverAt.UTC().Format(time.RFC3339Nano)
	}
	if s.PayloadBase64 == nil {
		s.PayloadBase64 = []byte{} // "" is an empty payload; null is not one
	}
	return s
}

// call posts body as JSON to path and decodes a 2xx answer into out.
func (q *plainQueue) call(ctx context.Context, path string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.base+path, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := q.hc.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		var e struct {
			Error plainError `json:"error"`
		}
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		if json.Unmarshal(raw, &e) == nil && e.Error.Code != "" {
			return fmt.Errorf("POST %s: %d %s: %s", path, resp.StatusCode, e.Error.Code, e.Error.Message)
		}
		return fmt.Errorf("POST %s: %d: %q", path, resp.StatusCode, raw)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

func topicPath(topic string) string { return "/v1/topics/" + url.PathEscape(topic) }

func (q *plainQueue) Send(ctx context.Context, topic string, r domain.SendRequest) (*domain.Message, error) {
	var m plainMessage
	if err := q.call(ctx, topicPath(topic)+"/messages", toPlainSend(r), &m); err != nil {
		return nil, err
	}
	return &domain.Message{Topic: topic, ID: m.ID}, nil
}

func (q *plainQueue) SendBatch(ctx context.Context, topic string, reqs []domain.SendRequest) ([]domain.SendResult, error) {
	body := struct {
		Messages []plainSend `json:"messages"`
	}{Messages: make([]plainSend, len(reqs))}
	for i, r := range reqs {
		body.Messages[i] = toPlainSend(r)
	}
	var ans struct {
		Results []struct {
			Message *plainMessage `json:"message"`
			Error   *plainError   `json:"error"`
		} `json:"results"`
	}
	if err := q.call(ctx, topicPath(topic)+"/messages:batch", body, &ans); err != nil {
		return nil, err
	}
	if len(ans.Results) != len(reqs) {
		return nil, fmt.Errorf("batch of %d answered %d results", len(reqs), len(ans.Results))
	}
	out := make([]domain.SendResult, len(reqs))
	for i, r := range ans.Results {
		if r.Error != nil {
			out[i].Err = fmt.Errorf("%s: %s", r.Error.Code, r.Error.Message)
		}
	}
	return out, nil
}

func (q *plainQueue) Lease(ctx context.Context, topic string, r domain.LeaseRequest) ([]*domain.Message, error) {
	body := struct {
		Max   int    `json:"max"`
		Lease string `json:"lease,omitempty"`
		Wait  string `json:"wait,omitempty"`
	}{Max: r.Max}
	if r.Lease > 0 {
		body.Lease = r.Lease.String()
	}
	if r.Wait > 0 {
		body.Wait = r.Wait.String()
	}
	var ans struct {
		Messages []plainMessage `json:"messages"`
	}
	if err := q.call(ctx, topicPath(topic)+"/lease", body, &ans); err != nil {
		return nil, err
	}
	out := make([]*domain.Message, len(ans.Messages))
	for i, m := range ans.Messages {
		p := m.PayloadBase64
		if p == nil {
			p = []byte(m.Payload)
		}
		out[i] = &domain.Message{Topic: topic, ID: m.ID, Receipt: m.Receipt, Payload: p}
	}
	return out, nil
}

func (q *plainQueue) Ack(ctx context.Context, topic, id, receipt string) error {
	var ans json.RawMessage
	return q.call(ctx, topicPath(topic)+"/messages/"+url.PathEscape(id)+"/ack", map[string]string{"receipt": receipt}, &ans)
}

func (q *plainQueue) AckBatch(ctx context.Context, topic string, acks []domain.AckRequest) ([]error, error) {
	type item struct {
		ID      string `json:"id"`
		Receipt string `json:"receipt"`
	}
	body := struct {
		Acks []item `json:"acks"`
	}{Acks: make([]item, len(acks))}
	for i, a := range acks {
		body.Acks[i] = item{ID: a.ID, Receipt: a.Receipt}
	}
	var ans struct {
		Results []struct {
			ID    string      `json:"id"`
			OK    bool        `json:"ok"`
			Error *plainError `json:"error"`
		} `json:"results"`
	}
	if err := q.call(ctx, topicPath(topic)+"/acks", body, &ans); err != nil {
		return nil, err
	}
	if len(ans.Results) != len(acks) {
		return nil, fmt.Errorf("ack batch of %d answered %d results", len(acks), len(ans.Results))
	}
	out := make([]error, len(acks))
	for i, r := range ans.Results {
		switch {
		case r.Error != nil:
			out[i] = fmt.Errorf("%s: %s", r.Error.Code, r.Error.Message)
		case !r.OK:
			out[i] = errors.New("not acked")
		}
	}
	return out, nil
}

// plainTarget is a target whose HTTP API plainQueue can reach.
type plainTarget interface {
	bench.Target
	baseURL() string
	setQueue(queueAPI)
}

// resolvePlain resolves json+SPEC: SPEC's target, driven by plainQueue.
func resolvePlain(spec string) (bench.Factory, bool, error) {
	inner := strings.TrimPrefix(spec, PlainPrefix)
	f, ok, err := Resolve(inner)
	if !ok || err != nil {
		return f, ok, err
	}
	return bench.Factory{Name: PlainPrefix + f.Name, Open: func(ctx context.Context, o bench.OpenOptions) (bench.Target, error) {
		t, err := f.Open(ctx, o)
		if err != nil {
			return nil, err
		}
		pt, ok := t.(plainTarget)
		if !ok {
			_ = t.Close()
			return nil, fmt.Errorf("%s%s: not an HTTP target (json+ takes serve, serve-redis, serve-postgres, serve-mysql or http://)", PlainPrefix, inner)
		}
		pt.setQueue(newPlainQueue(pt.baseURL()))
		return t, nil
	}}, true, nil
}
