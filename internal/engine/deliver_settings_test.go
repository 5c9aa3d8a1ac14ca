package engine_test

import (
	"context"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/engine"
	"github.com/delayq/delayq/internal/store/pebblestore"
)

// TestDeliverSettingsStoredWithCredentials: deliver settings survive a
// restart with their credentials; a write without them keeps the stored
// ones; defaults are filled in; push and deliver exclude each other.
func TestDeliverSettingsStoredWithCredentials(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*engine.Engine, func()) {
		st, err := pebblestore.Open(dir, pebblestore.Options{})
		if err != nil {
			t.Fatal(err)
		}
		e, err := engine.Open(ctx, engine.Config{Store: st})
		if err != nil {
			t.Fatal(err)
		}
		return e, func() { _ = e.Close(ctx); _ = st.Close() }
	}
	e, closeE := open()
	got, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{Deliver: &domain.DeliverSettings{
		Kafka: &domain.KafkaTarget{Brokers: []string{"k:9092"}, Topic: "orders", SASL: &domain.KafkaSASL{Mechanism: "PLAIN", User: "u", Password: "pw1"}}}})
	if err != nil {
		t.Fatal(err)
	}
	if d := got.Deliver; d.MaxInFlight != domain.DefaultDeliverMaxInFlight || d.Timeout != domain.DefaultDeliverTimeout {
		t.Fatalf("defaults not filled: %+v", d)
	}
	// A write-back without the password keeps it.
	if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{MaxAttempts: 3, Deliver: &domain.DeliverSettings{
		Kafka: &domain.KafkaTarget{Brokers: []string{"k:9092"}, Topic: "orders2", SASL: &domain.KafkaSASL{Mechanism: "PLAIN", User: "u", PasswordSet: true}}, Timeout: time.Second}}); err != nil {
		t.Fatal(err)
	}
	closeE()
	e, closeE = open()
	defer closeE()
	ti, err := e.Topic(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	d := ti.Settings.Deliver
	if d == nil || d.Kafka.Topic != "orders2" || d.Kafka.SASL.Password != "pw1" || d.Timeout != time.Second || ti.Settings.MaxAttempts != 3 {
		t.Fatalf("after restart: %+v", d)
	}
	_, err = e.SetTopicSettings(ctx, "t", domain.TopicSettings{Push: &domain.PushSettings{URL: "http://x/"}, Deliver: d})
	if ie, ok := err.(*domain.InvalidError); !ok || ie.Field != "deliver" {
		t.Fatalf("push and deliver together: %v", err)
	}
	// Removing deliver drops it.
	if _, err := e.SetTopicSettings(ctx, "t", domain.TopicSettings{}); err != nil {
		t.Fatal(err)
	}
	if ti, _ := e.Topic(ctx, "t"); ti.Settings.Deliver != nil {
		t.Fatalf("deliver kept after removal: %+v", ti.Settings.Deliver)
	}
}
