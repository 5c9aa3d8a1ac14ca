package pgstore

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// The queue tables churn: each message's row is inserted at one end of
// their order and deleted at the other, and every lease (and every read
// of a topic's next due time or lease expiry) scans from the head, past
// the dead index entries the deletes left there, until a vacuum removes
// them. Autovacuum visits a table at most once per autovacuum_naptime, a
// cluster-wide setting (1 min by default): at 1,000 messages/s a minute
// of churn puts up to 60,000 dead entries in front of every lease, which
// then reads hundreds of index pages instead of a handful. So a server's
// store vacuums the queue tables itself once one passes the threshold its
// autovacuum settings name (queueVacuumDead dead tuples plus 1 % of the
// live ones), at most every queueVacuumGap: the scans stay within a few
// seconds' churn of a fresh table's cost whatever the naptime. Without truncation (schema 17) and with
// SKIP_LOCKED, such a vacuum takes no lock that a send, lease or ack
// waits for, and skips a table another vacuum (autovacuum's, another
// server's) is on.
const (
	// queueVacuumEvery is how often a busy server reads the queue tables'
	// dead tuple counts (the statistics lag by up to a second anyway).
	queueVacuumEvery = 250 * time.Millisecond
	// queueVacuumAfter is how long after the store's last call it keeps
	// looking: the statistics of the last writes arrive up to a second
	// after them.
	queueVacuumAfter = 3 * time.Second
	// queueVacuumDead is the dead tuples a queue table may gather before
	// it is vacuumed (plus 1 % of its live tuples, as its autovacuum
	// scale factor): a few dozen index pages at most.
	queueVacuumDead = 1000
	// queueVacuumGap is the least time between two vacuums of a table by
	// one store. Each vacuum updates the table's statistics in pg_class,
	// which makes every session plan again the statements that read the
	// table (1.5 – 2 ms for a lease's after each), and in a drain the
	// leases take 100 messages a call, so the dead entries cost each
	// message little: vacuumed at most once a second, drains ran up to
	// 10 % slower (more database CPU per message) than with autovacuum
	// alone; at most every 3 s, as fast, while a paced lease still read
	// 54 buffers a call instead of 118.
	queueVacuumGap = 3 * time.Second
	// queueVacuumRetry is the pause after a failed step (the database
	// down, a vacuum cancelled), before a new connection tries again.
	queueVacuumRetry = 5 * time.Second
	// queueVacuumFor bounds one VACUUM: a queue table holding millions of
	// messages takes seconds, longer than a call's bound.
	queueVacuumFor = 10 * time.Minute
)

// queueTables are the tables the store vacuums itself.
var queueTables = []string{"q_scheduled", "q_ready", "q_inflight"}

// queueVacuum is the vacuuming of one subscribed store: a connection of
// its own (a VACUUM cannot run in a transaction, and may run longer than
// the pool's statement_timeout), opened when first needed.
type queueVacuum struct {
	s      *Store
	conn   *pgx.Conn
	calls  int64     // s.calls when last looked at
	busyAt time.Time // when calls last changed
	// unremovable is, per table, the dead tuples its last vacuum here
	// left: the threshold counts the dead tuples above it.
	unremovable map[string]int64
	vacuumedAt  map[string]time.Time // when this store last vacuumed each table
	off         bool                 // the role may not vacuum the tables
}

func newQueueVacuum(s *Store) *queueVacuum {
	return &queueVacuum{s: s, unremovable: map[string]int64{}, vacuumedAt: map[string]time.Time{}}
}

// vacuumQueues vacuums the queue tables as they need it, every
// queueVacuumEvery while the store is busy, until ctx ends.
func (s *Store) vacuumQueues(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	v := newQueueVacuum(s)
	defer v.close()
	tick := time.NewTicker(queueVacuumEvery)
	defer tick.Stop()
	for !v.off {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if err := v.step(ctx); err != nil && ctx.Err() == nil {
			s.log.Debug("pgstore: vacuum queue tables", "err", err)
			v.close() // a new connection at the next step
			select {
			case <-ctx.Done():
				return
			case <-time.After(queueVacuumRetry):
			}
		}
	}
}

// step vacuums the queue tables past their threshold, if the store made
// calls within queueVacuumAfter: an idle server leaves the database
// alone (the busy one that made the churn vacuums it).
func (v *queueVacuum) step(ctx context.Context) error {
	now := time.Now()
	if n := v.s.calls.Load(); n != v.calls {
		v.calls, v.busyAt = n, now
	} else if now.Sub(v.busyAt) > queueVacuumAfter {
		return nil
	}
	if v.conn == nil {
		if err := v.connect(ctx); err != nil || v.off {
			return err
		}
	}
	dead, live, err := v.deadTuples(ctx)
	if err != nil {
		return err
	}
	var tables []string
	for t, d := range dead {
		if d-v.unremovable[t] >= queueVacuumDead+live[t]/100 && now.Sub(v.vacuumedAt[t]) >= queueVacuumGap {
			tables = append(tables, t)
		}
	}
	if len(tables) == 0 {
		return nil
	}
	slices.Sort(tables)
	sql := "VACUUM (SKIP_LOCKED, TRUNCATE false, INDEX_CLEANUP ON) "
	for i, t := range tables {
		if i > 0 {
			sql += ", "
		}
		sql += v.s.fn(t)
	}
	cctx, cancel := context.WithTimeout(ctx, queueVacuumFor)
	_, err = v.conn.Exec(cctx, sql, pgx.QueryExecModeSimpleProtocol)
	cancel()
	if err != nil {
		return err
	}
	// What the vacuum left (the dead tuples a transaction still sees, or
	// a table it skipped) is not counted again: while a long transaction
	// holds them, vacuuming once per threshold's worth of new churn, not
	// at every step.
	if dead, _, err = v.deadTuples(ctx); err != nil {
		return err
	}
	for _, t := range tables {
		v.unremovable[t], v.vacuumedAt[t] = dead[t], now
	}
	return nil
}

// deadTuples reads the queue tables' dead and live tuple counts.
func (v *queueVacuum) deadTuples(ctx context.Context) (dead, live map[string]int64, err error) {
	ctx, cancel := context.WithTimeout(ctx, v.s.timeout)
	defer cancel()
	rows, err := v.conn.Query(ctx, "SELECT relname, n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = ANY($2)",
		v.s.schema, queueTables)
	if err != nil {
		return nil, nil, err
	}
	dead, live = map[string]int64{}, map[string]int64{}
	var t string
	var d, l int64
	_, err = pgx.ForEachRow(rows, []any{&t, &d, &l}, func() error {
		dead[t], live[t] = d, l
		return nil
	})
	return dead, live, err
}

// connect opens the vacuum's connection and checks that its role may
// vacuum the queue tables (owns them, or is a superuser); if not it says
// so once and the tables are left to autovacuum.
func (v *queueVacuum) connect(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, v.s.timeout)
	defer cancel()
	conn, err := v.s.connectOwn(cctx, map[string]string{
		"statement_timeout": "0", // each statement's ctx bounds it
		"application_name":  v.s.connCfg.RuntimeParams["application_name"] + " vacuum",
	})
	if err != nil {
		return err
	}
	var may bool
	if err := conn.QueryRow(cctx, `SELECT coalesce(bool_and(pg_has_role(c.relowner, 'USAGE')), false)
	    FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
	   WHERE n.nspname = $1 AND c.relname = ANY($2)`, v.s.schema, queueTables).Scan(&may); err != nil {
		_ = conn.Close(context.Background())
		return err
	}
	if !may {
		_ = conn.Close(context.Background())
		v.off = true
		v.s.log.Info("pgstore: the queue tables are left to autovacuum: this role does not own them", "schema", v.s.schema)
		return nil
	}
	v.conn = conn
	return nil
}

func (v *queueVacuum) close() {
	if v.conn != nil {
		_ = v.conn.Close(context.Background())
		v.conn = nil
	}
}
