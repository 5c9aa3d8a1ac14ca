// Package buildinfo tells which build of delayq is running: the module
// version and the VCS revision and time that the Go toolchain stamps into
// every binary built from a checkout (debug.ReadBuildInfo), so that
// `delayq version`, the delayq_build_info metric, /healthz and the start-up
// log line all say the same thing without a release step setting them.
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Info is what the binary knows about its build.
type Info struct {
	// Version is the module version ("v1.2.3" when built with `go install
	// …@v1.2.3`), or "devel" for a build from a checkout.
	Version string `json:"version"`
	// Revision is the VCS commit ("" when unknown), with Modified set when
	// the work tree had uncommitted changes.
	Revision string `json:"revision,omitempty"`
	Time     string `json:"time,omitempty"` // the commit's time, RFC 3339
	Modified bool   `json:"modified,omitempty"`
	Go       string `json:"go"`
}

var (
	once sync.Once
	info Info
)

// Get reads the build information once.
func Get() Info {
	once.Do(func() {
		info = Info{Version: "devel", Go: runtime.Version()}
		bi, ok := debug.ReadBuildInfo()
		if !ok {
			return
		}
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			info.Version = v
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.time":
				info.Time = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	})
	return info
}

// Short is the revision's first 12 characters, "+dirty" when modified.
func (i Info) Short() string {
	r := i.Revision
	if len(r) > 12 {
		r = r[:12]
	}
	if r != "" && i.Modified {
		r += "+dirty"
	}
	return r
}

// String is one line for humans: "delayq devel (abc123def456, 2026-12-01T15:00:00Z, go1.26.10)".
func (i Info) String() string {
	s := "delayq " + i.Version + " ("
	if r := i.Short(); r != "" {
		s += r + ", "
	}
	if i.Time != "" {
		s += i.Time + ", "
	}
	return s + i.Go + ")"
}
