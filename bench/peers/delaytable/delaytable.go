// Package delaytable benchmarks the design a team builds when it has
// MySQL/MariaDB and no delay queue: a delay_messages table (message_id
// unique, topic, payload, execute_time, status, retry_count, max_retry,
// an index on (status, execute_time)) and a polling dispatcher. It runs
// on the database the caller names, in a table of its own per run that
// Close drops.
//
// Sends are INSERTs (a batch is one multi-row INSERT) in autocommit; with
// :tx every send call is an explicit transaction of the application's own
// (BEGIN, INSERT, COMMIT). execute_time is DATETIME(3) in UTC: the due
// time asked for, to the millisecond.
//
// Each of the consumers polls in a transaction:
//
//	SELECT … WHERE status = 0 AND execute_time <= NOW(3)
//	ORDER BY execute_time LIMIT lease-max FOR UPDATE SKIP LOCKED
//
// (READ COMMITTED), hands the rows over, DELETEs them and commits (the
// ack). A transaction that deadlocks (MySQL error 1213) is run again, as
// the application would; Close prints how many were. A full batch
// polls again at once; a short one sleeps the poll interval (1 s, or
// poll=DURATION) first.
package delaytable

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/delayq/delayq/bench/dqtarget"
	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/store/mysqlstore"
)

// DefaultPoll is the dispatcher's poll interval unless poll= says otherwise.
const DefaultPoll = time.Second

// Conns is the pool size: 64 transactional callers plus the consumers.
const Conns = 80

// Spec is a parsed "delaytable:URL[:tx][:poll=DURATION]".
type Spec struct {
	URL  string
	Tx   bool
	Poll time.Duration
}

// Parse reads a delaytable target word; ok is false when it is not one.
func Parse(spec string) (s Spec, ok bool, err error) {
	rest, ok := strings.CutPrefix(spec, "delaytable:")
	if !ok {
		if spec == "delaytable" {
			return s, true, errors.New("want delaytable:mysql://…[:tx][:poll=DURATION]")
		}
		return s, false, nil
	}
	s.Poll = DefaultPoll
	for {
		i := strings.LastIndexByte(rest, ':')
		if i < 0 {
			break
		}
		opt := rest[i+1:]
		if opt == "tx" {
			s.Tx = true
		} else if v, isPoll := strings.CutPrefix(opt, "poll="); isPoll {
			d, err := time.ParseDuration(v)
			if err != nil || d < time.Millisecond {
				return s, true, fmt.Errorf("delaytable: bad poll %q (a duration ≥ 1ms)", opt)
			}
			s.Poll = d
		} else {
			break
		}
		rest = rest[:i]
	}
	s.URL = rest
	if _, err := mysqlstore.ParseURL(rest); err != nil {
		return s, true, fmt.Errorf("delaytable: %w", err)
	}
	return s, true, nil
}

// Name labels the target without the URL (it may hold a password).
func (s Spec) Name() string {
	n := "delaytable"
	if s.Tx {
		n += ":tx"
	}
	if s.Poll != DefaultPoll {
		n += ":poll=" + s.Poll.String()
	}
	return n
}

// Resolve maps a delaytable target word to its factory.
func Resolve(spec string) (bench.Factory, bool, error) {
	return bench.ResolveParsed(spec, Parse, Open)
}

// Target is one run's delay_messages table.
type Target struct {
	spec  Spec
	db    *sql.DB
	table string // quoted
	topic string
	run   string
	// retries counts transactions run again after a deadlock.
	retries atomic.Int64
}

// Open creates the run's table.
func Open(ctx context.Context, s Spec, o bench.OpenOptions) (*Target, error) {
	if !o.Durable {
		return nil, errors.New("delaytable is as durable as its database is configured: run with --durable (default)")
	}
	mc, err := mysqlstore.ParseURL(s.URL)
	if err != nil {
		return nil, err
	}
	// UTC on both sides: execute_time is written in UTC and NOW(3) reads it.
	mc.Loc = time.UTC
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	mc.Params["time_zone"] = "'+00:00'"
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, err
	}
	db := sql.OpenDB(conn)
	db.SetMaxOpenConns(Conns)
	db.SetMaxIdleConns(Conns)
	run := fmt.Sprintf("%xr%d", time.Now().UnixNano(), o.Run)
	t := &Target{spec: s, db: db, table: "`delay_messages_" + run + "`", topic: "bench", run: run}
	// #nosec G202 -- the table name is built here from a number
	_, err = db.ExecContext(ctx, `CREATE TABLE `+t.table+` (
		id BIGINT AUTO_INCREMENT PRIMARY KEY,
		message_id VARCHAR(64) NOT NULL,
		topic VARCHAR(128) NOT NULL,
		payload MEDIUMBLOB NOT NULL,
		execute_time DATETIME(3) NOT NULL,
		status TINYINT NOT NULL DEFAULT 0,
		retry_count INT NOT NULL DEFAULT 0,
		max_retry INT NOT NULL DEFAULT 3,
		created_at DATETIME(3) NOT NULL DEFAULT CURRENT_TIMESTAMP(3),
		UNIQUE KEY uk_message_id (message_id),
		KEY idx_status_time (status, execute_time)
	) ENGINE=InnoDB`)
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("delaytable: create table: %w", err)
	}
	return t, nil
}

// Send implements bench.Target: one (multi-row) INSERT, in autocommit or,
// with :tx, in an explicit transaction.
func (t *Target) Send(ctx context.Context, msgs []bench.Msg) error {
	var q strings.Builder
	q.WriteString("INSERT INTO " + t.table + " (message_id, topic, payload, execute_time) VALUES ")
	args := make([]any, 0, 4*len(msgs))
	now := time.Now().UTC().Truncate(time.Millisecond)
	for i, m := range msgs {
		if i > 0 {
			q.WriteString(",")
		}
		q.WriteString("(?,?,?,?)")
		at := m.DeliverAt
		if at.IsZero() {
			at = now
		}
		args = append(args, fmt.Sprintf("%s-%d", t.run, m.Seq), t.topic, m.Payload, at.UTC())
	}
	return dqtarget.RetryDeadlock(ctx, &t.retries, func() error {
		if !t.spec.Tx {
			_, err := t.db.ExecContext(ctx, q.String(), args...)
			return err
		}
		tx, err := t.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q.String(), args...); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
}

// Consume implements bench.Target: consumers poll, hand over, delete, commit.
func (t *Target) Consume(ctx context.Context, o bench.ConsumeOptions, handle func([]bench.Delivery)) error {
	n := max(o.Max, 1)
	errc := make(chan error, max(o.Consumers, 1))
	var wg sync.WaitGroup
	for range max(o.Consumers, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errc <- t.poll(ctx, n, handle)
		}()
	}
	wg.Wait()
	close(errc)
	var errs []error
	for err := range errc {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (t *Target) poll(ctx context.Context, n int, handle func([]bench.Delivery)) error {
	// #nosec G202 -- the table name is built in Open from a number
	sel := "SELECT id, payload FROM " + t.table + " WHERE status = 0 AND execute_time <= NOW(3) ORDER BY execute_time LIMIT ? FOR UPDATE SKIP LOCKED"
	for ctx.Err() == nil {
		var got int
		err := dqtarget.RetryDeadlock(ctx, &t.retries, func() (err error) {
			got, err = t.pollOnce(ctx, sel, n, handle)
			return err
		})
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return err
		}
		if got < n {
			select {
			case <-ctx.Done():
			case <-time.After(t.spec.Poll):
			}
		}
	}
	return nil
}

func (t *Target) pollOnce(ctx context.Context, sel string, n int, handle func([]bench.Delivery)) (int, error) {
	// READ COMMITTED: no gap locks, as such dispatchers usually run.
	tx, err := t.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return 0, err
	}
	defer func() { _ = tx.Rollback() }()
	rows, err := tx.QueryContext(ctx, sel, n)
	if err != nil {
		return 0, err
	}
	var ids []any
	var ds []bench.Delivery
	for rows.Next() {
		var id int64
		var p []byte
		if err := rows.Scan(&id, &p); err != nil {
			_ = rows.Close()
			return 0, err
		}
		seq, err := bench.SeqOf(p)
		if err != nil {
			_ = rows.Close()
			return 0, fmt.Errorf("row %d: %w", id, err)
		}
		ids = append(ids, id)
		ds = append(ds, bench.Delivery{Seq: seq})
	}
	if err := rows.Close(); err != nil {
		return 0, err
	}
	if len(ds) == 0 {
		return 0, tx.Commit()
	}
	now := time.Now()
	for i := range ds {
		ds[i].At = now
	}
	handle(ds)
	// #nosec G202 -- the table name is built in Open; the ids are parameters
	del := "DELETE FROM " + t.table + " WHERE id IN (?" + strings.Repeat(",?", len(ids)-1) + ")"
	if _, err := tx.ExecContext(ctx, del, ids...); err != nil {
		return 0, err
	}
	return len(ds), tx.Commit()
}

// Close drops the run's table.
func (t *Target) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if n := t.retries.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "delaytable: %d transactions hit a deadlock (MySQL error 1213) and were run again\n", n)
	}
	_, err := t.db.ExecContext(ctx, "DROP TABLE IF EXISTS "+t.table) // #nosec G202 -- the table name is built in Open from a number
	return errors.Join(err, t.db.Close())
}
