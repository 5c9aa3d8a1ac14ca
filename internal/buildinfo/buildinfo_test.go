package buildinfo

import (
	"runtime"
	"strings"
	"testing"
)

func TestGet(t *testing.T) {
	i := Get()
	if i.Version == "" || i.Go != runtime.Version() {
		t.Fatalf("Get() = %+v", i)
	}
	if s := i.String(); !strings.HasPrefix(s, "delayq "+i.Version+" (") || !strings.HasSuffix(s, i.Go+")") {
		t.Fatalf("String() = %q", s)
	}
}

func TestShort(t *testing.T) {
	i := Info{Revision: "0123456789abcdef", Modified: true}
	if got := i.Short(); got != "0123456789ab+dirty" {
		t.Fatalf("Short() = %q", got)
	}
	if got := (Info{}).Short(); got != "" {
		t.Fatalf("Short() of nothing = %q", got)
	}
}
