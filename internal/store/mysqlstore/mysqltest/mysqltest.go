// Package mysqltest starts a throw-away MariaDB server for tests:
// mariadb-install-db in a temporary directory, mariadbd on a free loopback
// port (never the machine's shared 3306). Tests are skipped with a clear
// message when the binaries are not installed; CI installs them
// (scripts/test.sh: the Debian package mariadb-server).
//
// A test package shares one server, started on first use and stopped by
// Main; each test takes a table prefix of its own in database "delayq":
//
//	func TestMain(m *testing.M) { os.Exit(mysqltest.Main(m)) }
//
//	srv := mysqltest.Shared(t)
//	url, prefix := srv.URL(), srv.NewPrefix()
//
// mariadbd refuses to run as root: when the tests run as root, it runs as
// the system user "mysql" (the Debian package creates it).
package mysqltest

import (
	"database/sql"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/delayq/delayq/internal/store/redisstore/redistest"
)

// User and Password of the account the server is bootstrapped with; it
// owns database Database.
const (
	User     = "delayq"
	Password = "delayq-test-pw" // #nosec G101 -- a throwaway test server's password
	Database = "delayq"
)

const startTimeout = 60 * time.Second

// Server is one mariadbd process and its data directory.
type Server struct {
	root   string
	port   int
	daemon string   // mariadbd
	args   []string // its command line
	cmd    *exec.Cmd
	guard  *os.File // closing it makes the watchdog shell kill mariadbd
}

var (
	prefixes atomic.Int64
	sharedMu sync.Mutex
	shared   *Server
	sharedEr error
)

// NewPrefix returns a table prefix no test used yet.
func (s *Server) NewPrefix() string { return fmt.Sprintf("t%d_", prefixes.Add(1)) }

// Port is the server's TCP port.
func (s *Server) Port() int { return s.port }

// URL is a mysql:// URL of database Database for User.
func (s *Server) URL() string {
	return fmt.Sprintf("mysql://%s:%s@127.0.0.1:%d/%s", User, Password, s.port, Database)
}

// DSN is URL in go-sql-driver's format.
func (s *Server) DSN() string {
	c := mysql.NewConfig()
	c.User, c.Passwd, c.Net, c.Addr, c.DBName = User, Password, "tcp", "127.0.0.1:"+strconv.Itoa(s.port), Database
	c.MultiStatements = true
	return c.FormatDSN()
}

// Shared returns the package's server, starting it on first use; the
// test is skipped when MariaDB is not installed.
func Shared(t testing.TB) *Server {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedEr == nil {
		shared, sharedEr = start()
	}
	if errors.Is(sharedEr, errNotInstalled) {
		t.Skip("mysqltest: mariadbd not installed (apt-get install mariadb-server)")
	}
	if sharedEr != nil {
		t.Fatalf("mysqltest: %v", sharedEr)
	}
	return shared
}

// Main runs the tests and stops the shared server.
func Main(m *testing.M) int {
	code := m.Run()
	sharedMu.Lock()
	if shared != nil {
		shared.Stop()
		shared = nil
	}
	sharedMu.Unlock()
	return code
}

var errNotInstalled = errors.New("mariadbd not installed")

func bin(name string) (string, error) {
	for _, d := range []string{"/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"} {
		p := filepath.Join(d, name)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	return "", errNotInstalled
}

// start installs a server in a new temporary directory and runs it;
// extra flags are appended to mariadbd's command line (a later flag
// overrides an earlier one).
func start(extra ...string) (*Server, error) {
	daemon, err := bin("mariadbd")
	if err != nil {
		return nil, err
	}
	install, err := bin("mariadb-install-db")
	if err != nil {
		return nil, err
	}
	root, err := os.MkdirTemp("", "mysqltest-")
	if err != nil {
		return nil, err
	}
	s := &Server{root: root, port: redistest.FreePort(nopTB{}), daemon: daemon}
	data := filepath.Join(root, "data")
	run := filepath.Join(root, "run") // socket, pid file, error log: the server's user writes them
	for _, d := range []string{data, run} {
		if err := os.Mkdir(d, 0o700); err != nil {
			s.remove()
			return nil, err
		}
	}
	var userArg []string
	if os.Geteuid() == 0 {
		u, err := user.Lookup("mysql")
		if err != nil {
			s.remove()
			return nil, fmt.Errorf("running as root and no user mysql to run mariadbd as: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(root, 0o711); err != nil { // #nosec G302 -- traversal only, so user mysql reaches data/
			s.remove()
			return nil, err
		}
		for _, d := range []string{data, run} {
			if err := os.Chown(d, uid, gid); err != nil {
				s.remove()
				return nil, err
			}
		}
		userArg = []string{"--user=mysql"}
	}
	// The bootstrap creates the test account with a password, as a real
	// deployment would have, rather than skipping grant tables. It runs at
	// every start (Restart included), so each statement is idempotent.
	initFile := filepath.Join(root, "init.sql")
	boot := fmt.Sprintf("CREATE DATABASE IF NOT EXISTS %s;\nCREATE USER IF NOT EXISTS '%s'@'%%' IDENTIFIED BY '%s';\nGRANT ALL ON *.* TO '%s'@'%%';\n", Database, User, Password, User)
	if err := os.WriteFile(initFile, []byte(boot), 0o644); err != nil { // #nosec G306 -- read by mariadbd as user mysql; test-only password
		s.remove()
		return nil, err
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db"}, userArg...)
	cmd := exec.Command(install, args...) // #nosec G204 -- test helper
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		s.remove()
		return nil, fmt.Errorf("mariadb-install-db: %v\n%s", err, out)
	}
	// Durability off by default: the tests check behaviour, not crash
	// safety, on a shared disk. Tests that kill the server pass
	// --innodb-flush-log-at-trx-commit=1 or 2.
	s.args = append([]string{"--no-defaults", "--datadir=" + data, "--socket=" + filepath.Join(run, "sock"),
		"--port=" + strconv.Itoa(s.port), "--bind-address=127.0.0.1", "--init-file=" + initFile,
		"--innodb-flush-log-at-trx-commit=0", "--innodb-buffer-pool-size=64M", "--innodb-log-file-size=32M",
		"--max-connections=400", "--skip-name-resolve", "--log-error=" + filepath.Join(run, "error.log"),
		"--pid-file=" + filepath.Join(run, "mariadbd.pid")}, userArg...)
	s.args = append(s.args, extra...)
	if err := s.run(); err != nil {
		s.remove()
		return nil, err
	}
	return s, nil
}

// run starts mariadbd on the server's port and data directory and waits
// until it answers.
//
// mariadbd runs under a watchdog shell reading a pipe this process holds:
// when the test binary dies in any way, the pipe closes and the shell
// kills the server, so none is left behind.
func (s *Server) run() error {
	logf, err := os.OpenFile(filepath.Join(s.root, "mariadbd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600) // #nosec G304 -- the server's log in the harness's own temp dir
	if err != nil {
		return err
	}
	defer logf.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", append([]string{"-c", `"$0" "$@" </dev/null & pid=$!; read _; kill -KILL $pid 2>/dev/null; wait $pid`, s.daemon}, s.args...)...) // #nosec G204 -- test helper
	cmd.Dir = s.root
	cmd.Stdin, cmd.Stdout, cmd.Stderr = r, logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = w.Close()
		return fmt.Errorf("start mariadbd: %w", err)
	}
	s.cmd, s.guard = cmd, w
	if err := s.waitReady(); err != nil {
		s.Kill()
		b, _ := os.ReadFile(filepath.Join(s.root, "run", "error.log")) // #nosec G304 -- our own log
		if len(b) > 4000 {
			b = b[len(b)-4000:]
		}
		return fmt.Errorf("mariadbd on port %d did not start: %v\n%s", s.port, err, b)
	}
	return nil
}

func (s *Server) waitReady() error {
	deadline := time.Now().Add(startTimeout)
	var err error
	for time.Now().Before(deadline) {
		var db *sql.DB
		if db, err = sql.Open("mysql", s.DSN()); err == nil {
			var dir string
			err = db.QueryRow("SELECT @@datadir").Scan(&dir)
			_ = db.Close()
			if err == nil {
				if filepath.Clean(dir) != filepath.Join(s.root, "data") {
					return fmt.Errorf("port %d is served by another server (%s)", s.port, dir)
				}
				return nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return err
}

// Stop kills the server and removes its directory.
func (s *Server) Stop() {
	s.Kill()
	s.remove()
}

// Kill sends SIGKILL to mariadbd and waits for it to be gone; the data
// directory stays for Restart. Idempotent.
func (s *Server) Kill() {
	if s.guard == nil {
		return
	}
	// The watchdog shell answers the closed pipe with kill -KILL of
	// mariadbd and exits once it has reaped it.
	_ = s.guard.Close()
	_ = s.cmd.Wait()
	s.cmd, s.guard = nil, nil
}

// Restart starts mariadbd again on the same port and data directory
// (after Kill: InnoDB recovers from its redo log) and waits until it
// answers.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	if err := s.run(); err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
}

func (s *Server) remove() { _ = os.RemoveAll(s.root) }

type nopTB struct{ testing.TB }

func (nopTB) Helper()               {}
func (nopTB) Fatalf(string, ...any) { panic("mysqltest: no free port") }

// PID is mariadbd's process id (for tests that read its CPU use).
func (s *Server) PID() (int, error) {
	b, err := os.ReadFile(filepath.Join(s.root, "run", "mariadbd.pid")) // #nosec G304 -- the server's own pid file
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Start runs a server for one test, stopped in t.Cleanup; the test is
// skipped when MariaDB is not installed. extra flags are appended to
// mariadbd's command line.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	s, err := start(extra...)
	if errors.Is(err, errNotInstalled) {
		t.Skip("mysqltest: mariadbd not installed (apt-get install mariadb-server)")
	}
	if err != nil {
		t.Fatalf("mysqltest: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}
