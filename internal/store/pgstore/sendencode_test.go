package pgstore

import (
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/delayq/delayq/internal/store"
)

// insertParamOIDs are op_insert's parameter types in insertArgs' order.
var insertParamOIDs = []uint32{
	pgtype.Int8OID, pgtype.TextOID, pgtype.TextArrayOID, pgtype.ByteaArrayOID, pgtype.ByteaArrayOID,
	pgtype.Int8ArrayOID, pgtype.BoolArrayOID, pgtype.Int8ArrayOID, pgtype.Int4ArrayOID,
	pgtype.BoolArrayOID, pgtype.Int2ArrayOID,
}

// What encoding a batched send's parameters costs the server, without a
// database: "pgx" as pgx encodes them for every query (its builder drops
// a parameter buffer grown past 256 bytes after each query, so every
// batch regrows it append by append), "kept-buffer" the same encoding
// into a buffer kept from one batch to the next, which pgx's API does
// not offer (the difference is what encoding them ourselves and sending
// them with pgconn's ExecPrepared could save). 100 messages per batch.
func BenchmarkSendArgsEncode(b *testing.B) {
	for _, size := range []int{256, 1024} {
		msgs := make([]store.InsertMessage, 100)
		for i := range msgs {
			msgs[i] = store.InsertMessage{ID: fmt.Sprintf("01JZ3K8Q7W9V5X2M4N6P8R%04d", i), Payload: make([]byte, size), DueAt: 1_800_000_000_000, MaxAttempts: 5}
		}
		p := &store.MessageInsertManyParams{Topic: "orders", Messages: msgs}
		m := pgtype.NewMap()
		sd := &pgconn.StatementDescription{ParamOIDs: insertParamOIDs}
		args := insertArgs(nil, p)
		b.Run(fmt.Sprintf("pgx/payload=%d", size), func(b *testing.B) {
			var eqb pgx.ExtendedQueryBuilder
			b.SetBytes(int64(len(msgs) * size))
			for b.Loop() {
				if err := eqb.Build(m, sd, args); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(fmt.Sprintf("kept-buffer/payload=%d", size), func(b *testing.B) {
			var buf []byte
			b.SetBytes(int64(len(msgs) * size))
			for b.Loop() {
				buf = buf[:0]
				for i, a := range args {
					out, err := m.Encode(insertParamOIDs[i], pgtype.BinaryFormatCode, a, buf)
					if err != nil {
						b.Fatal(err)
					}
					if out != nil { // nil: NULL (p_now), and buf is not to be dropped
						buf = out
					}
				}
			}
		})
	}
}
