package dashboard

import (
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
)

// TestEventDetailFormattedWhenRead: every send and lease is recorded but
// few are viewed, so recording one formats nothing (it allocated the
// detail text of each: a time format and a Sprintf per message); the
// text is the same when the message page reads it.
func TestEventDetailFormattedWhenRead(t *testing.T) {
	r := NewRecorder(RecorderConfig{MaxMessages: 16, EventsPerMessage: 4})
	due := time.Date(2030, 1, 2, 3, 4, 5, 6e6, time.UTC)
	m := &domain.Message{Topic: "t", ID: "m1", State: domain.StateReady, DeliverAt: due, Attempt: 3, LeaseExpiresAt: due.Add(time.Minute)}
	sent := engine.Event{Kind: engine.EventMessageSent, Topic: "t", Message: m}
	leased := engine.Event{Kind: engine.EventMessageLeased, Topic: "t", Message: m}
	r.HandleEvent(sent)
	r.HandleEvent(leased) // the message and its event ring exist from here on
	if n := testing.AllocsPerRun(100, func() { r.HandleEvent(sent); r.HandleEvent(leased) }); n != 0 {
		t.Errorf("recording a send and a lease allocates %v times, want 0", n)
	}
	ev := r.MessageEvents("t", "m1")
	if len(ev) != 4 {
		t.Fatalf("%d events, want 4", len(ev))
	}
	if got, want := ev[2].Detail, "due 2030-01-02 03:04:05.006Z"; ev[2].What != "sent" || got != want {
		t.Errorf("sent detail %q, want %q", got, want)
	}
	if got, want := ev[3].Detail, "delivery 3, lease until 2030-01-02 03:05:05.006Z"; ev[3].What != "leased" || got != want {
		t.Errorf("leased detail %q, want %q", got, want)
	}
}
