package sqlcodec

import (
	"errors"
	"maps"
	"testing"

	"github.com/delayq/delayq/internal/store"
)

func TestHeadersRoundTrip(t *testing.T) {
	for _, h := range []map[string]string{
		{"a": "1"},
		{"b": "", "a": "x\x00y", "": "empty key"},
	} {
		got, err := DecodeHeaders(EncodeHeaders(h))
		if err != nil || !maps.Equal(got, h) {
			t.Errorf("round trip of %q: %q, %v", h, got, err)
		}
	}
	if EncodeHeaders(nil) != nil || EncodeHeaders(map[string]string{}) != nil {
		t.Error("no headers should encode to nil")
	}
	if h, err := DecodeHeaders(nil); h != nil || err != nil {
		t.Errorf("DecodeHeaders(nil) = %v, %v", h, err)
	}
}

// The order of keys is fixed, so equal headers store equal bytes.
func TestHeadersKeyOrder(t *testing.T) {
	want := "\x00\x00\x00\x01a\x00\x00\x00\x011\x00\x00\x00\x01b\x00\x00\x00\x012"
	if got := string(EncodeHeaders(map[string]string{"b": "2", "a": "1"})); got != want {
		t.Errorf("EncodeHeaders = %q, want %q", got, want)
	}
}

func TestHeadersTruncated(t *testing.T) {
	b := EncodeHeaders(map[string]string{"key": "value"})
	for n := 1; n < len(b); n++ {
		if _, err := DecodeHeaders(b[:n]); !errors.Is(err, store.ErrCorrupt) {
			t.Errorf("%d of %d bytes: %v, want ErrCorrupt", n, len(b), err)
		}
	}
}
