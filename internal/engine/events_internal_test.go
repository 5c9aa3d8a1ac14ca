package engine

import "testing"

// TestCountingEventsDoNotAllocate: the hot path emits a counting event
// per message leased; with subscribers that count (metrics, the
// dashboard's rates) it must cost no allocation, and message events must
// not be asked for when nobody wants them.
func TestCountingEventsDoNotAllocate(t *testing.T) {
	var h hub
	if h.wants(EventDelivered) || h.wants(EventMessageLeased) {
		t.Fatal("an empty hub wants events")
	}
	n := 0
	h.subscribe(Subscription{Kinds: CountingEvents, Handle: func(ev Event) { n += ev.N }})
	h.subscribe(Subscription{Kinds: Mask(EventTopicSettingsChanged), Handle: func(Event) { t.Error("got an event it did not ask for") }})
	if h.wants(EventMessageLeased) || h.wants(EventMessageSent) {
		t.Error("message events wanted by counting subscriptions")
	}
	if !h.wants(EventDelivered) {
		t.Error("counting events not wanted")
	}
	if a := testing.AllocsPerRun(100, func() {
		h.count(EventSent, "t", 1)
		h.emit(Event{Kind: EventDelivered, Topic: "t", Lateness: 1})
		h.storeError("lease")
	}); a != 0 {
		t.Errorf("emitting counting events allocates %v times, want 0", a)
	}
	if n != 101 {
		t.Errorf("subscriber counted %d sends, want 101", n)
	}
}
