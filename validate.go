package delayq

import "fmt"

// ValidateTopic checks a topic name: 1–200 chars of [A-Za-z0-9._:-].
func ValidateTopic(topic string) error {
	return validateName("topic", topic, isTopicByte)
}

// ValidateID checks a message id: 1–200 chars of [A-Za-z0-9._:@+=-].
func ValidateID(id string) error {
	return validateName("id", id, isIDByte)
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

func isTopicByte(b byte) bool {
	return isAlnum(b) || b == '.' || b == '_' || b == ':' || b == '-'
}

func isIDByte(b byte) bool {
	return isTopicByte(b) || b == '@' || b == '+' || b == '='
}
