package redisstore_test

import (
	"context"
	"io"
	"log"
	"testing"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

type quietLogger struct{ l *log.Logger }

func (q quietLogger) Printf(_ context.Context, format string, v ...any) { q.l.Printf(format, v...) }

func TestMain(m *testing.M) {
	// go-redis logs every failed dial; the fault tests cause many.
	redis.SetLogger(quietLogger{log.New(io.Discard, "", 0)})
	goleak.VerifyTestMain(m)
}
