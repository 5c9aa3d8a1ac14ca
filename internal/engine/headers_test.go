package engine_test

import (
	"errors"
	"testing"
	"testing/synctest"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// TestHeaderControlCharactersRefusedInProcess: an in-process caller gets
// the same header rules as the HTTP API (domain.ValidateHeaders): a key
// with a control character or a line separator is refused on Send, on
// SendBatch (per item) and on a schedule's template, and nothing is stored.
func TestHeaderControlCharactersRefusedInProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b := setup(t, engine.Config{})
		for _, key := range []string{"a\nb", "a\rb", "a\x00b", "a\x7fb", "a\u0085b", "a\u2028b", "a\u2029b"} {
			h := map[string]string{key: "v"}
			_, err := b.e.Send(b.ctx, "t", domain.SendRequest{ID: "m1", Payload: []byte("x"), Headers: h})
			wantHeadersInvalid(t, "Send", key, err)

			res, err := b.e.SendBatch(b.ctx, "t", []domain.SendRequest{{ID: "m2", Payload: []byte("x"), Headers: h}})
			if err != nil || len(res) != 1 {
				t.Fatalf("SendBatch with header key %q: %v %v", key, res, err)
			}
			wantHeadersInvalid(t, "SendBatch", key, res[0].Err)

			_, err = b.e.ScheduleSet(b.ctx, domain.Schedule{Name: "s", Topic: "t", Cron: "@hourly", Payload: []byte("x"), Headers: h})
			wantHeadersInvalid(t, "ScheduleSet", key, err)
		}
		if _, err := b.e.Get(b.ctx, "t", "m1"); !errors.Is(err, domain.ErrNotFound) {
			t.Fatalf("a refused send was stored: %v", err)
		}
		if list, err := b.e.ScheduleList(b.ctx); err != nil || len(list) != 0 {
			t.Fatalf("a refused schedule was stored: %v %v", list, err)
		}
		// Printable keys, non-ASCII included, are fine.
		if _, err := b.e.Send(b.ctx, "t", domain.SendRequest{Payload: []byte("x"), Headers: map[string]string{"tenant-é": "a\nb"}}); err != nil {
			t.Fatalf("printable key: %v", err)
		}
	})
}

func wantHeadersInvalid(t *testing.T, op, key string, err error) {
	t.Helper()
	var ie *domain.InvalidError
	if !errors.As(err, &ie) || ie.Field != "headers" || !errors.Is(err, domain.ErrInvalid) {
		t.Errorf("%s with header key %q: err %v, want invalid headers", op, key, err)
	}
}
