package pebblestore

import (
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/delayq/delayq/internal/store"
)

// Benchmarks run on the real disk (b.TempDir), fsync'd, unless noted.
// Compare with BenchmarkFsyncBaseline: the cost of one write+fsync on the
// same disk, the unit group commit amortises.

func openDisk(b *testing.B, noSync bool) *Store {
	b.Helper()
	s, err := Open(b.TempDir(), Options{Logger: quietLogger(), BallastSize: -1, NoSync: noSync})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

var payload256 = make([]byte, 256)

// BenchmarkInsertBatch100: one op = one MessageInsertMany of 100 messages
// with 256 B payloads, fsync'd, from 1 producer (one fsync per call) and
// from 8 concurrent producers (group commit shares fsyncs).
func BenchmarkInsertBatch100(b *testing.B) {
	for _, c := range []struct {
		producers int
		noSync    bool
	}{{1, false}, {8, false}, {1, true}} {
		producers := c.producers
		name := fmt.Sprint("producers=", producers)
		if c.noSync {
			name += "/nosync-baseline"
		}
		b.Run(name, func(b *testing.B) {
			s := openDisk(b, c.noSync)
			var n atomic.Int64
			insert := func() error {
				base := n.Add(1)
				ms := make([]store.InsertMessage, 100)
				for i := range ms {
					ms[i] = store.InsertMessage{ID: fmt.Sprintf("m%d-%d", base, i), Payload: payload256, DueAt: 1e12, MaxAttempts: 3}
				}
				_, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "bench", Now: 1, Messages: ms})
				return err
			}
			if producers == 1 {
				for b.Loop() {
					if err := insert(); err != nil {
						b.Fatal(err)
					}
				}
			} else {
				b.SetParallelism(max(1, producers/runtimeProcs()))
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := insert(); err != nil {
							b.Error(err)
							return
						}
					}
				})
			}
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "msgs/s")
		})
	}
}

// BenchmarkInsertSingleParallel64: 64 goroutines each inserting one message
// per call into one hot topic; every call is fsync'd before it returns.
func BenchmarkInsertSingleParallel64(b *testing.B) {
	s := openDisk(b, false)
	var n atomic.Int64
	// RunParallel starts SetParallelism × GOMAXPROCS goroutines.
	b.SetParallelism(max(1, 64/runtimeProcs()))
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			id := fmt.Sprint("m", n.Add(1))
			if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "bench", Now: 1,
				Messages: []store.InsertMessage{{ID: id, Payload: payload256, DueAt: 1e12, MaxAttempts: 3}}}); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkFsyncBaseline: one 256 B write + fsync of a plain file on the
// same disk, serially: the floor a store without group commit pays per op.
func BenchmarkFsyncBaseline(b *testing.B) {
	f, err := os.Create(b.TempDir() + "/f")
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for b.Loop() {
		if _, err := f.Write(payload256); err != nil {
			b.Fatal(err)
		}
		if err := f.Sync(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLeaseAfterAcks: lease+ack of one message, after 0 or 200k
// messages were leased and acked from the same topic (leaving 200k
// tombstones at the front of r/ and i/). With the low-water marks the
// cost is flat; without them each lease would step over every tombstone.
// In memory and NoSync, to measure the scan cost and not the disk.
//
// Both cases hold the same data volume (acked=0 gets 200k live messages in
// another topic instead), so the difference is the tombstones alone. The
// marks=off case disables the low-water marks for comparison.
func BenchmarkLeaseAfterAcks(b *testing.B) {
	for _, c := range []struct {
		acked int
		marks bool
	}{{0, true}, {200_000, true}, {0, false}, {5_000, false}} {
		b.Run(fmt.Sprintf("marks=%v/acked=%d", c.marks, c.acked), func(b *testing.B) {
			disableLowWater = !c.marks
			defer func() { disableLowWater = false }()
			acked := c.acked
			s, err := Open("db", Options{FS: vfs.NewMem(), Logger: quietLogger(), BallastSize: -1, NoSync: true})
			var fillTopic func(topic, prefix string, n int)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			fill := func(prefix string, n int) { fillTopic("q", prefix, n) }
			fillTopic = func(topic, prefix string, n int) {
				for i := 0; i < n; i += 1000 {
					ms := make([]store.InsertMessage, 0, 1000)
					for j := i; j < min(n, i+1000); j++ {
						ms = append(ms, store.InsertMessage{ID: fmt.Sprintf("%s%08d", prefix, j), Payload: payload256, DueAt: 0, MaxAttempts: 3})
					}
					if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: 1, Messages: ms}); err != nil {
						b.Fatal(err)
					}
				}
			}
			leaseAck := func() {
				ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 1, Max: 1, LeaseFor: 999999999999, Token: "t"})
				if err != nil || len(ls) != 1 {
					b.Fatalf("lease: %v %v", ls, err)
				}
				if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: "q", ID: ls[0].ID, Receipt: ls[0].Receipt, Now: 1}); err != nil {
					b.Fatal(err)
				}
			}
			fill("a", acked)
			if acked == 0 {
				fillTopic("pad", "p", 200_000)
			}
			for range acked {
				leaseAck()
			}
			fill("b", b.N+1)
			b.ResetTimer()
			for range b.N {
				leaseAck()
			}
		})
	}
}

// BenchmarkReleaseStep: one op is one millisecond of `bench lateness` at
// 10k msgs/s: promote the 10 messages due, lease them, ack them. In
// memory and NoSync, so the figures are the time each call holds the
// topic lock (the fsync of the ack is awaited after the lock is released).
func BenchmarkReleaseStep(b *testing.B) { releaseStep(b, 1) }

// BenchmarkReleaseStepPriorities is BenchmarkReleaseStep with the messages
// spread over priorities 0-3 (three of them in p/), to compare with the
// priority-0 case.
func BenchmarkReleaseStepPriorities(b *testing.B) { releaseStep(b, 4) }

func releaseStep(b *testing.B, priorities int) {
	s, err := Open("db", Options{FS: vfs.NewMem(), Logger: quietLogger(), BallastSize: -1, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const perMS = 10
	n := b.N * perMS
	for i := 0; i < n; i += 1000 {
		ms := make([]store.InsertMessage, 0, 1000)
		for j := i; j < min(n, i+1000); j++ {
			ms = append(ms, store.InsertMessage{ID: fmt.Sprintf("01JDQ7ZK0000000000%08d", j), Payload: payload256, DueAt: int64(1e12 + j/perMS), MaxAttempts: 3,
				Priority: uint8(j % priorities)}) // #nosec G115 -- < 4
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "bench-topic-r0", Now: 1, Messages: ms}); err != nil {
			b.Fatal(err)
		}
	}
	var promote, lease, ack time.Duration
	b.ResetTimer()
	for i := range b.N {
		now := int64(1e12 + i)
		t0 := time.Now()
		if r, err := s.MessagePromote(ctx, &store.MessagePromoteParams{Topic: "bench-topic-r0", Now: now, Max: 1000}); err != nil || r.Promoted != perMS {
			b.Fatalf("promote: %+v %v", r, err)
		}
		t1 := time.Now()
		ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "bench-topic-r0", Now: now, Max: 100, LeaseFor: 60_000, Token: "tok"})
		if err != nil || len(ls) != perMS {
			b.Fatalf("lease: %d %v", len(ls), err)
		}
		t2 := time.Now()
		items := make([]store.AckItem, len(ls))
		for j, r := range ls {
			items[j] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		if _, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "bench-topic-r0", Items: items, Now: now}); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		promote, lease, ack = promote+t1.Sub(t0), lease+t2.Sub(t1), ack+t3.Sub(t2)
	}
	b.ReportMetric(float64(promote.Microseconds())/float64(b.N), "promote-µs")
	b.ReportMetric(float64(lease.Microseconds())/float64(b.N), "lease-µs")
	b.ReportMetric(float64(ack.Microseconds())/float64(b.N), "ack-µs")
}

// BenchmarkDrainBacklog: one op = one MessageLease(100) + MessageAckMany
// of a backlog of 1 KiB messages that was flushed to sstables before the
// timer starts, as after a fill that outgrew the memtable (`delayq bench
// drain`). Generated (time-ordered) ids. On disk, NoSync: the CPU of the
// reads and writes, not the fsyncs. Reports ns, CPU and WAL bytes per
// message.
func BenchmarkDrainBacklog(b *testing.B) {
	s := openDisk(b, true)
	const batch = 100
	n := b.N * batch
	payload := make([]byte, 1024)
	for i := 0; i < n; i += 1000 {
		ms := make([]store.InsertMessage, 0, 1000)
		for j := i; j < min(n, i+1000); j++ {
			ms = append(ms, store.InsertMessage{ID: fmt.Sprintf("01JDQ7ZK0000000000%08d", j), Payload: payload, MaxAttempts: 3})
		}
		if _, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: "q", Now: 1, Messages: ms}); err != nil {
			b.Fatal(err)
		}
	}
	if err := s.db.Flush(); err != nil {
		b.Fatal(err)
	}
	cpu0, wal0 := processCPU(b), s.db.Metrics().WAL.BytesIn
	b.ResetTimer()
	for range b.N {
		ls, err := s.MessageLease(ctx, &store.MessageLeaseParams{Topic: "q", Now: 2, Max: batch, LeaseFor: 60_000, Token: "tok"})
		if err != nil || len(ls) != batch {
			b.Fatalf("lease: %d %v", len(ls), err)
		}
		items := make([]store.AckItem, len(ls))
		for j, r := range ls {
			items[j] = store.AckItem{ID: r.ID, Receipt: r.Receipt}
		}
		errs, err := s.MessageAckMany(ctx, &store.MessageAckManyParams{Topic: "q", Items: items, Now: 3})
		if err != nil {
			b.Fatal(err)
		}
		for _, e := range errs {
			if e != nil {
				b.Fatal(e)
			}
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(n), "ns/msg")
	// Process CPU (user + system, Pebble's background work included) is
	// what a loaded machine changes least.
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(n), "cpu-ns/msg")
	// Logical bytes logged to the WAL (and inserted in the memtable) per
	// message drained: the lease and the ack.
	b.ReportMetric(float64(s.db.Metrics().WAL.BytesIn-wal0)/float64(n), "wal-B/msg")
}

func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
