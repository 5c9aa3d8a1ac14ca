// Package pgtest starts throw-away PostgreSQL servers for tests: initdb in
// a temporary directory, postgres on a free loopback port (never the
// machine's shared 5432), TCP only. Tests are skipped with a clear message
// when the PostgreSQL binaries are not installed; CI installs them
// (scripts/test.sh: the Debian package postgresql).
//
// A test package shares one server, started on first use and stopped by
// Main, and gives each test a schema of its own:
//
//	func TestMain(m *testing.M) { os.Exit(pgtest.Main(m)) }
//
//	srv := pgtest.Shared(t)
//	url, schema := srv.URL(), srv.NewSchema() // a name no test used yet
//
// Start runs a server for one test (killed in t.Cleanup), for tests that
// stop or restart it.
//
// PostgreSQL refuses to run as root. When the tests run as root, the
// server runs as the system user "postgres" (the Debian package creates
// it), and its data directory is owned by that user.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// startTimeout bounds how long a server may take to accept connections.
const startTimeout = 30 * time.Second

// User is the database superuser the servers are initialised with
// (trust authentication on loopback).
const User = "delayq"

// Server is one postgres process and its data directory.
type Server struct {
	root string // temporary directory holding data/ and the log
	dir  string // data directory
	port int
	bin  string // directory of initdb and postgres
	cred *syscall.Credential

	mu    sync.Mutex
	cmd   *exec.Cmd // the watchdog shell; nil while stopped
	pid   int       // the postmaster's
	guard *os.File  // write end of the watchdog's stdin
	err   error     // why the server could not be started (Shared only)
}

var schemas atomic.Int64

// NewSchema returns a schema name no test of this process used yet. The
// store creates the schema; it is dropped with the server.
func (s *Server) NewSchema() string { return fmt.Sprintf("t%d", schemas.Add(1)) }

// Port is the server's TCP port on 127.0.0.1.
func (s *Server) Port() int { return s.port }

// URL is a connection URL for database postgres as User, without TLS.
func (s *Server) URL() string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/postgres?sslmode=disable", User, s.port)
}

// Dir is the data directory.
func (s *Server) Dir() string { return s.dir }

var (
	sharedOnce sync.Once
	shared     *Server
)

// Shared returns the package's server, starting it on first use. It is
// stopped by Main.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedOnce.Do(func() {
		shared = &Server{}
		bin, err := binDir()
		if err != nil {
			shared.err = err
			return
		}
		s, err := create(bin)
		if err != nil {
			shared.err = err
			return
		}
		if err := s.start(); err != nil {
			s.remove()
			shared.err = err
			return
		}
		shared = s
	})
	if shared.err != nil {
		if errors.Is(shared.err, errNoBinaries) || errors.Is(shared.err, errNoUser) {
			t.Skipf("pgtest: %v; skipping PostgreSQL tests", shared.err)
		}
		t.Fatalf("pgtest: %v", shared.err)
	}
	return shared
}

// Main runs the tests, then stops the shared server if one was started,
// and returns m.Run's code.
func Main(m *testing.M) int {
	code := m.Run()
	if shared != nil && shared.err == nil {
		shared.Stop()
		shared.remove()
	}
	return code
}

// Start runs a server for one test; it is killed and removed in t.Cleanup.
func Start(t testing.TB) *Server {
	t.Helper()
	bin, err := binDir()
	if err != nil {
		t.Skipf("pgtest: %v; skipping PostgreSQL tests", err)
	}
	s, err := create(bin)
	if errors.Is(err, errNoUser) {
		t.Skipf("pgtest: %v; skipping PostgreSQL tests", err)
	}
	if err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	t.Cleanup(func() {
		s.Kill()
		s.remove()
	})
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
	return s
}

var (
	errNoBinaries = errors.New("initdb/postgres not found in PATH nor /usr/lib/postgresql/*/bin (apt-get install postgresql)")
	errNoUser     = errors.New(`running as root and there is no "postgres" user to run the server as`)
)

// binDir finds the directory of initdb and postgres: PATH first, then
// Debian's /usr/lib/postgresql/<version>/bin, newest version first.
func binDir() (string, error) {
	if p, err := exec.LookPath("initdb"); err == nil {
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return version(dirs[i]) > version(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errNoBinaries
}

func version(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// create runs initdb in a new temporary directory.
func create(bin string) (*Server, error) {
	cred, uid, gid, err := credential()
	if err != nil {
		return nil, err
	}
	sweepStale()
	root, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(root, "owner"), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		return nil, err
	}
	s := &Server{root: root, dir: filepath.Join(root, "data"), bin: bin, cred: cred, port: redistest.FreePort(nopTB{})}
	fail := func(err error) (*Server, error) {
		s.remove()
		return nil, err
	}
	// The server's user must reach its data directory: the temporary
	// directory is root's (0700) when the tests run as root.
	if cred != nil {
		if err := os.Chmod(root, 0o711); err != nil { // #nosec G302 -- traversal only, so the postgres user reaches data/
			return fail(err)
		}
	}
	if err := os.Mkdir(s.dir, 0o700); err != nil {
		return fail(err)
	}
	if cred != nil {
		if err := os.Chown(s.dir, uid, gid); err != nil {
			return fail(err)
		}
	}
	cmd := exec.Command(filepath.Join(bin, "initdb"), "-D", s.dir, "-U", User, "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync") // #nosec G204 -- test helper: initdb found by binDir, arguments built here
	cmd.Dir = root
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("initdb: %v\n%s", err, out))
	}
	return s, nil
}

// credential is the user the server runs as: nil (the current user)
// unless the tests run as root, then "postgres".
func credential() (*syscall.Credential, int, int, error) {
	if os.Geteuid() != 0 {
		return nil, 0, 0, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, 0, 0, errNoUser
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, 0, 0, fmt.Errorf("user postgres has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, int(uid), int(gid), nil
}

// start runs postgres and waits until it accepts connections and is the
// server of this data directory (not another one that took the port).
//
// postgres runs under a watchdog shell that reads its stdin from a pipe
// this process holds: when this process ends in any way — a test binary
// killed by go test's timeout included, which runs no cleanup — the pipe
// closes and the shell kills the server, so none is left behind.
func (s *Server) start() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(s.root, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// fsync off: the tests check behaviour, not crash safety, and the
	// machine's disk is shared. Sockets off: TCP on loopback only.
	cmd := exec.Command("/bin/sh", "-c", `"$0" "$@" </dev/null & pid=$!; read _; kill -KILL $pid 2>/dev/null; wait $pid`, // #nosec G204 -- test helper: postgres found by binDir, arguments built here
		filepath.Join(s.bin, "postgres"), "-D", s.dir,
		"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(s.port),
		"-c", "unix_socket_directories=", "-c", "fsync=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=32MB", "-c", "log_min_messages=warning")
	cmd.Dir = s.root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	s.cmd, s.guard = cmd, w
	pid, err := s.waitReady()
	if err != nil {
		s.stopLocked(syscall.SIGKILL)
		return fmt.Errorf("postgres on port %d did not start: %v\n%s", s.port, err, tail(filepath.Join(s.root, "postgres.log")))
	}
	s.pid = pid
	return nil
}

// waitReady answers the postmaster's pid once it serves this directory.
func (s *Server) waitReady() (int, error) {
	deadline := time.Now().Add(startTimeout)
	var err error
	for time.Now().Before(deadline) {
		var dir string
		if dir, err = s.query("SHOW data_directory"); err == nil {
			if dir != s.dir {
				return 0, fmt.Errorf("port %d is served by another server (data directory %s)", s.port, dir)
			}
			b, err := os.ReadFile(filepath.Join(s.dir, "postmaster.pid")) // #nosec G304 -- the server's own pid file
			if err != nil {
				return 0, err
			}
			first, _, _ := strings.Cut(string(b), "\n")
			return strconv.Atoi(strings.TrimSpace(first))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return 0, err
}

// query runs one statement answering one text value.
func (s *Server) query(sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	var out string
	err = conn.QueryRow(ctx, sql).Scan(&out)
	return out, err
}

// Stop shuts the server down cleanly (SIGINT: fast shutdown, checkpoint)
// and waits for it. Idempotent.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGINT)
}

// Kill sends SIGKILL to the postmaster and waits for it; its backends
// notice and exit. Idempotent.
func (s *Server) Kill() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopLocked(syscall.SIGKILL)
}

// StopImmediate stops the server abruptly with `pg_ctl stop -m
// immediate` (SIGQUIT: every process exits at once, no checkpoint; the
// next start runs crash recovery from the WAL) and waits for it.
// Idempotent.
func (s *Server) StopImmediate() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		return nil
	}
	cmd := exec.Command(filepath.Join(s.bin, "pg_ctl"), "stop", "-D", s.dir, "-m", "immediate", "-w", "-t", "30") // #nosec G204 -- test helper: pg_ctl beside initdb, arguments built here
	cmd.Dir = s.dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	out, err := cmd.CombinedOutput()
	// Whatever pg_ctl did, the watchdog kills what is left and is reaped.
	_ = s.guard.Close()
	_ = s.cmd.Wait()
	s.cmd, s.guard, s.pid = nil, nil, 0
	if err != nil {
		return fmt.Errorf("pg_ctl stop -m immediate: %v: %s", err, out)
	}
	return nil
}

func (s *Server) stopLocked(sig syscall.Signal) {
	if s.cmd == nil {
		return
	}
	if s.pid != 0 {
		_ = syscall.Kill(s.pid, sig)
		// The watchdog's wait returns when the postmaster has exited.
		if sig != syscall.SIGKILL {
			s.waitExit(30 * time.Second)
		}
	}
	_ = s.guard.Close() // the watchdog kills whatever is left, then exits
	_ = s.cmd.Wait()
	s.cmd, s.guard, s.pid = nil, nil, 0
	// Backends of a killed postmaster exit on their own once they notice;
	// a restart waits for them through postmaster.pid.
	if sig == syscall.SIGKILL {
		time.Sleep(100 * time.Millisecond)
	}
}

// waitExit waits until the postmaster is gone (its pid file removed by a
// clean shutdown, or the process no longer there).
func (s *Server) waitExit(limit time.Duration) {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(s.pid, 0); err != nil {
			return
		}
		if _, err := os.Stat(filepath.Join(s.dir, "postmaster.pid")); errors.Is(err, os.ErrNotExist) {
			time.Sleep(20 * time.Millisecond) // the process exits right after
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart stops the server if it runs and starts it again on the same
// port and data directory.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Stop()
	if err := s.start(); err != nil {
		t.Fatalf("pgtest: %v", err)
	}
}

// Pause stops the postmaster and its backends (SIGSTOP): connections are
// accepted by the kernel, nothing answers. Resume undoes it.
func (s *Server) Pause(t testing.TB) { s.groupSignal(t, syscall.SIGSTOP) }

// Resume continues a paused server.
func (s *Server) Resume(t testing.TB) { s.groupSignal(t, syscall.SIGCONT) }

// groupSignal signals the postmaster and every process it started.
func (s *Server) groupSignal(t testing.TB, sig syscall.Signal) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil {
		t.Fatalf("pgtest: server not running")
	}
	pids := []int{s.pid}
	out, err := exec.Command("pgrep", "-P", strconv.Itoa(s.pid)).Output() // #nosec G204 -- test helper: the postmaster's own pid
	if err != nil {
		t.Fatalf("pgtest: list backends: %v", err)
	}
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil {
			pids = append(pids, pid)
		}
	}
	for _, pid := range pids {
		_ = syscall.Kill(pid, sig)
	}
}

// sweepStale removes the directories of servers whose test process is
// gone (killed before its cleanup ran; the watchdog killed the server).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), "pgtest-*"))
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "owner")) // #nosec G304 -- our own marker file
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(string(b))
		if err != nil || pid == os.Getpid() || syscall.Kill(pid, 0) == nil {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(d, "data", "postmaster.pid")); err == nil { // #nosec G304 -- a pid file of ours
			first, _, _ := strings.Cut(string(b), "\n")
			if pm, err := strconv.Atoi(strings.TrimSpace(first)); err == nil && syscall.Kill(pm, 0) == nil {
				continue // still running: not ours to kill
			}
		}
		_ = os.RemoveAll(d)
	}
}

func (s *Server) remove() {
	if s.root != "" {
		_ = os.RemoveAll(s.root)
	}
}

func tail(path string) string {
	b, _ := os.ReadFile(path) // #nosec G304 -- the server's own log in its temporary directory
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// nopTB lets FreePort run outside a test (Shared starts the server once
// for many tests); it has no free port to fail on in practice, and a
// failure shows as a server that cannot bind.
type nopTB struct{ testing.TB }

func (nopTB) Helper()               {}
func (nopTB) Fatalf(string, ...any) { panic("pgtest: no free port") }
