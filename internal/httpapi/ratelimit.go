package httpapi

import (
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/delayq/delayq/internal/domain"
	"github.com/delayq/delayq/internal/ratelimit"
)

// limitedError is a request refused by a per-token or per-client limit.
// It is a domain.ErrRateLimited (429) that carries its Retry-After.
type limitedError struct {
	who   string // "token \"billing\"" or "client 192.0.2.7"
	retry time.Duration
}

func (e *limitedError) Error() string {
	return fmt.Sprintf("rate limit of %s exceeded; retry after %s", e.who, retryAfterValue(e))
}

func (e *limitedError) Unwrap() error { return domain.ErrRateLimited }

// retryAfterValue is the Retry-After header (whole seconds, at least 1)
// for a 429: the limiter's wait when err carries one.
func retryAfterValue(err error) string {
	var le *limitedError
	if !errors.As(err, &le) {
		return "1"
	}
	return strconv.Itoa(max(1, int(math.Ceil(le.retry.Seconds()))))
}

// badRate reports a rate limit that is negative, NaN or infinite.
func badRate(r float64) bool { return !(r >= 0) || math.IsInf(r, 1) }

// newLimiters builds the per-token and per-client limiters (nil: off).
func (s *Server) newLimiters() {
	s.tokenLim = ratelimit.New(ratelimit.Config{Rate: s.cfg.TokenRateLimit, Burst: s.cfg.TokenRateBurst})
	s.ipLim = ratelimit.New(ratelimit.Config{Rate: s.cfg.IPRateLimit, Burst: s.cfg.IPRateBurst})
}

// limitIP applies the per-client-IP limit. It runs before
// authentication, so guessing tokens is limited too.
func (s *Server) limitIP(r *http.Request) error {
	if s.ipLim == nil {
		return nil
	}
	key := ratelimit.ClientKey(r.RemoteAddr)
	if ok, retry := s.ipLim.Allow(key, s.cfg.Now()); !ok {
		return &limitedError{who: "client " + key, retry: retry}
	}
	return nil
}

// limitToken applies the per-token limit to an authenticated call; calls
// without a token (auth off) are not token-limited.
func (s *Server) limitToken(c *call) error {
	if s.tokenLim == nil || c.token == nil {
		return nil
	}
	if ok, retry := s.tokenLim.Allow(c.token.Name, s.cfg.Now()); !ok {
		return &limitedError{who: fmt.Sprintf("token %q", c.token.Name), retry: retry}
	}
	return nil
}

// limitedHandler applies the per-client limit to a handler outside the
// routing table (the dashboard).
func (s *Server) limitedHandler(h http.Handler) http.Handler {
	if s.ipLim == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := s.limitIP(r); err != nil {
			s.writeError(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}
