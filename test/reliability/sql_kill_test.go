package reliability

import (
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/delayq/delayq/internal/store/mysqlstore/mysqltest"
	"github.com/delayq/delayq/internal/store/pgstore/pgtest"
	"github.com/delayq/delayq/test/internal/history"
)

// sqlEngine is a SQL database delayq runs on, as the S30/S31 scenarios
// need it: a throw-away server of its own (pgtest, mysqltest: temporary
// directory, free port, skipped when not installed), the flags of
// `delayq serve` that reach it, and an abrupt stop that keeps its data.
type sqlEngine struct {
	name  string // postgres, mysql
	store string // the store package, which /readyz names as the cause
	crash string // how the database is stopped abruptly
	start func(t *testing.T) *sqlDB
}

type sqlDB struct {
	serveArgs []string
	crash     func(t *testing.T) // returns once the database is gone
	restart   func(t *testing.T) // same port and data; returns once it answers
}

// Both harnesses run their servers durable against a process crash, not
// a machine crash: pgtest with fsync=off (a commit is write(2) to the
// WAL, which a killed process does not undo), MariaDB with
// innodb_flush_log_at_trx_commit=2 (the redo log written at every
// commit, flushed once a second). A power loss is not simulated.
var sqlEngines = []sqlEngine{
	{name: "postgres", store: "pgstore", crash: "pg_ctl stop -m immediate", start: func(t *testing.T) *sqlDB {
		srv := pgtest.Start(t)
		return &sqlDB{
			serveArgs: []string{"--postgres", srv.URL()},
			crash: func(t *testing.T) {
				if err := srv.StopImmediate(); err != nil {
					t.Fatal(err)
				}
			},
			restart: func(t *testing.T) { srv.Restart(t) },
		}
	}},
	{name: "mysql", store: "mysqlstore", crash: "kill -9 mariadbd", start: func(t *testing.T) *sqlDB {
		srv := mysqltest.Start(t, "--innodb-flush-log-at-trx-commit=2")
		return &sqlDB{
			serveArgs: []string{"--mysql", srv.URL()},
			crash:     func(*testing.T) { srv.Kill() },
			restart:   func(t *testing.T) { srv.Restart(t) },
		}
	}},
}

// sqlOutageJSON is one database kill of S30.
type sqlOutageJSON struct {
	KillAtMS     float64 `json:"kill_at_ms"`
	CrashMS      float64 `json:"crash_ms"`             // the stop command, until the database is gone
	HeldDownMS   float64 `json:"held_down_ms"`         // gone until the restart begins
	RestartMS    float64 `json:"restart_ms"`           // restart begun until the database answers (crash recovery)
	ReadyzMS     float64 `json:"readyz_200_after_ms"`  // database answers until /readyz is 200 on every server
	FirstLeaseMS float64 `json:"first_lease_after_ms"` // database answers until a lease is answered ok
	// CameDue is, for the messages that came due while the database was
	// down, the time from its return to their first delivery; FirstCameDue
	// is the earliest of them; EarlierDone is when every message due
	// before the outage had been handed out (0: by the return); FirstNewer
	// is the first delivery of a message due after the return (-1: none).
	CameDue        latencyJSON    `json:"came_due_delivered_after_return"`
	FirstCameDueMS float64        `json:"first_came_due_delivered_after_return_ms"`
	EarlierDoneMS  float64        `json:"due_before_delivered_after_return_ms"`
	FirstNewerMS   float64        `json:"first_due_after_delivered_after_return_ms"`
	ProbeSends     int            `json:"probe_sends_while_down"` // invoked while it was gone
	ProbeStatus    map[string]int `json:"probe_status_while_down"`
	ProbeAnswer    latencyJSON    `json:"probe_answer_time_while_down"`
	ReadyzStatus   map[string]int `json:"readyz_status_while_down"`
	ReadyzBody     string         `json:"readyz_body_while_down,omitempty"`

	goneAt, restartAt, backAt time.Duration
}

type s30Results struct {
	killLoopResults
	Crash   string          `json:"crash"`
	Outages []sqlOutageJSON `json:"outages"`
}

// TestSQLDatabaseKill (S30): the database under two `delayq serve`
// processes is stopped abruptly under load — PostgreSQL with `pg_ctl
// stop -m immediate`, MariaDB with kill -9 of mariadbd — and restarted on
// its data directory, kills times; every second kill keeps it down a few
// seconds first. Producers retry each id until it is answered ok,
// consumers lease and ack round robin over both servers, and a probe
// sends and reads /readyz every 50/200 ms. Pass: lost 0, unexpected 0,
// early 0 (by the database's stamps and by the client's clock),
// resurrected 0 (no delivery after an ok ack), duplicates within the
// acks that ended info or 409 (a PostgreSQL lease commits without waiting
// for its WAL flush, so a kill may undo one already answered: its ack
// then answers 409); while it is gone every probe send
// answers (none hangs), and 503 while it is still gone; /readyz answers
// non-200 naming the store; after the restart /readyz is 200 on both
// servers again without restarting them.
func TestSQLDatabaseKill(t *testing.T) {
	for _, e := range sqlEngines {
		t.Run(e.name, func(t *testing.T) { runSQLDatabaseKill(t, e) })
	}
}

func runSQLDatabaseKill(t *testing.T, e sqlEngine) {
	db := e.start(t)
	hold := pick(3*time.Second, 5*time.Second)
	kills := pick(2, 10)
	var pr *prober
	var outages []*sqlOutageJSON
	hc := &http.Client{Timeout: 5 * time.Second}
	defer hc.CloseIdleConnections()
	run := runStoreKillLoop(t, "S30 "+e.name+" database killed", storeKillLoop{
		topic: "s30", kills: kills, messages: pick(2000, 20_000), gap: pick(4*time.Second, 8*time.Second),
		// Half the kills are held down: the sends span the gaps and holds.
		sendSpan:  time.Duration(kills) * (pick(4*time.Second, 8*time.Second) + time.Second + hold/2) / 2,
		serveArgs: db.serveArgs, servers: 2,
		started: func(procs []*proc, rec *history.Recorder) {
			var bases []string
			for _, p := range procs {
				bases = append(bases, p.url())
			}
			pr = startProber(t, rec, bases, nil)
		},
		strike: func(i int, _ *lockedRand, rec *history.Recorder, procs []*proc) time.Duration {
			o := &sqlOutageJSON{KillAtMS: ms(rec.Now())}
			killAt := rec.Now()
			db.crash(t)
			o.goneAt = rec.Now()
			if i%2 == 1 {
				sleepCtx(t.Context(), hold)
			}
			o.restartAt = rec.Now()
			db.restart(t)
			o.backAt = rec.Now()
			o.CrashMS, o.HeldDownMS, o.RestartMS = ms(o.goneAt-killAt), ms(o.restartAt-o.goneAt), ms(o.backAt-o.restartAt)
			d, ok := waitUntil(30*time.Second, func() bool {
				for _, p := range procs {
					if !readyz200(hc, p.url()) {
						return false
					}
				}
				return true
			})
			if !ok {
				t.Fatalf("kill %d: /readyz not 200 on every server %v after the database returned", i+1, d)
			}
			o.ReadyzMS = ms(d)
			outages = append(outages, o)
			t.Logf("%s: gone after %v, held down %v, answering %v after the restart began, /readyz 200 %v later",
				e.crash, o.goneAt-killAt, o.restartAt-o.goneAt, o.backAt-o.restartAt, d.Round(time.Millisecond))
			return o.backAt
		},
		// No grace for the backlog (downGrace 0): how fast it drains is
		// capacity, measured and reported per outage.
	})
	pr.stop()
	sends, readyz := pr.ops()
	ops := run.l.rec.Ops()

	var heldProbes, heldReadyz int
	for _, o := range outages {
		// While down: invoked after the database was gone and before its
		// restart began.
		o.ProbeStatus, o.ReadyzStatus = map[string]int{}, map[string]int{}
		var answer []time.Duration
		for _, op := range sends {
			if op.at < o.goneAt || op.at >= o.restartAt {
				continue
			}
			o.ProbeSends++
			o.ProbeStatus[strconv.Itoa(op.status)]++
			answer = append(answer, op.lat)
			switch {
			case op.status == 0:
				t.Errorf("a probe send invoked while the database was down had no answer (%v: client timeout 10 s)", op.lat)
			case op.at+op.lat < o.restartAt && op.status != http.StatusServiceUnavailable:
				t.Errorf("a probe send answered %d while the database was down, want 503", op.status)
			case op.status != http.StatusServiceUnavailable && op.status != http.StatusOK:
				t.Errorf("a probe send invoked while the database was down answered %d after it returned", op.status)
			}
		}
		o.ProbeAnswer = quantiles(answer)
		for _, op := range readyz {
			if op.at < o.goneAt || op.at+op.lat >= o.restartAt {
				continue
			}
			o.ReadyzStatus[strconv.Itoa(op.status)]++
			if o.ReadyzBody == "" {
				o.ReadyzBody = op.body
			}
			if op.status == http.StatusOK || !strings.Contains(op.body, e.store) {
				t.Errorf("/readyz while the database was down: %d %q, want non-200 naming %s", op.status, op.body, e.store)
			}
		}
		if o.HeldDownMS > 1000 {
			heldProbes += o.ProbeSends
			heldReadyz += len(o.ReadyzStatus)
		}
		// Restart to first lease: the first lease answered ok after the
		// database answered again.
		o.FirstLeaseMS = -1
		for _, op := range ops {
			if op.Kind == history.Lease && op.Outcome == history.OK && op.Complete >= o.backAt && (o.FirstLeaseMS < 0 || ms(op.Complete-o.backAt) < o.FirstLeaseMS) {
				o.FirstLeaseMS = ms(op.Complete - o.backAt)
			}
		}
		after, earlier, newer := deliveredAfter(run.l.rec, history.Window{From: ms2d(o.KillAtMS), To: o.backAt})
		o.CameDue, o.EarlierDoneMS, o.FirstNewerMS = quantiles(after), ms(max(earlier, 0)), -1
		if newer != math.MaxInt64 {
			o.FirstNewerMS = ms(newer)
		}
		if len(after) > 0 {
			// Not judged: how soon the backlog comes out is capacity (rows
			// moved one at a time on MariaDB, on a shared machine), and a
			// stalled promotion shows here as what was due before the
			// outage, or came due in it, handed out long after what came
			// due later. The stall this scenario found is held by
			// mysqlstore's TestBacklogMovesInParts.
			o.FirstCameDueMS = ms(slices.Min(after))
		}
		t.Logf("outage at %.0f ms: %d probe sends while down %v, answered %+v; /readyz %v %q; /readyz 200 after %.0f ms, first lease after %.0f ms; what was due before handed out %.0f ms after the return, the first due after it %.0f ms; came due while down delivered after the return: first %.0f ms, %+v",
			o.KillAtMS, o.ProbeSends, o.ProbeStatus, o.ProbeAnswer, o.ReadyzStatus, o.ReadyzBody, o.ReadyzMS, o.FirstLeaseMS, o.EarlierDoneMS, o.FirstNewerMS, o.FirstCameDueMS, o.CameDue)
	}
	out := s30Results{killLoopResults: run.out, Crash: e.crash}
	for _, o := range outages {
		out.Outages = append(out.Outages, *o)
	}
	writeResults(t, "S30-"+e.name+"-database-kill", out)

	if !run.res.Valid() {
		t.Errorf("guarantees violated: %v", run.res)
	}
	if kills > 1 && (heldProbes == 0 || heldReadyz == 0) {
		t.Errorf("no probe (%d sends, %d /readyz) fell inside an outage held down %v: nothing judged", heldProbes, heldReadyz, hold)
	}
}

// readyz200 reports whether base's /readyz answers 200.
func readyz200(hc *http.Client, base string) bool {
	res, err := hc.Get(base + "/readyz")
	if err != nil {
		return false
	}
	_, _ = io.Copy(io.Discard, res.Body)
	res.Body.Close()
	return res.StatusCode == http.StatusOK
}

type s31Results struct {
	killLoopResults
	Killed []int `json:"killed_server"` // index of the server killed each time
}

// TestSQLServerKill9 (S31): two `delayq serve` processes on one SQL
// database; one of them, at random, is killed -9 under load and
// restarted, kills times, while the other keeps serving (the clients
// spread every request over both, as a load balancer without health
// checks would). Pass: lost 0, unexpected 0, early 0, resurrected 0,
// duplicates within the acks that ended info or 409: the database holds
// every send, lease and ack a killed server had answered.
func TestSQLServerKill9(t *testing.T) {
	for _, e := range sqlEngines {
		t.Run(e.name, func(t *testing.T) {
			db := e.start(t)
			var killed []int
			run := runStoreKillLoop(t, "S31 delayq kill -9 on "+e.name, storeKillLoop{
				topic: "s31", kills: pick(2, 10), messages: pick(2000, 20_000), gap: pick(4*time.Second, 8*time.Second),
				serveArgs: db.serveArgs, servers: 2,
				strike: func(i int, krng *lockedRand, _ *history.Recorder, procs []*proc) time.Duration {
					v := krng.IntN(len(procs))
					procs[v].kill9()
					if _, err := procs[v].tryStart(30 * time.Second); err != nil {
						t.Fatalf("restart server %d after kill %d: %v", v, i+1, err)
					}
					killed = append(killed, v)
					return 0 // the other server kept serving
				},
			})
			writeResults(t, "S31-"+e.name+"-server-kill9", s31Results{killLoopResults: run.out, Killed: killed})
			if !run.res.Valid() {
				t.Errorf("guarantees violated: %v", run.res)
			}
		})
	}
}

func ms2d(v float64) time.Duration { return time.Duration(v * float64(time.Millisecond)) }

// deliveredAfter returns, for each message that came due inside w, how
// long after w.To it was first received, and when (after w.To) the last
// of the messages due before w.From was first received. Due times are the
// deliver_at the ok sends answered (the database's clock, which is this
// machine's) on rec's clock: a retried send's own invoke would place them
// late.
func deliveredAfter(rec *history.Recorder, w history.Window) (cameDue []time.Duration, earlierDone, firstNewer time.Duration) {
	start := rec.Wall(0)
	due := map[string]time.Duration{}
	first := map[string]time.Duration{}
	for _, op := range rec.Ops() {
		switch {
		case op.Kind == history.Send && op.Outcome == history.OK && !op.DueAt.IsZero():
			due[op.ID] = op.DueAt.Sub(start)
		case op.Kind == history.Lease && op.Outcome == history.OK:
			if f, ok := first[op.ID]; !ok || op.Complete < f {
				first[op.ID] = op.Complete
			}
		}
	}
	earlierDone, firstNewer = math.MinInt64, math.MaxInt64
	for id, d := range due {
		f, ok := first[id]
		switch {
		case !ok:
		case d >= w.From && d <= w.To:
			cameDue = append(cameDue, f-w.To)
		case d < w.From:
			earlierDone = max(earlierDone, f-w.To)
		default:
			firstNewer = min(firstNewer, f-w.To)
		}
	}
	return cameDue, earlierDone, firstNewer
}
