package httpapi

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/delayq/delayq/internal/domain"
)

// readBody reads at most limit bytes of the request body. A larger body is
// ErrTooLarge after reading limit+1 bytes at most (http.MaxBytesReader), so
// neither a lying Content-Length nor a chunked stream is buffered whole.
// held is what the caller releases when done with the body, and the body
// goes back with putBody (handlers copy what they keep out of it).
//
// Memory grows only with bytes that arrived, whatever Content-Length
// claims: a body's first buffer is at most firstBodyBuf, and a buffer
// doubles only once full; every buffer is charged to the body budget
// first. A claim costs a client nothing to make, so a buffer sized by it
// let slow bodies (a large Content-Length, a byte a second) hold the
// budget: 4,000 of them at 64 KiB each filled the default 256 MiB, and
// every other request with a body waited 1 s for a 503. Now each holds
// at most firstBodyBuf until its bytes come.
//
// Bodies past smallBody are read into buffers of the pooled sizes
// (firstBodyBuf << k), taken from bodyPools when one is free: a batch of
// 1,000 1 KiB messages is a 1.4 MB body, whose fresh buffers, grown by
// doubling, were a quarter of the bytes a batched drain allocated.
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
			putBody(b)
			b, held = nil, 0
		}
	}()
	size := ceiling
	if ceiling > smallBody {
		size = firstBodyBuf
		b = getBody(size)
	}
	if b == nil {
		b = make([]byte, 0, size)
	}
	if err := s.budget.acquire(r.Context(), int64(cap(b)), 0, &deadline); err != nil {
		return b, 0, err
	}
	held = int64(cap(b))
	rd := http.MaxBytesReader(w, r.Body, limit)
	for {
		n, rerr := rd.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		var mbe *http.MaxBytesError
		switch {
		case rerr == io.EOF:
			return b, held, nil
		case errors.As(rerr, &mbe):
			return b, held, fmt.Errorf("%w: body exceeds the limit of %d bytes for this endpoint", domain.ErrTooLarge, limit)
		case isTimeout(rerr):
			return b, held, fmt.Errorf("%w: %d of its bytes arrived before the server's read timeout; nothing was done, send it again", errBodyTimeout, len(b))
		case rerr != nil:
			return b, held, fmt.Errorf("%w: reading body: %v", errBadRequest, rerr)
		case len(b) < cap(b):
			continue
		}
		// Full: grow. Content-Length and MaxBytesReader end the body
		// below the ceiling, so a full buffer at the ceiling is a body
		// that did not stop where it said it would.
		if int64(cap(b)) >= ceiling {
			return b, held, fmt.Errorf("%w: body exceeds the limit of %d bytes for this endpoint", domain.ErrTooLarge, limit)
		}
		grow := 2 * int64(cap(b))
		if grow > maxPooledBody {
			grow = min(grow, ceiling) // past the pooled sizes, no more than the body can need
		}
		if err := s.budget.acquire(r.Context(), grow, held, &deadline); err != nil {
			return b, held, err
		}
		nb := getBody(grow) // grow is a pooled size, or past them (nil)
		if nb == nil {
			nb = make([]byte, 0, grow)
		}
		nb = append(nb, b...)
		s.budget.release(int64(cap(b)))
		held += grow - int64(cap(b))
		putBody(b)
		b = nb
	}
}

// firstBodyBuf is the buffer a body past smallBody starts in, before its
// bytes arrive; the smallest pooled size.
const firstBodyBuf = 16 << 10

// Bodies whose ceiling is at most smallBody are read into a buffer of
// their own size (a single send, a lease, an ack); larger ones start in
// firstBodyBuf and double. Buffers of firstBodyBuf << k up to
// maxPooledBody are kept in bodyPools.
const (
	smallBody     = 16 << 10
	maxPooledBody = firstBodyBuf << (len(bodyPools) - 1)
)

// bodyPools[k] holds free body buffers of capacity firstBodyBuf << k.
var bodyPools [9]sync.Pool // 16 KiB … 4 MiB

// bodyClass returns the pool whose buffers are the smallest holding n
// bytes, or -1 when n is not positive or over maxPooledBody.
func bodyClass(n int64) int {
	if n <= 0 || n > maxPooledBody {
		return -1
	}
	k := 0
	for int64(firstBodyBuf)<<k < n {
		k++
	}
	return k
}

// getBody returns a free pooled buffer (length 0) that holds n bytes, or
// nil when there is none.
func getBody(n int64) []byte {
	k := bodyClass(n)
	if k < 0 {
		return nil
	}
	if v, ok := bodyPools[k].Get().(*[]byte); ok {
		return (*v)[:0]
	}
	return nil
}

// putBody gives b back to its pool when it has a pooled size; anything
// else is left to GC. b must no longer be used by anyone.
func putBody(b []byte) {
	k := bodyClass(int64(cap(b)))
	if k < 0 || cap(b) != firstBodyBuf<<k {
		return
	}
	b = b[:0]
	bodyPools[k].Put(&b)
}

// errBadRequest is a body that could not be read (client went away mid-body).
var errBadRequest = errors.New("bad request")

// errBodyTimeout is a body still arriving when the connection's read
// deadline (the server's ReadTimeout) passed: a slow network, not a bad
// request. It is answered 408, which clients retry (the request was not
// carried out), where a 400 told them the request itself was wrong and a
// producer could drop the message.
var errBodyTimeout = errors.New("request body timed out")

// isTimeout reports whether a body read failed on the connection's read
// deadline.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}
