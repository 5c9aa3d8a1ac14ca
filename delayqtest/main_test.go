package delayqtest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The queue's goroutines must be gone when a test's cleanup has run.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
