// Package pushsig signs push deliveries and verifies their signatures.
package pushsig

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Push delivery headers (see docs/features.md, "Push delivery").
const (
	HeaderSignature = "Delayq-Signature"
	HeaderMessageID = "Delayq-Message-Id"
	HeaderAttempt   = "Delayq-Attempt"
	HeaderTopic     = "Delayq-Topic"
	// HeaderPriority carries the message's priority (0, the default, is
	// the most urgent; 255 the least).
	HeaderPriority = "Delayq-Priority"
)

// ErrBadSignature is returned by Verify.
var ErrBadSignature = errors.New("delayq: bad push signature")

// Sign returns the Delayq-Signature header value for body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256(secret, "<unix seconds>." + body)>".
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + hex.EncodeToString(pushMAC(secret, ts, body))
}

func pushMAC(secret, ts string, body []byte) []byte {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return m.Sum(nil)
}

// Verify checks a Delayq-Signature header against the raw
// request body, for receivers of push delivery: the MAC must match (in
// constant time) one v1 value, and the timestamp must be within tolerance
// of now (either way), which bounds replays. A tolerance of 0 means 5
// minutes. It returns nil or an error matching ErrBadSignature.
func Verify(secret, header string, body []byte, now time.Time, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = 5 * time.Minute
	}
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			continue
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if b, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, b)
			}
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errors.Join(ErrBadSignature, errors.New("want t=<unix>,v1=<hex>"))
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return errors.Join(ErrBadSignature, errors.New("timestamp outside the tolerance (replayed or clock skew)"))
	}
	want := pushMAC(secret, ts, body)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errors.Join(ErrBadSignature, errors.New("signature mismatch"))
}
