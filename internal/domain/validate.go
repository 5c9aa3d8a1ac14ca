package domain

import (
	"fmt"
	"unicode/utf8"
)

// ValidateTopic checks a topic name: 1–200 chars of [A-Za-z0-9._:-].
func ValidateTopic(topic string) error {
	return validateName("topic", topic, IsTopicByte)
}

// ValidateID checks a message id: 1–200 chars of [A-Za-z0-9._:@+=-].
func ValidateID(id string) error {
	return validateName("id", id, IsIDByte)
}

func validateName(field, s string, ok func(byte) bool) error {
	if s == "" {
		return Invalid(field, "must not be empty")
	}
	if len(s) > MaxNameLen {
		return Invalid(field, "is %d bytes, the limit is %d", len(s), MaxNameLen)
	}
	for i := 0; i < len(s); i++ {
		if !ok(s[i]) {
			return Invalid(field, "has %s at byte %d; allowed: %s", quoteByte(s[i]), i, allowed(field))
		}
	}
	return nil
}

func allowed(field string) string {
	if field == "topic" || field == "name" {
		return "A-Z a-z 0-9 . _ : -"
	}
	return "A-Z a-z 0-9 . _ : @ + = -"
}

func quoteByte(b byte) string {
	if b >= 0x20 && b < 0x7f {
		return fmt.Sprintf("%q", string(rune(b)))
	}
	return fmt.Sprintf("byte 0x%02x", b)
}

func isAlnum(b byte) bool {
	return (b >= 'a' && b <= 'z') || (b >= 'A' && b <= 'Z') || (b >= '0' && b <= '9')
}

// IsTopicByte reports whether b is in the topic alphabet [A-Za-z0-9._:-]
// (schedule names use it too). It has no '{', '}', '#', '*' or space, which
// stores and token patterns rely on.
func IsTopicByte(b byte) bool {
	return isAlnum(b) || b == '.' || b == '_' || b == ':' || b == '-'
}

// IsIDByte reports whether b is in the message id alphabet
// [A-Za-z0-9._:@+=-]: the topic alphabet and "@+=".
func IsIDByte(b byte) bool {
	return IsTopicByte(b) || b == '@' || b == '+' || b == '='
}

// ValidateHeaders checks message headers: at most MaxHeaders entries and
// MaxHeaderBytes in all; keys non-empty UTF-8 with no control characters
// (C0, DEL, C1) and no line or paragraph separator (U+2028, U+2029), so
// that a key can never forge a log line or a header line where it is
// printed or forwarded.
func ValidateHeaders(h map[string]string) error {
	if len(h) > MaxHeaders {
		return Invalid("headers", "has %d entries, the limit is %d", len(h), MaxHeaders)
	}
	size := 0
	for k, v := range h {
		if k == "" {
			return Invalid("headers", "has an empty key")
		}
		if !utf8.ValidString(k) {
			return Invalid("headers", "key %q is not valid UTF-8", k)
		}
		for _, r := range k {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x2028 || r == 0x2029 {
				return Invalid("headers", "key %q has a control character or line separator (U+%04X)", k, r)
			}
		}
		size += len(k) + len(v)
	}
	if size > MaxHeaderBytes {
		return Invalid("headers", "are %d bytes, the limit is %d", size, MaxHeaderBytes)
	}
	return nil
}
