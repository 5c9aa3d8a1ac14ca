package redistest

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// A redis-server whose wall clock the test sets, so that Redis TIME —
// what the store's scripts read in production (redisstore.TimeRedis) —
// is the suite's logical time, and exact-value assertions hold.
//
// libfaketime would do, but not with Debian's redis-server: it links
// jemalloc, which reads the clock while libfaketime initialises, and
// libfaketime then refuses every clock call (its issues #130, #327: the
// server never starts). So this package builds its own small preload
// library with cc: it answers gettimeofday (TIME's source),
// clock_gettime(CLOCK_REALTIME*) and time() from an 8-byte file the test
// writes, passes every other clock (the monotonic one Redis's event loop
// runs on) to the kernel by raw syscall, and calls nothing that could
// allocate, so it cannot recurse.

// clockShim is the preload library's source.
const clockShim = `#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Unix ms (little-endian int64) mapped from DELAYQ_REDISTEST_CLOCK; 0:
   the real clock. */
static volatile int64_t *fake;

__attribute__((constructor)) static void init(void) {
	const char *path = getenv("DELAYQ_REDISTEST_CLOCK");
	if (path == NULL) return;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) return;
	void *m = mmap(NULL, sizeof(int64_t), PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m != MAP_FAILED) fake = m;
}

static int64_t fake_ms(void) {
	return fake == NULL ? 0 : __atomic_load_n(fake, __ATOMIC_RELAXED);
}

static int real_clock_gettime(clockid_t id, struct timespec *ts) {
	return (int)syscall(SYS_clock_gettime, id, ts);
}

int clock_gettime(clockid_t id, struct timespec *ts) {
	int64_t ms = fake_ms();
	if (ms != 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
		ts->tv_sec = ms / 1000;
		ts->tv_nsec = (ms % 1000) * 1000000;
		return 0;
	}
	return real_clock_gettime(id, ts);
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
	(void)tz;
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return -1;
	tv->tv_sec = ts.tv_sec; /* glibc declares tv nonnull */
	tv->tv_usec = ts.tv_nsec / 1000;
	return 0;
}

time_t time(time_t *t) {
	struct timespec ts;
	if (clock_gettime(CLOCK_REALTIME, &ts) != 0) return (time_t)-1;
	if (t != NULL) *t = ts.tv_sec;
	return ts.tv_sec;
}
`

// StartWithClock is Start with a wall clock the test sets (SetTime).
// Until the first SetTime the server reads the real clock. Skipped like
// Start when redis-server, or cc (which builds the preload library), is
// missing; CI installs both.
func StartWithClock(t testing.TB, args ...string) *Server {
	t.Helper()
	env, f := fakeClock(t)
	return start(t, env, f, args)
}

// StartClusterWithClock is StartCluster with one wall clock for every
// node, set by Cluster.SetTime.
func StartClusterWithClock(t testing.TB, n int, args ...string) *Cluster {
	t.Helper()
	env, f := fakeClock(t)
	return startCluster(t, n, args, func(args []string) *Server { return start(t, env, f, args) })
}

// SetTime sets the wall clock of every node (StartClusterWithClock).
func (c *Cluster) SetTime(ms int64) { c.Nodes[0].SetTime(ms) }

// fakeClock builds the preload library and the clock file (reading 0:
// the real clock) and returns the environment that makes a server use
// them, and the open file.
func fakeClock(t testing.TB) ([]string, *os.File) {
	t.Helper()
	dir := t.TempDir()
	src, lib := filepath.Join(dir, "clock.c"), filepath.Join(dir, "clock.so")
	if err := os.WriteFile(src, []byte(clockShim), 0o600); err != nil {
		t.Fatal(err)
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("redistest: cc not found in PATH (apt-get install gcc); skipping the Redis tests that set Redis's clock")
	}
	out, err := exec.Command(cc, "-shared", "-fPIC", "-O2", "-Wall", "-Werror", "-o", lib, src).CombinedOutput() // #nosec G204 -- test helper: cc from PATH compiling the source above
	if err != nil {
		t.Fatalf("redistest: build the clock library: %v\n%s", err, out)
	}
	clockFile := filepath.Join(dir, "clock")
	f, err := os.OpenFile(clockFile, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o600) // #nosec G304 -- a file in the test's own temporary directory
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(make([]byte, 8), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = f.Close() })
	return []string{"LD_PRELOAD=" + lib, "DELAYQ_REDISTEST_CLOCK=" + clockFile}, f
}

// SetTime sets the wall clock of a server started with one to
// Unix ms (0: the real clock again); it holds until the next SetTime.
// Redis reads it on its next call, and TIME answers it from then on.
func (s *Server) SetTime(ms int64) {
	s.t.Helper()
	if s.clock == nil {
		s.t.Fatal("redistest: SetTime on a server not started by StartWithClock")
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(ms)) // #nosec G115 -- a bit pattern for the C side's int64
	// One 8-byte write at offset 0, never a truncation: the server maps
	// the file and may read it at any time.
	if _, err := s.clock.WriteAt(b[:], 0); err != nil {
		s.t.Fatalf("redistest: set the clock: %v", err)
	}
}
