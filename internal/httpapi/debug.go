package httpapi

import (
	"net/http"
	"net/http/pprof"

	"github.com/delayq/delayq/internal/wire"
)

// DebugHandler serves Go's profiling endpoints (/debug/pprof/) for a
// listener of their own, which must be on loopback (they have no
// authentication). Like the API it answers only loopback Host names and
// allowedHosts (Config.AllowedHosts' syntax; "*" allows any), so a web
// page cannot read profiles through a rebound DNS name.
func DebugHandler(allowedHosts []string) (http.Handler, error) {
	hosts, err := newHostPolicy(allowedHosts, "127.0.0.1:0", false)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !hosts.allows(r.Host) {
			status, eb := toHTTP(&hostError{host: r.Host})
			w.Header().Set("Cache-Control", "no-store")
			writeJSON(w, status, wire.ErrorResponse{Error: eb})
			return
		}
		mux.ServeHTTP(w, r)
	}), nil
}
