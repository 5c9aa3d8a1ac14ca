package storetest

import (
	"context"
	"reflect"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// limiterStore is a store that is also a (trivial) store.RateLimiter.
type limiterStore struct{ store.Store }

func (limiterStore) RateTake(context.Context, *store.RateTakeParams) (int, time.Duration, error) {
	return 0, 0, nil
}

// Every method of store.Store and store.RateLimiter whose params carry a
// Now sets the clock to it first: a method added to the contract later
// without its WithClock override would otherwise run at a stale time.
func TestWithClockSetsEveryNow(t *testing.T) {
	var got int64
	s := WithClock(limiterStore{memstore.New()}, func(now int64) { got = now })
	defer s.Close()
	v := reflect.ValueOf(s)
	checked := 0
	for _, iface := range []reflect.Type{reflect.TypeFor[store.Store](), reflect.TypeFor[store.RateLimiter]()} {
		for i := range iface.NumMethod() {
			m := iface.Method(i)
			if m.Type.NumIn() != 2 || m.Type.In(1).Kind() != reflect.Pointer || m.Type.In(1).Elem().Kind() != reflect.Struct {
				continue
			}
			p := reflect.New(m.Type.In(1).Elem())
			now := p.Elem().FieldByName("Now")
			if !now.IsValid() {
				continue
			}
			want := T0 + int64(i)
			now.SetInt(want)
			if f := p.Elem().FieldByName("Topic"); f.IsValid() {
				f.SetString("t")
			}
			got = 0
			v.MethodByName(m.Name).Call([]reflect.Value{reflect.ValueOf(context.Background()), p})
			if got != want {
				t.Errorf("%s: clock set to %d, want its Now %d", m.Name, got, want)
			}
			checked++
		}
	}
	if checked < 14 {
		t.Fatalf("checked %d methods with a Now; the contract has at least 14", checked)
	}
}
