package pgstore

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/delayq/delayq/internal/store"
)

// argBuffers keeps the buffers recsEncoded encodes parameters into, from
// one batch to the next.
var argBuffers = sync.Pool{New: func() any { return new([]byte) }}

// maxKeptArgBuffer bounds what argBuffers keeps: a batch of large
// payloads uses a buffer once and drops it.
const maxKeptArgBuffer = 4 << 20

// recsEncoded is recs for a query whose parameters are large (a batch's
// payloads): it encodes them into a buffer kept between calls and runs
// the query's prepared statement with them. pgx's own Query drops its
// parameter buffer after each query once it grew past 256 bytes, so each
// batch regrew it append by append: 100 payloads of 1 KiB took 0.22–0.25
// ms to encode that way and 0.03–0.04 ms into a kept buffer
// (BenchmarkSendArgsEncode), ≈ 2 µs per message. A pool whose
// connections do not cache prepared statements (an Options.Pool set up
// for PgBouncer) takes pgx's ordinary path.
func (s *Store) recsEncoded(ctx context.Context, op, sql string, args []any) ([]int32, []*store.Record, error) {
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return s.readRecs(op, nil, err)
	}
	defer conn.Release()
	c := conn.Conn()
	if c.Config().DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		rows, err := c.Query(ctx, sql, args...)
		return s.readRecs(op, rows, err)
	}
	sd, err := c.Prepare(ctx, sql, sql) // cached on the connection after the first
	if err != nil {
		return s.readRecs(op, nil, err)
	}
	if len(sd.ParamOIDs) != len(args) {
		return s.readRecs(op, nil, errors.New("pgstore: prepared statement takes a different number of parameters"))
	}
	bp := argBuffers.Get().(*[]byte)
	defer func() {
		if cap(*bp) <= maxKeptArgBuffer {
			argBuffers.Put(bp)
		}
	}()
	m := c.TypeMap()
	buf := (*bp)[:0]
	if buf == nil {
		// Encode answers nil for NULL, and appending an empty string to
		// a nil buffer is nil too: the buffer must exist for the two to
		// be told apart.
		buf = make([]byte, 0, 4096)
	}
	values := make([][]byte, len(args))
	formats := make([]int16, len(args))
	for i, a := range args {
		start := len(buf)
		out, err := m.Encode(sd.ParamOIDs[i], pgtype.BinaryFormatCode, a, buf)
		if err != nil {
			return s.readRecs(op, nil, err)
		}
		formats[i] = pgtype.BinaryFormatCode
		if out == nil { // NULL
			continue
		}
		// A slice of the buffer as it is now: if a later parameter makes
		// it grow, this one still points at its bytes in the old array.
		buf = out
		values[i] = buf[start:len(buf):len(buf)]
	}
	*bp = buf
	results := make([]int16, len(sd.Fields))
	for i, f := range sd.Fields {
		results[i] = m.FormatCodeForOID(f.DataTypeOID)
	}
	rows := pgx.RowsFromResultReader(m, c.PgConn().ExecPrepared(ctx, sd.Name, values, formats, results))
	sts, recs, err := s.readRecs(op, rows, nil)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			// The statement may be what failed (the schema changed under
			// it): prepared again by the next call. Best effort.
			dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
			_ = c.Deallocate(dctx, sql)
			cancel()
		}
	}
	return sts, recs, err
}
