package wire

import (
	"encoding/json"
	"testing"
	"time"
)

// FuzzDuration: Duration accepts exactly the JSON strings whose content
// time.ParseDuration accepts (never a bare number), with the same value,
// and what it writes reads back unchanged.
func FuzzDuration(f *testing.F) {
	for _, s := range []string{`"30s"`, `"1500ms"`, `"2h30m"`, `"-1s"`, `"0"`, `30`, `"30"`, `null`, `""`, `"1e3s"`,
		`"9223372036854775807ns"`, `"9223372036854775808ns"`, `"\u0033\u0030s"`, `"1.5h"`, `true`, `{}`, `"ms"`, `"+5m"`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d Duration
		err := d.UnmarshalJSON(b)
		var s string
		isString := len(b) > 0 && b[0] == '"' && json.Unmarshal(b, &s) == nil
		want, perr := time.ParseDuration(s)
		switch {
		case !isString && err == nil:
			t.Fatalf("accepted %q, which is not a JSON string", b)
		case isString && (err == nil) != (perr == nil):
			t.Fatalf("%q: UnmarshalJSON err %v, ParseDuration err %v", b, err, perr)
		case err == nil && time.Duration(d) != want:
			t.Fatalf("%q: got %v, want %v", b, time.Duration(d), want)
		}
		if err != nil {
			return
		}
		out, err := d.MarshalJSON()
		if err != nil {
			t.Fatalf("marshal %v: %v", time.Duration(d), err)
		}
		var back Duration
		if err := back.UnmarshalJSON(out); err != nil || back != d {
			t.Fatalf("round trip %v → %s → %v (%v)", time.Duration(d), out, time.Duration(back), err)
		}
	})
}
