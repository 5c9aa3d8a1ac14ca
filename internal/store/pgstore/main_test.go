package pgstore_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
)

func TestMain(m *testing.M) {
	code := pgtest.Main(m)
	if admin != nil {
		admin.Close()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
