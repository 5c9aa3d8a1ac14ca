package reliability

import (
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// gofailVersion is the gofail tool and runtime S2 builds with. The
// runtime is required only by the temporary copy's go.mod, never by ours.
const gofailVersion = "v0.2.0"

// s2FailpointPkgs are the packages whose `// gofail:` comments S2 enables.
var s2FailpointPkgs = []string{"./internal/store/pebblestore"}

// gofailTool returns the gofail binary: $GOFAIL, /tmp/gobin/gofail, one on
// PATH, or one installed now into a temporary GOBIN.
func gofailTool(t *testing.T) string {
	t.Helper()
	for _, p := range []string{os.Getenv("GOFAIL"), "/tmp/gobin/gofail"} {
		if p != "" {
			if st, err := os.Stat(p); err == nil && st.Mode().IsRegular() {
				return p
			}
		}
	}
	if p, err := exec.LookPath("gofail"); err == nil {
		return p
	}
	gobin := t.TempDir()
	t.Logf("gofail not found: go install go.etcd.io/gofail@%s into %s", gofailVersion, gobin)
	cmd := exec.Command("go", "install", "go.etcd.io/gofail@"+gofailVersion)
	cmd.Env = append(os.Environ(), "GOBIN="+gobin)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go install gofail: %v\n%s", err, out)
	}
	return filepath.Join(gobin, "gofail")
}

// buildGofailBinary copies the module's build inputs to a scratch
// directory, turns the failpoint comments into code with `gofail enable`,
// adds the gofail runtime to the copy's go.mod and builds cmd/delayq
// there. The copy's path is fixed ($TMPDIR/delayq-s2-gofail/src) and the
// build is not -trimpath: the dependencies' compiled packages are then
// the ones TestMain's build left in the cache, and our packages are
// cached across runs too (a fresh path or -trimpath recompiles
// everything, Pebble included: over 15 min on a loaded 2-core machine).
// Two S2 runs at once on one machine would share the directory.
func buildGofailBinary(t *testing.T) string {
	t.Helper()
	tool := gofailTool(t)
	dir := t.TempDir()
	src := filepath.Join(os.TempDir(), "delayq-s2-gofail", "src")
	if err := os.RemoveAll(src); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	if err := copyModule(repoRoot(), src); err != nil {
		t.Fatalf("copy module: %v", err)
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false")
	run := func(name string, args ...string) {
		t.Helper()
		cmd := exec.Command(name, args...)
		cmd.Dir, cmd.Env = src, env
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
		}
	}
	run(tool, append([]string{"enable"}, s2FailpointPkgs...)...)
	run("go", "get", "go.etcd.io/gofail@"+gofailVersion)
	out := filepath.Join(dir, "delayq-gofail")
	run("go", "build", "-o", out, "./cmd/delayq")
	t.Logf("gofail build: %v", time.Since(t0).Round(time.Millisecond))
	return out
}

// copyModule copies what building cmd/delayq needs: go.mod, go.sum and
// every package of the main module without tests and testdata. Nested
// modules (a directory with its own go.mod), node_modules and hidden
// directories are not part of the build and are skipped.
func copyModule(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, path)
		if d.IsDir() {
			if rel == "." {
				return nil
			}
			if d.Name() == "testdata" || d.Name() == "node_modules" || strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
				return filepath.SkipDir
			}
			return os.MkdirAll(filepath.Join(to, rel), 0o755)
		}
		if !d.Type().IsRegular() || strings.HasSuffix(rel, "_test.go") {
			return nil
		}
		if !strings.Contains(rel, string(filepath.Separator)) && rel != "go.mod" && rel != "go.sum" && !strings.HasSuffix(rel, ".go") {
			return nil // root-level files other than Go sources (e.g. a built binary)
		}
		return copyFile(path, filepath.Join(to, rel))
	})
}

func copyFile(from, to string) error {
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.Create(to)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
