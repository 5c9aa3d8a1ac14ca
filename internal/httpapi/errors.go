package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"

	"github.com/delayq/delayq/internal/auth"
	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/wire"
)

// Errors the server makes itself; they meet delayq's sentinels in toHTTP.
var (
	errRouteNotFound = errors.New("no such endpoint")
	errNotImpl       = errors.New("not implemented yet")
	errShutdown      = errors.New("the server is shutting down")
	errNoBackup      = fmt.Errorf("%w: this store has no online backup of its own; back up Redis, PostgreSQL or MySQL with their own tools (docs/operations.md)", errNotImpl)
)

// methodError is a known path asked with a method it does not serve.
type methodError struct{ allow string }

func (e *methodError) Error() string { return "method not allowed; allowed: " + e.allow }

// toHTTP is the one place that maps an error to a status and a wire error
// body. Bad input is never a 500: a 500 means a bug and is logged at error
// by the caller.
func toHTTP(err error) (int, wire.ErrorBody) {
	var inv *domain.InvalidError
	var me *methodError
	switch {
	case errors.As(err, &inv):
		return http.StatusBadRequest, wire.ErrorBody{Code: wire.CodeInvalid, Message: inv.Error(), Field: inv.Field}
	case errors.Is(err, domain.ErrInvalid), errors.Is(err, errBadRequest):
		return http.StatusBadRequest, body(wire.CodeInvalid, err)
	case errors.Is(err, domain.ErrUnauthorized), errors.Is(err, auth.ErrMissing), errors.Is(err, auth.ErrMalformed), errors.Is(err, auth.ErrUnknown), errors.Is(err, auth.ErrWholeSpec):
		return http.StatusUnauthorized, body(wire.CodeUnauthenticated, err)
	case errors.Is(err, domain.ErrForbidden):
		return http.StatusForbidden, body(wire.CodeForbidden, err)
	case errors.Is(err, domain.ErrNotFound), errors.Is(err, errRouteNotFound):
		return http.StatusNotFound, body(wire.CodeNotFound, err)
	case errors.As(err, &me):
		return http.StatusMethodNotAllowed, body(wire.CodeMethod, err)
	case errors.Is(err, errBodyTimeout):
		return http.StatusRequestTimeout, body(wire.CodeTimeout, err)
	case errors.Is(err, domain.ErrConflict):
		return http.StatusConflict, body(wire.CodeConflict, err)
	case errors.Is(err, domain.ErrTooLarge):
		return http.StatusRequestEntityTooLarge, body(wire.CodeTooLarge, err)
	case errors.Is(err, errMediaType):
		return http.StatusUnsupportedMediaType, body(wire.CodeMediaType, err)
	case errors.Is(err, domain.ErrRateLimited):
		return http.StatusTooManyRequests, body(wire.CodeRateLimited, err)
	case errors.Is(err, errNotImpl):
		return http.StatusNotImplemented, body(wire.CodeNotImplemented, err)
	case errors.Is(err, domain.ErrUnavailable), errors.Is(err, errShutdown),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		// A cancelled context is a client that went away or a server that
		// is stopping; either way nobody is owed a 500.
		return http.StatusServiceUnavailable, body(wire.CodeUnavailable, err)
	}
	return http.StatusInternalServerError, wire.ErrorBody{Code: wire.CodeInternal, Message: "internal error (logged on the server)"}
}

// body makes an ErrorBody with the error's message minus the package prefix.
func body(code string, err error) wire.ErrorBody {
	return wire.ErrorBody{Code: code, Message: strings.TrimPrefix(err.Error(), "delayq: ")}
}

// writeError answers err in the API's error shape, with the request's id.
// It logs 500s (bugs) at error and 503s at warn.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, eb := toHTTP(err)
	eb.RequestID = requestID(w)
	switch status {
	case http.StatusInternalServerError:
		s.log.ErrorContext(r.Context(), "request failed", "method", r.Method, "path", r.URL.Path, "request_id", eb.RequestID, "err", err)
	case http.StatusServiceUnavailable:
		if errors.Is(err, errBodyBudget) {
			s.log.DebugContext(r.Context(), "request body over the memory budget", "method", r.Method, "path", r.URL.Path, "request_id", eb.RequestID)
		} else if r.Context().Err() == nil {
			s.log.WarnContext(r.Context(), "engine unavailable", "method", r.Method, "path", r.URL.Path, "request_id", eb.RequestID, "err", err)
		}
		w.Header().Set("Retry-After", "1")
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="delayq"`)
	case http.StatusTooManyRequests:
		w.Header().Set("Retry-After", retryAfterValue(err))
	case http.StatusMethodNotAllowed:
		var me *methodError
		if errors.As(err, &me) {
			w.Header().Set("Allow", me.allow)
		}
	}
	var he *hostError
	if status == http.StatusRequestEntityTooLarge || status == http.StatusRequestTimeout || (r.ContentLength != 0 &&
		(errors.As(err, &he) || errors.Is(err, errCrossOrigin) || errors.Is(err, errMediaType) || errors.Is(err, errBodyBudget))) {
		// The body was not read to the end; don't reuse the connection
		// (else net/http reads up to 256 KiB of it before answering).
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, wire.ErrorResponse{Error: eb})
}

// writeJSON answers v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Only our own wire types get here; a failure is a bug.
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"code":"internal","message":"encoding the answer failed"}}`)
		slog.Error("encode answer", "err", err)
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n')) // the client went away: nothing left to tell it
}
