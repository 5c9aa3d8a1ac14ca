package wire

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/delayq/delayq/internal/domain"
)

// MergeTopicSettings applies a JSON merge patch (RFC 7386) to base, as
// PATCH /v1/topics/{topic} does: objects merge key by key, null removes
// a key (the field takes the server's default again; "push":null removes
// the push target), anything else replaces. Giving a duration in one form
// drops the other form from base ("lease_ms" replaces "lease"). The
// result is decoded as strictly as a PUT body, so errors name the field.
func MergeTopicSettings(base *TopicSettings, patch []byte) (*TopicSettings, error) {
	if len(bytes.TrimSpace(patch)) == 0 {
		return nil, domain.Invalid("", "the request body is empty; want a JSON object")
	}
	if err := prescan(patch); err != nil {
		return nil, err
	}
	var p any
	if err := decodeNumbers(patch, &p); err != nil {
		return nil, domain.Invalid("", "%v", err)
	}
	po, ok := p.(map[string]any)
	if !ok {
		return nil, domain.Invalid("", "want a JSON object")
	}
	raw, err := json.Marshal(base)
	if err != nil {
		return nil, err
	}
	var b map[string]any
	if err := decodeNumbers(raw, &b); err != nil {
		return nil, err
	}
	merged, err := json.Marshal(mergePatch(b, po))
	if err != nil {
		return nil, err
	}
	var out TopicSettings
	if err := DecodeStrict(merged, &out, true); err != nil {
		return nil, err
	}
	return &out, nil
}

func decodeNumbers(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	return d.Decode(v)
}

func mergePatch(base map[string]any, patch map[string]any) map[string]any {
	if base == nil {
		base = map[string]any{}
	}
	for k, v := range patch {
		// A duration and its *_ms twin are one setting.
		if twin, ok := strings.CutSuffix(k, "_ms"); ok {
			delete(base, twin)
		} else {
			delete(base, k+"_ms")
		}
		switch v := v.(type) {
		case nil:
			delete(base, k)
		case map[string]any:
			sub, _ := base[k].(map[string]any)
			base[k] = mergePatch(sub, v)
		default:
			base[k] = v
		}
	}
	return base
}
