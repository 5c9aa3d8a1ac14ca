package storetest

import (
	"testing"

	"github.com/delayq/delayq/internal/store"
)

// Run runs the conformance suite. open returns a fresh, empty store for
// each subtest.
func Run(t *testing.T, open func(t *testing.T) store.Store) {
	cases := []struct {
		name string
		fn   func(h *harness)
	}{
		{"InsertGet", testInsertGet},
		{"Duplicates", testDuplicates},
		{"DedupPurge", testDedupPurge},
		{"PayloadHeaders", testPayloadHeaders},
		{"SenderKeepsBodies", testSenderKeepsBodies},
		{"Promote", testPromote},
		{"Lease", testLease},
		{"LeaseNeverEarly", testLeaseNeverEarly},
		{"ManyOrdered", testManyOrdered},
		{"Priority", testPriority},
		{"Receipts", testReceipts},
		{"Ack", testAck},
		{"AckMany", testAckMany},
		{"Nack", testNack},
		{"NackFinal", testNackFinal},
		{"Extend", testExtend},
		{"LeaseExpire", testLeaseExpire},
		{"Cancel", testCancel},
		{"Reschedule", testReschedule},
		{"DeadList", testDeadList},
		{"DeadReplay", testDeadReplay},
		{"DeadDelete", testDeadDelete},
		{"MessageList", testMessageList},
		{"Topics", testTopics},
		{"TopicSettingsList", testTopicSettingsList},
		{"TopicDelete", testTopicDelete},
		{"Close", testClose},
		{"ConcurrentLease", testConcurrentLease},
		{"ConcurrentAckExpire", testConcurrentAckExpire},
		{"ConcurrentMixed", testConcurrentMixed},
		{"ConcurrentMixedExpiry", testConcurrentMixedExpiry},
		{"ConcurrentTopicDelete", testConcurrentTopicDelete},
		{"Schedules", testSchedules},
		{"ScheduleTickRace", testScheduleTickRace},
		{"RateLimiter", testRateLimiter},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.fn(newHarness(t, open(t)))
		})
	}
}
