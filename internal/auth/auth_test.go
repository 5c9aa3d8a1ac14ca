package auth

import (
	"net/http"
	"strings"
	"testing"
)

func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, topic string
		want           bool
	}{
		{"*", "anything", true},
		{"orders.*", "orders.eu", true},
		{"orders.*", "orders.eu.late", true},
		{"orders.*", "orders", false},
		{"orders.*", "xorders.eu", false},
		{"orders", "orders", true},
		{"orders", "orders2", false},
		{"*.late", "eu.orders.late", true},
		{"a*b*c", "aXbYc", true},
		{"a*b*c", "aXbY", false},
		{"a**", "a", true},
	} {
		if got := Match(c.pattern, c.topic); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.pattern, c.topic, got)
		}
	}
}

func TestParseToken(t *testing.T) {
	tok, err := ParseToken("billing:s3cr3t-billing-0123456789:produce,consume:billing.*,invoices")
	if err != nil {
		t.Fatal(err)
	}
	if tok.Name != "billing" || tok.Scopes != Produce|Consume || len(tok.Patterns) != 2 {
		t.Fatalf("%+v", tok)
	}
	for _, bad := range []string{
		"",
		"name:secret",
		"name:short:admin:*",
		"na me:0123456789abcdef:admin:*",
		"name:0123456789abcdef:root:*",
		"name:0123456789abcdef:admin:",
		"name:0123456789abcdef:admin:a b",
		"name:0123456789abcdef{:admin:*",
	} {
		_, err := ParseToken(bad)
		if err == nil {
			t.Errorf("ParseToken(%q) accepted", bad)
		} else if strings.Contains(err.Error(), "0123456789abcdef") {
			t.Errorf("the error quotes the secret: %v", err)
		}
	}
}

func TestParseFileFormat(t *testing.T) {
	toks, err := Parse(strings.NewReader("# comment\n\nops:0p5-token-0123456789abcdef:admin:*\n  a:0123456789abcdef0:consume:x.*  \n"))
	if err != nil || len(toks) != 2 {
		t.Fatalf("%v %v", toks, err)
	}
	if _, err := Parse(strings.NewReader("ok:0123456789abcdef0:admin:*\nbroken\n")); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Fatalf("want an error naming line 2, got %v", err)
	}
	if _, err := NewSet(append(toks, toks[0])); err == nil {
		t.Fatal("duplicate names accepted")
	}
}

func TestAuthenticate(t *testing.T) {
	a, _ := ParseToken("a:aaaaaaaaaaaaaaaa1:consume:x.*")
	b, _ := ParseToken("b:bbbbbbbbbbbbbbbb2:admin:*")
	set, err := NewSet([]*Token{a, b})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		hdr  []string
		want *Token
		err  error
	}{
		{nil, nil, ErrMissing},
		{[]string{"Bearer aaaaaaaaaaaaaaaa1"}, a, nil},
		{[]string{"bearer bbbbbbbbbbbbbbbb2"}, b, nil},
		{[]string{"Bearer  aaaaaaaaaaaaaaaa1"}, a, nil},
		{[]string{"Bearer aaaaaaaaaaaaaaaa"}, nil, ErrUnknown},
		{[]string{"Bearer aaaaaaaaaaaaaaaa1x"}, nil, ErrUnknown},
		{[]string{"Bearer"}, nil, ErrMalformed},
		{[]string{"Bearer "}, nil, ErrMalformed},
		{[]string{"Basic aaaaaaaaaaaaaaaa1"}, nil, ErrMalformed},
		{[]string{"Bearer aaaa aaaa"}, nil, ErrMalformed},
		{[]string{"Bearer aaaaaaaaaaaaaaaa1", "Bearer aaaaaaaaaaaaaaaa1"}, nil, ErrMalformed},
	} {
		h := http.Header{}
		for _, v := range c.hdr {
			h.Add("Authorization", v)
		}
		got, err := set.Authenticate(h)
		if got != c.want || err != c.err {
			t.Errorf("Authenticate(%q) = %v, %v; want %v, %v", c.hdr, got, err, c.want, c.err)
		}
	}
	if !a.Allows(Consume, "x.1") || a.Allows(Produce, "x.1") || a.Allows(Consume, "y") {
		t.Error("consume token scopes wrong")
	}
	if !b.Allows(Produce, "any") || !b.Allows(Consume, "any") || !b.AllowsEverywhere(Admin) || a.AllowsEverywhere(Consume) {
		t.Error("admin does not imply produce and consume, or everywhere is wrong")
	}
	if (&Set{}).Enabled() || (*Set)(nil).Enabled() {
		t.Error("an empty set is enabled")
	}
}
