package dqtarget

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/delayq/delayq/internal/bench"
	"github.com/delayq/delayq/internal/store/mysqlstore"
	"github.com/delayq/delayq/internal/store/pgstore"
)

// TxConns is the connection pool size of the :tx targets' direct
// database connections: enough for 64 callers each holding a transaction.
const TxConns = 64

// sqlServeSpec is a parsed "serve-postgres:URL[:tx]" or "serve-mysql:URL[:tx]".
type sqlServeSpec struct {
	engine string // "postgres" or "mysql"
	url    string
	// tx: Send runs in the application's own transaction straight on the
	// database (pgtx / mysqltx: delayq_send, on PostgreSQL
	// delayq_send_many for a batch; <prefix>send, <prefix>send_many for a
	// batch), one transaction per
	// Send call; consumers still lease over HTTP.
	tx bool
}

func parseSQLServe(spec string) (sqlServeSpec, bool, error) {
	var s sqlServeSpec
	var rest string
	switch {
	case strings.HasPrefix(spec, "serve-postgres:"):
		s.engine, rest = "postgres", strings.TrimPrefix(spec, "serve-postgres:")
	case strings.HasPrefix(spec, "serve-mysql:"):
		s.engine, rest = "mysql", strings.TrimPrefix(spec, "serve-mysql:")
	case spec == "serve-postgres", spec == "serve-mysql":
		return s, true, fmt.Errorf("want %s:URL[:tx], not %q", spec, spec)
	default:
		return s, false, nil
	}
	rest, s.tx = strings.CutSuffix(rest, ":tx")
	s.url = rest
	switch s.engine {
	case "postgres":
		if _, err := pgxpool.ParseConfig(rest); err != nil || !strings.Contains(rest, "://") {
			return s, true, fmt.Errorf("serve-postgres: want a postgres:// URL, not %q", pgstore.RedactURL(rest))
		}
	case "mysql":
		if _, err := mysqlstore.ParseURL(rest); err != nil {
			return s, true, fmt.Errorf("serve-mysql: %w", err)
		}
	}
	return s, true, nil
}

func (s sqlServeSpec) name() string {
	n := "serve-" + s.engine
	if s.tx {
		n += ":tx"
	}
	return n
}

// runNamespace is a schema name (PostgreSQL) or table prefix (MySQL) no
// earlier run used, so runs never see each other's messages.
func runNamespace(o bench.OpenOptions) string {
	return fmt.Sprintf("bench%sr%d", strings.ToLower(fmt.Sprintf("%x", time.Now().UnixNano())), o.Run)
}

// openSQLServe starts `delayq serve --postgres|--mysql` on the given
// database in a fresh schema or table prefix, dropped again by Close.
func openSQLServe(ctx context.Context, s sqlServeSpec, o bench.OpenOptions) (bench.Target, error) {
	if !o.Durable {
		return nil, errors.New("the SQL engines are as durable as their database is configured: run with --durable (default)")
	}
	bin, err := findDelayq("")
	if err != nil {
		return nil, err
	}
	addr, err := FreePort()
	if err != nil {
		return nil, err
	}
	ns := runNamespace(o)
	t := &serveTarget{bin: bin, addr: addr}
	st := &sqlServeTarget{serveTarget: t}
	t.Topic = topicName(o)
	var drop func(context.Context) error
	var send func(context.Context, []bench.Msg) error
	var closeConn func()
	switch s.engine {
	case "postgres":
		t.engineArgs, t.engineName = []string{"--postgres", s.url, "--postgres-schema", ns}, "PostgreSQL"
		pc, err := pgxpool.ParseConfig(s.url)
		if err != nil {
			return nil, err
		}
		pc.MaxConns = TxConns
		pool, err := pgxpool.NewWithConfig(ctx, pc)
		if err != nil {
			return nil, err
		}
		closeConn = pool.Close
		drop = func(ctx context.Context) error {
			_, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{ns}.Sanitize()+" CASCADE") // #nosec G202 -- a quoted identifier built here from a number
			return err
		}
		send = func(ctx context.Context, msgs []bench.Msg) error { return pgTxSend(ctx, pool, ns, t.Topic, msgs) }
	case "mysql":
		ns += "_"
		t.engineArgs, t.engineName = []string{"--mysql", s.url, "--mysql-prefix", ns}, "MySQL/MariaDB"
		mc, err := mysqlstore.ParseURL(s.url)
		if err != nil {
			return nil, err
		}
		conn, err := mysql.NewConnector(mc)
		if err != nil {
			return nil, err
		}
		db := sql.OpenDB(conn)
		db.SetMaxOpenConns(TxConns)
		db.SetMaxIdleConns(TxConns)
		closeConn = func() { _ = db.Close() }
		drop = func(ctx context.Context) error { return dropMySQLPrefix(ctx, db, ns) }
		send = func(ctx context.Context, msgs []bench.Msg) error {
			return RetryDeadlock(ctx, &st.retries, func() error { return myTxSend(ctx, db, ns, t.Topic, msgs) })
		}
	}
	if _, err := t.start(ctx); err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_ = drop(dctx)
		cancel()
		closeConn()
		return nil, err
	}
	c, err := httpClient("http://" + addr)
	if err != nil {
		_ = t.Close()
		closeConn()
		return nil, err
	}
	t.setQueue(c)
	st.drop, st.closeConn = drop, closeConn
	if s.tx {
		st.txSend = send
	}
	return st, nil
}

// sqlServeTarget is delayq serve on a SQL database; with txSend set, sends
// go through the application-transaction path instead of HTTP.
type sqlServeTarget struct {
	*serveTarget
	txSend    func(context.Context, []bench.Msg) error
	drop      func(context.Context) error
	closeConn func()
	closed    atomic.Bool
	retries   atomic.Int64
}

// Send implements bench.Target: one transaction per call (:tx), else HTTP.
func (t *sqlServeTarget) Send(ctx context.Context, msgs []bench.Msg) error {
	if t.txSend != nil {
		return t.txSend(ctx, msgs)
	}
	return t.serveTarget.Send(ctx, msgs)
}

// Close stops the server, then drops the run's schema or tables.
func (t *sqlServeTarget) Close() error {
	if t.closed.Swap(true) {
		return nil
	}
	err := t.serveTarget.Close()
	if n := t.retries.Load(); n > 0 {
		fmt.Fprintf(os.Stderr, "%s: %d transactions hit a deadlock (MySQL error 1213) and were run again\n", t.engineName, n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = errors.Join(err, t.drop(ctx))
	t.closeConn()
	return err
}

// pgTxSend sends msgs in one transaction of the application's own,
// through pgtx — Send (delayq_send) for one message, SendMany
// (delayq_send_many, one call) for a batch — and records the due time it
// answered.
func pgTxSend(ctx context.Context, pool *pgxpool.Pool, schema, topic string, msgs []bench.Msg) error {
	tms := make([]pgstore.TxMessage, len(msgs))
	for i, m := range msgs {
		tms[i] = pgstore.TxMessage{Payload: m.Payload, DeliverAt: m.DeliverAt}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	send := pgstore.SendTx
	if len(tms) > 1 {
		send = pgstore.SendManyTx
	}
	res, err := send(ctx, tx, schema, topic, tms...)
	if err != nil {
		_ = tx.Rollback(ctx)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	for i := range msgs {
		msgs[i].DeliverAt = res[i].DueAt
	}
	return nil
}

// myTxSend sends msgs in one transaction through mysqltx — Send
// (<prefix>send) for one message, SendMany (<prefix>send_many, one call)
// for a batch. The
// procedure takes a delay, not a time, so the due time the database
// answered replaces the requested one: lateness is measured from it.
func myTxSend(ctx context.Context, db *sql.DB, prefix, topic string, msgs []bench.Msg) error {
	now := time.Now()
	tms := make([]mysqlstore.TxMessage, len(msgs))
	for i, m := range msgs {
		tms[i] = mysqlstore.TxMessage{Payload: m.Payload}
		if !m.DeliverAt.IsZero() {
			tms[i].Delay = max(m.DeliverAt.Sub(now), 0)
		}
	}
	// READ COMMITTED, as delayq's own sessions run (docs/mysql.md): at
	// MariaDB's default REPEATABLE READ concurrent sends to one topic
	// deadlock on the message table's gap locks.
	tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return err
	}
	send := mysqlstore.SendTx
	if len(tms) > 1 {
		send = mysqlstore.SendManyTx
	}
	res, err := send(ctx, tx, prefix, topic, tms...)
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	if err := tx.Commit(); err != nil {
		return err
	}
	for i := range msgs {
		msgs[i].DeliverAt = res[i].DueAt
	}
	return nil
}

// RetryDeadlock runs fn again, up to 20 times, while it fails with MySQL's
// deadlock error 1213 ("try restarting transaction"), as an application
// must; every retry is counted in n.
func RetryDeadlock(ctx context.Context, n *atomic.Int64, fn func() error) error {
	for i := 0; ; i++ {
		err := fn()
		var me *mysql.MySQLError
		if err == nil || i == 20 || ctx.Err() != nil || !errors.As(err, &me) || me.Number != 1213 {
			return err
		}
		n.Add(1)
	}
}

// dropMySQLPrefix drops the tables and routines whose names start with prefix.
func dropMySQLPrefix(ctx context.Context, db *sql.DB, prefix string) error {
	// One connection: FOREIGN_KEY_CHECKS is a session setting.
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := conn.ExecContext(ctx, "SET FOREIGN_KEY_CHECKS = 0"); err != nil {
		return err
	}
	var errs []error
	for _, q := range []struct{ list, drop string }{
		{"SELECT routine_name, routine_type FROM information_schema.routines WHERE routine_schema = DATABASE()", "DROP %s IF EXISTS `%s`"},
		{"SELECT table_name, 'TABLE' FROM information_schema.tables WHERE table_schema = DATABASE()", "DROP %s IF EXISTS `%s`"},
	} {
		rows, err := conn.QueryContext(ctx, q.list)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var names, kinds []string
		for rows.Next() {
			var n, k string
			if err := rows.Scan(&n, &k); err != nil {
				errs = append(errs, err)
				break
			}
			if strings.HasPrefix(n, prefix) {
				names, kinds = append(names, n), append(kinds, k)
			}
		}
		errs = append(errs, rows.Close())
		for i, n := range names {
			// #nosec G201 -- names read from information_schema that start with the run's own prefix (checked [a-z0-9_])
			if _, err := conn.ExecContext(ctx, fmt.Sprintf(q.drop, kinds[i], n)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
