package wire

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// scanSeeds are bodies on the edges of what prescan accepts.
var scanSeeds = []string{
	`{}`, ` {} `, "{\t\"a\"\n:\r1}", `{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`,
	`{"a":"x","a":"y"}`, `{"a":"x","\u0061":"y"}`, `{"a\u0062":1}`, `{"a":{"a":{"a":1}},"b":{"a":2}}`,
	`{"a":-0}`, `{"a":-0.0}`, `{"a":-0e5}`, `{"a":-0.0e+0}`, `{"a":0}`, `{"a":-1}`, `{"a":1.5e-3}`,
	`{"a":01}`, `{"a":1.}`, `{"a":.5}`, `{"a":1e}`, `{"a":+1}`, `{"a":--1}`, `{"a":1e+}`, `{"a":-}`,
	`{"a":"\ud800"}`, `{"a":"\ud800\udc00"}`, `{"a":"\udc00"}`, `{"a":"\ud800\u0041"}`, `{"a":"\ud800x"}`,
	`{"a":"\uD83D\uDE00"}`, `{"a":"\u00e9\/\b\f\n\r\t\"\\"}`, `{"a":"\x"}`, `{"a":"\u12"}`, `{"a":"\u12g4"}`,
	"{\"a\":\"\x01\"}", "{\"a\":\"\xff\"}", "{\"a\":\"é\"}", `{"a":tru}`, `{"a":truex}`, `{"a":nul}`,
	`{"a":1,}`, `{,"a":1}`, `{"a" 1}`, `{"a":1 "b":2}`, `{"a":[1,]}`, `{"a":[,1]}`, `{"a":[1 2]}`,
	`{"a":1}x`, `{"a":1}{}`, `{"a":1} `, `[]`, `"x"`, `1`, `null`, `{`, `{"a"`, `{"a":`, `{"a":"`,
	`{"a":"x\"}`, `{"a":[}`, `{"a":{]}`, "\ufeff{}", `{"":1}`, `{"a":1,"":2,"":3}`,
	`{"a":` + strings.Repeat(`[`, 31) + strings.Repeat(`]`, 31) + `}`,
	`{"a":` + strings.Repeat(`[`, 32) + strings.Repeat(`]`, 32) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 30) + `1` + strings.Repeat(`}`, 30) + `}`,
	`{"a":` + strings.Repeat(`{"b":`, 31) + `1` + strings.Repeat(`}`, 31) + `}`,
	`{"h":{` + manyHeaders(40) + `}}`, `{"h":{` + manyHeaders(40) + `,"h3":"v"}}`,
	`{"messages":[{"payload":"x","delay":"1h"},{"id":"a","payload_base64":"eA==","delay_ms":5}]}`,
}

func checkFastValid(t *testing.T, body []byte) {
	t.Helper()
	fast := fastValid(body)
	slow := prescanSlow(body)
	if fast && slow != nil {
		t.Fatalf("fastValid accepts %q, prescan rejects it: %v", body, slow)
	}
}

// TestFastValidMatchesPrescan checks that the fast path never accepts a
// body the reference prescan rejects, and that it accepts the plain ones
// (else it would not be a fast path).
func TestFastValidMatchesPrescan(t *testing.T) {
	for _, s := range scanSeeds {
		checkFastValid(t, []byte(s))
	}
	// Every prefix of the seeds: truncations at every byte.
	for _, s := range scanSeeds {
		for i := range len(s) {
			checkFastValid(t, []byte(s[:i]))
		}
	}
	for _, s := range []string{`{}`, `{"a":1,"b":[1,2,{"c":null}],"d":true,"e":false}`, `{"a":-1}`, `{"a":"\uD83D\uDE00"}`,
		`{"a":` + strings.Repeat(`[`, 31) + strings.Repeat(`]`, 31) + `}`, `{"a":-0e5}`, `{"":1}`} {
		if !fastValid([]byte(s)) {
			t.Errorf("fastValid rejects %q", s)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 3000 {
		b := []byte(randomBody(r))
		if !fastValid(b) && !strings.Contains(string(b), `\\u0000"`) { // escaped keys take the slow path by design
			if err := prescanSlow(b); err == nil {
				t.Fatalf("fastValid rejects a plain body prescan accepts: %q", b)
			}
		}
		// Mutations: one byte changed, dropped or doubled.
		for range 5 {
			m := mutate(r, b)
			checkFastValid(t, m)
		}
	}
}

func FuzzFastValid(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) { checkFastValid(t, b) })
}

const mutateAlphabet = "{}[]\":,\\ -0.eE+1uU9aAdD\x00\xff"

func mutate(r *rand.Rand, b []byte) []byte {
	m := append([]byte(nil), b...)
	if len(m) == 0 {
		return m
	}
	i := r.IntN(len(m))
	switch r.IntN(3) {
	case 0:
		m[i] = mutateAlphabet[r.IntN(len(mutateAlphabet))]
	case 1:
		m = append(m[:i], m[i+1:]...)
	default:
		m = append(m[:i+1], m[i:]...)
	}
	return m
}

// randomBody is a random send or batch body, mostly valid, with the
// fields and value kinds the API sees.
func randomBody(r *rand.Rand) string {
	if r.IntN(2) == 0 {
		return randomItem(r)
	}
	n := 1 + r.IntN(5)
	items := make([]string, n)
	for i := range items {
		items[i] = randomItem(r)
	}
	return `{"messages":[` + strings.Join(items, ",") + `]}`
}

var (
	randStrings = []string{``, `x`, `order-42`, `a b`, `\"q\"`, `\\`, `\n`, `\u00e9`, `\uD83D\uDE00`, `é`, `<&>`, `\u2028`, `\/`, `30s`, `{x}`}
	randNums    = []string{`0`, `1`, `-1`, `5`, `1.5`, `1e3`, `-0`, `9223372036854775807`, `9223372036854775808`, `2147483648`, `1E2`, `-5e-1`}
	randFields  = []string{"id", "payload", "payload_base64", "headers", "delay", "delay_ms", "deliver_at", "max_attempts"}
)

func randomLeaf(r *rand.Rand, field string) string {
	switch r.IntN(12) {
	case 0:
		return `null`
	case 1:
		return randNums[r.IntN(len(randNums))]
	case 2:
		return `"` + randStrings[r.IntN(len(randStrings))] + `"`
	case 3:
		return []string{`true`, `false`, `[]`, `{}`, `["x"]`}[r.IntN(5)]
	}
	switch field {
	case "delay":
		return `"` + []string{"1h", "30s", "1500ms", "-1s", "0s", "2h30m", "soon", "1e309s", "100000h"}[r.IntN(9)] + `"`
	case "delay_ms", "max_attempts":
		return randNums[r.IntN(len(randNums))]
	case "deliver_at":
		return `"` + []string{"2030-01-02T15:04:05Z", "2030-01-02T15:04:05.123+02:00", "tomorrow", "0001-01-01T00:00:00Z", "2030-13-01T00:00:00Z"}[r.IntN(5)] + `"`
	case "payload_base64":
		return `"` + []string{"eA==", "eA", "!!!", "", "AAECAwQF/w==", "eB==", "3q2+7w=="}[r.IntN(7)] + `"`
	case "headers":
		return []string{`{"k":"v"}`, `{"a":"1","b":"2"}`, `{"a":1}`, `{}`, `{"":"v"}`, `{"k":null}`}[r.IntN(6)]
	}
	return `"` + randStrings[r.IntN(len(randStrings))] + `"`
}

func randomItem(r *rand.Rand) string {
	if r.IntN(40) == 0 {
		return []string{`5`, `null`, `"x"`, `[]`}[r.IntN(4)]
	}
	n := r.IntN(5)
	parts := make([]string, 0, n+1)
	used := map[string]bool{}
	for range n {
		f := randFields[r.IntN(len(randFields))]
		if r.IntN(30) == 0 {
			f = []string{"dealy", "Delay", "payload\\u0000", "x"}[r.IntN(4)]
		}
		if used[f] && r.IntN(10) != 0 {
			continue
		}
		used[f] = true
		parts = append(parts, fmt.Sprintf(`%q:%s`, f, randomLeaf(r, f)))
	}
	if !used["payload"] && r.IntN(5) != 0 {
		parts = append(parts, `"payload":"`+randStrings[r.IntN(len(randStrings))]+`"`)
	}
	r.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
	sep := []string{",", ", ", " ,\n"}[r.IntN(3)]
	return "{" + strings.Join(parts, sep) + "}"
}

func manyHeaders(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"h%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}

// TestSkipPlain compares the word-at-a-time scan with a byte loop.
func TestSkipPlain(t *testing.T) {
	r := rand.New(rand.NewPCG(15, 16))
	ref := func(b []byte, i int) int {
		for ; i < len(b); i++ {
			if c := b[i]; c == '"' || c == '\\' || c < 0x20 {
				return i
			}
		}
		return i
	}
	for range 200000 {
		b := make([]byte, r.IntN(40))
		for j := range b {
			switch r.IntN(20) {
			case 0:
				b[j] = byte(r.IntN(0x21))
			case 1:
				b[j] = "\"\\\x7f\x80\xff!#[]"[r.IntN(9)]
			default:
				b[j] = byte(0x20 + r.IntN(0xe0))
			}
		}
		i := 0
		if len(b) > 0 {
			i = r.IntN(len(b) + 1)
		}
		if got, want := SkipPlain(b, i), ref(b, i); got != want {
			t.Fatalf("SkipPlain(%q, %d) = %d, want %d", b, i, got, want)
		}
	}
}
