package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// readBody reads at most limit bytes of the request body. A larger body is
// ErrTooLarge after reading limit+1 bytes at most (http.MaxBytesReader), so
// neither a lying Content-Length nor a chunked stream is buffered whole.
// The buffer grows with what has arrived (doubling from at most
// firstBodyBuf, never past Content-Length+1 or limit+1), and every
// allocation is charged to the body budget first; held is what the caller
// releases when done with the body.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request, limit int64) (b []byte, held int64, err error) {
	if r.ContentLength > limit {
		return nil, 0, fmt.Errorf("%w: body is %d bytes, the limit for this endpoint is %d", domain.ErrTooLarge, r.ContentLength, limit)
	}
	// +1: the read that meets EOF (or the limit) needs room.
	ceiling := limit + 1
	if r.ContentLength >= 0 {
		ceiling = r.ContentLength + 1
	}
	var deadline time.Time
	defer func() {
		if err != nil {
			s.budget.release(held)
			b, held = nil, 0
		}
	}()
	size := min(ceiling, firstBodyBuf)
	if err := s.budget.acquire(r.Context(), size, &deadline); err != nil {
		return nil, 0, err
	}
	held = size
	b = make([]byte, 0, size)
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		n, rerr := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		var mbe *http.MaxBytesError
		switch {
		case rerr == io.EOF:
			return b, held, nil
		case errors.As(rerr, &mbe):
			return nil, held, fmt.Errorf("%w: body exceeds the limit of %d bytes for this endpoint", domain.ErrTooLarge, limit)
		case rerr != nil:
			return nil, held, fmt.Errorf("%w: reading body: %v", errBadRequest, rerr)
		case len(b) < cap(b):
			continue
		}
		// Full: grow. Content-Length and MaxBytesReader end the body
		// below the ceiling, so a full buffer at the ceiling is a body
		// that did not stop where it said it would.
		grow := min(2*int64(cap(b)), ceiling)
		if grow <= int64(cap(b)) {
			return nil, held, fmt.Errorf("%w: body exceeds the limit of %d bytes for this endpoint", domain.ErrTooLarge, limit)
		}
		if err := s.budget.acquire(r.Context(), grow, &deadline); err != nil {
			return nil, held, err
		}
		nb := make([]byte, len(b), grow)
		copy(nb, b)
		s.budget.release(int64(cap(b)))
		held += grow - int64(cap(b))
		b = nb
	}
}

// firstBodyBuf is the largest buffer readBody allocates before bytes
// arrive: a claimed length costs nothing, and most bodies are smaller.
const firstBodyBuf = 64 << 10

// errBadRequest is a body that could not be read (client went away mid-body).
var errBadRequest = errors.New("bad request")
