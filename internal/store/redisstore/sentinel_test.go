package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/redisstore/redistest"
	"github.com/delayq/delayq/internal/store/storetest"
)

func TestParseSentinelURL(t *testing.T) {
	type want struct {
		master         string
		addrs          []string
		db             int
		user, pass     string
		sUser, sPass   string
		tls, skipCheck bool
		dialTimeout    time.Duration
	}
	good := []struct {
		url  string
		want want
	}{
		{"redis+sentinel://10.0.0.1:26379/mymaster",
			want{master: "mymaster", addrs: []string{"10.0.0.1:26379"}}},
		{"redis+sentinel://a:1,b:2,c:3/mymaster/3",
			want{master: "mymaster", addrs: []string{"a:1", "b:2", "c:3"}, db: 3}},
		{"redis+sentinel://a,[::1],[::1]:5/m/", // default port 26379
			want{master: "m", addrs: []string{"a:26379", "[::1]:26379", "[::1]:5"}}},
		{"redis+sentinel://u:p%40ss@a:1/m?sentinel_username=su&sentinel_password=sp",
			want{master: "m", addrs: []string{"a:1"}, user: "u", pass: "p@ss", sUser: "su", sPass: "sp"}},
		{"redis+sentinel://a:1/my%2Fmaster", // path segments are unescaped
			want{master: "my/master", addrs: []string{"a:1"}}},
		{"redis+sentinel://a:1/mymaster?dial_timeout=3s&addr=b:2",
			want{master: "mymaster", addrs: []string{"a:1", "b:2"}, dialTimeout: 3 * time.Second}},
		{"redis+sentinel://a:1/2?master_name=mymaster", // go-redis's form: path is only the db
			want{master: "mymaster", addrs: []string{"a:1"}, db: 2}},
		{"redis+sentinel://a:1?master_name=mymaster&db=4",
			want{master: "mymaster", addrs: []string{"a:1"}, db: 4}},
		{"rediss+sentinel://a:1/mymaster",
			want{master: "mymaster", addrs: []string{"a:1"}, tls: true}},
		{"rediss+sentinel://a:1/mymaster?skip_verify=true",
			want{master: "mymaster", addrs: []string{"a:1"}, tls: true, skipCheck: true}},
	}
	for _, tc := range good {
		t.Run(tc.url, func(t *testing.T) {
			scheme, rest, _ := strings.Cut(tc.url, "://")
			o, err := parseSentinelURL(strings.TrimSuffix(scheme, "+sentinel"), rest)
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			w := tc.want
			if o.MasterName != w.master || fmt.Sprint(o.SentinelAddrs) != fmt.Sprint(w.addrs) || o.DB != w.db ||
				o.Username != w.user || o.Password != w.pass || o.SentinelUsername != w.sUser || o.SentinelPassword != w.sPass ||
				o.DialTimeout != w.dialTimeout {
				t.Errorf("got master %q addrs %v db %d user %q/%q sentinel %q/%q dial %v; want %+v",
					o.MasterName, o.SentinelAddrs, o.DB, o.Username, o.Password, o.SentinelUsername, o.SentinelPassword, o.DialTimeout, w)
			}
			if (o.TLSConfig != nil) != w.tls {
				t.Errorf("TLS %v, want %v", o.TLSConfig != nil, w.tls)
			}
			if o.TLSConfig != nil && (o.TLSConfig.ServerName != "" || o.TLSConfig.InsecureSkipVerify != w.skipCheck) {
				t.Errorf("TLS ServerName %q InsecureSkipVerify %v", o.TLSConfig.ServerName, o.TLSConfig.InsecureSkipVerify)
			}
		})
	}

	// newClient applies the store's timeouts and no-retry rule.
	rdb, err := newClient("redis+sentinel://a:1,b:2/mymaster/1?read_timeout=5s", 700*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	c, ok := rdb.(*redis.Client) // a FailoverClient is a *redis.Client: preflight checks its master
	if !ok {
		t.Fatalf("client is %T", rdb)
	}
	o := c.Options()
	if o.DialTimeout != 700*time.Millisecond || o.ReadTimeout != 5*time.Second || o.WriteTimeout != 700*time.Millisecond ||
		o.PoolTimeout != 700*time.Millisecond || o.MaxRetries != 0 /* -1, normalised by go-redis: no retries */ || !o.ContextTimeoutEnabled || o.DB != 1 {
		t.Errorf("options: dial %v read %v write %v pool %v retries %d ctx %v db %d",
			o.DialTimeout, o.ReadTimeout, o.WriteTimeout, o.PoolTimeout, o.MaxRetries, o.ContextTimeoutEnabled, o.DB)
	}
	_ = rdb.Close()

	// want: what the error says; fault: what it says instead when the URL
	// holds a password (nothing of the URL's text then), if different.
	bad := []struct{ url, want, fault string }{
		{"redis+sentinel://a:1", "no master name", ""},
		{"redis+sentinel://a:1/", "no master name", ""},
		{"redis+sentinel://a:1/0", `no master name: "0" in the path is a db number`, "no master name or an invalid one"},
		{"redis+sentinel:///mymaster", "no Sentinel host", ""},
		{"redis+sentinel://:pw@/mymaster", "no Sentinel host", ""},
		{"redis+sentinel://a:1,,b:2/mymaster", "empty host in the Sentinel list", "an empty host in the host list"},
		{"redis+sentinel://a:99999/mymaster", `bad Sentinel address "a:99999": port "99999" is not 1-65535`, "an invalid port"},
		{"redis+sentinel://a:x/mymaster", `port "x"`, "an invalid port"},
		{"redis+sentinel://:1/mymaster", `bad Sentinel address ":1": no host`, "an invalid Sentinel address"},
		{"redis+sentinel://a:1/mymaster/x", `bad db "x"`, "an invalid database number"},
		{"redis+sentinel://a:1/mymaster/-1", `bad db "-1"`, "an invalid database number"},
		{"redis+sentinel://a:1/mymaster/1/2", "more than /MASTERNAME/db", "an invalid path"},
		{"redis+sentinel://a:1/mymaster//", "bad path", "an invalid path"},
		{"redis+sentinel://a:1/mymaster/1?db=2", "db given twice", "the database given twice"},
		{"redis+sentinel://a:1/x/1?master_name=m", "with master_name= the path is only [/db]", "an invalid path"},
		{"redis+sentinel://a:1/my%20master", `bad master name "my master"`, "an invalid one"},
		{"redis+sentinel://a:1/m?password=pw", "option username= or password= is not accepted", ""},
		{"redis+sentinel://a:1/m?username=u", "option username= is not accepted", "option username= or password= is not accepted"},
		{"redis+sentinel://a:1/m?bogus=1", "unexpected option: bogus", "an unknown option in the query"},
		{"redis+sentinel://a:1/m?addr=nope", "unable to parse addr param", "an invalid addr= host"},
		{"redis+sentinel://a:1/m#frag", "fragment", ""},
		{"redis+sentinel://a:1/m?dial_timeout=x", "dial_timeout", "an invalid option value in the query"},
		{"redis+sentinl://a:1/m", `scheme "redis+sentinl" not supported (want redis, rediss, redis+cluster, rediss+cluster, redis+sentinel or rediss+sentinel)`, ""},
		{"a:1/m", "has no scheme", ""},
	}
	for _, tc := range bad {
		// Each URL as given, then with passwords that errors must hide.
		for i, url := range []string{tc.url, withSecrets(tc.url)} {
			rdb, err := newClient(url, time.Second)
			if err == nil {
				_ = rdb.Close()
				t.Errorf("%s: no error", url)
				continue
			}
			want := tc.want
			if i == 1 && tc.fault != "" {
				want = tc.fault
			}
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s:\n got %v\nwant %q", url, err, want)
			}
			if strings.Contains(err.Error(), "hunter") {
				t.Errorf("%s: error shows a password: %v", url, err)
			}
		}
	}
}

// withSecrets adds a master password (unless the URL has userinfo or no
// scheme) and a Sentinel password (unless it has a fragment).
func withSecrets(url string) string {
	if head, _, _ := strings.Cut(url, "?"); strings.Contains(url, "://") && !strings.Contains(head, "@") {
		url = strings.Replace(url, "://", "://u:hunter2@", 1)
	}
	if strings.Contains(url, "#") {
		return url
	}
	if strings.Contains(url, "?") {
		return url + "&sentinel_password=hunter3"
	}
	return url + "?sentinel_password=hunter3"
}

func TestRedactURL(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"redis://:hunter2@127.0.0.1:1/0", "redis://:xxxxx@127.0.0.1:1/0"},
		{"redis://u:hunter2@h:1/0?dial_timeout=1s", "redis://u:xxxxx@h:1/0?dial_timeout=1s"},
		{"redis://u@h:1/0", "redis://u@h:1/0"},
		{"redis://h:1/0", "redis://h:1/0"},
		{"redis+cluster://u:hunter2@a:1,b:2", "redis+cluster://u:xxxxx@a:1,b:2"},
		{"redis+sentinel://u:hunter2@a:1,[::1]:2/m/0?sentinel_password=hunter3&pool_size=3",
			"redis+sentinel://u:xxxxx@a:1,[::1]:2/m/0?sentinel_password=xxxxx&pool_size=3"},
		{"redis://h:1/0?password=hunter2", "redis://h:1/0?password=xxxxx"},
		{"redis://u:hun/ter2@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://u:hun%zzter2@h:1/0", "redis://u:xxxxx@h:1/0"},
		{"redis://h:1/0?%zz=hunter2", "redis://h:1/0?%zz=xxxxx"},
		{"u:hunter2@h:1", "u:xxxxx@h:1"},
	} {
		if got := redactURL(tc.in); got != tc.want {
			t.Errorf("redactURL(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// openSentinel opens a store through the Sentinels with a fresh prefix.
func openSentinel(t *testing.T, url string, prefix string, ts TimeSource) *Store {
	t.Helper()
	s, err := Open(context.Background(), Options{URL: url, Prefix: prefix, TimeSource: ts})
	if err != nil {
		t.Fatalf("Open %s: %v", redactURL(url), err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// TestSentinelFailover opens a store by redis+sentinel URL, acks a
// message, kills the master -9 and wants the same Store to send and
// lease again once the Sentinels promote the replica, with the acked
// (and replicated) message still acked.
func TestSentinelFailover(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sn := redistest.StartSentinel(t, "dqmaster")

	// Preflight runs through the failover client: an evicting master is refused.
	plain := redis.NewClient(&redis.Options{Addr: sn.Master.Addr()})
	defer plain.Close()
	if err := plain.ConfigSet(ctx, "maxmemory-policy", "allkeys-lru").Err(); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(ctx, Options{URL: sn.URL()}); err == nil || !strings.Contains(err.Error(), `maxmemory-policy "allkeys-lru"`) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open with an evicting master: %v, want a maxmemory-policy refusal", err)
	} else if want := "the Sentinel master " + sn.Master.Addr(); !strings.Contains(err.Error(), want) {
		t.Errorf("refusal %q does not name %q", err, want)
	}
	if err := plain.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	// A master name the Sentinels do not monitor is named as such.
	bogus := strings.Replace(sn.URL(), "/dqmaster/", "/nosuch/", 1)
	if s, err := Open(ctx, Options{URL: bogus}); err == nil || !errors.Is(err, store.ErrUnavailable) ||
		!strings.Contains(err.Error(), `no Sentinel knows a master named "nosuch"`) {
		if s != nil {
			_ = s.Close()
		}
		t.Fatalf("Open with an unknown master name: %v", err)
	}

	s := openSentinel(t, sn.URL(), "sf", TimeRedis)
	const topic = "orders"
	past := func() int64 { return time.Now().UnixMilli() - 1000 }
	insert := func(id string) (store.InsertResult, error) {
		res, err := s.MessageInsertMany(ctx, &store.MessageInsertManyParams{Topic: topic, Now: time.Now().UnixMilli(),
			Messages: []store.InsertMessage{{ID: id, Payload: []byte(id), DueAt: past(), MaxAttempts: 5}}})
		if err != nil {
			return store.InsertResult{}, err
		}
		return res[0], nil
	}
	lease := func(max int) ([]*store.Record, error) {
		return s.MessageLease(ctx, &store.MessageLeaseParams{Topic: topic, Now: time.Now().UnixMilli(), Max: max,
			LeaseFor: 60_000, Token: fmt.Sprintf("tok%d", time.Now().UnixNano())})
	}
	if _, err := insert("acked-before"); err != nil {
		t.Fatal(err)
	}
	recs, err := lease(10)
	if err != nil || len(recs) != 1 || recs[0].ID != "acked-before" {
		t.Fatalf("lease: %v %v", recs, err)
	}
	if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: "acked-before", Receipt: recs[0].Receipt, Now: time.Now().UnixMilli()}); err != nil {
		t.Fatal(err)
	}
	if _, err := insert("pending-before"); err != nil {
		t.Fatal(err)
	}
	// Make the replica's copy certain before the kill: replication is
	// asynchronous (see "Durability"). WAIT on this connection would not
	// do: it waits only for this client's own writes, and the store wrote
	// through its own connections; so wait until the replica has applied
	// the master's whole replication stream.
	waitReplicated(t, plain, sn.Replica.Addr())

	old, err := sn.MasterAddr()
	if err != nil || old != sn.Master.Addr() {
		t.Fatalf("master before failover: %q %v, want %s", old, err, sn.Master.Addr())
	}
	killed := time.Now()
	sn.Master.Kill()

	// While no master answers, calls fail with ErrUnavailable, not hang.
	if _, err := insert("during"); err != nil && !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("insert during failover: %v, want ErrUnavailable", err)
	}

	const bound = 30 * time.Second
	newAddr := sn.WaitFailover(old, bound)
	promoted := time.Since(killed)
	if newAddr != sn.Replica.Addr() {
		t.Fatalf("new master %s, want the replica %s", newAddr, sn.Replica.Addr())
	}
	var lastErr error
	for {
		if _, lastErr = insert("after"); lastErr == nil {
			break
		}
		if !errors.Is(lastErr, store.ErrUnavailable) {
			t.Fatalf("insert after failover: %v", lastErr)
		}
		if time.Since(killed) > bound {
			t.Fatalf("the Store did not send again within %v of the kill: %v", bound, lastErr)
		}
		time.Sleep(100 * time.Millisecond)
	}
	served := time.Since(killed)
	t.Logf("failover: Sentinels promoted %s %v after the kill; the same Store sent again after %v", newAddr, promoted.Round(time.Millisecond), served.Round(time.Millisecond))

	rec, err := s.MessageGet(ctx, topic, "acked-before")
	if err != nil || rec.State != store.StateAcked {
		t.Fatalf("acked-before after failover: %+v %v, want acked", rec, err)
	}
	if r, err := insert("acked-before"); err != nil || !r.Duplicate {
		t.Fatalf("resend of acked-before after failover: %+v %v, want a duplicate", r, err)
	}
	recs, err = lease(10)
	if err != nil {
		t.Fatalf("lease after failover: %v", err)
	}
	got := map[string]bool{}
	for _, r := range recs {
		got[r.ID] = true
		if err := s.MessageAck(ctx, &store.MessageAckParams{Topic: topic, ID: r.ID, Receipt: r.Receipt, Now: time.Now().UnixMilli()}); err != nil {
			t.Fatalf("ack %s after failover: %v", r.ID, err)
		}
	}
	if !got["pending-before"] || !got["after"] || got["acked-before"] {
		t.Fatalf("leased after failover: %v, want pending-before and after", got)
	}
}

// TestConformanceSentinel runs the store conformance suite through
// Sentinels (no failover).
func TestConformanceSentinel(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a master, a replica and three Sentinels")
	}
	sn := redistest.StartSentinel(t, "dqconf")
	var n atomic.Int64
	storetest.Run(t, func(t *testing.T) store.Store {
		return openSentinel(t, sn.URL(), fmt.Sprintf("c%d", n.Add(1)), TimeCaller)
	})
}

// waitReplicated waits until the replica at addr has applied everything
// the master (reached by master) has written so far.
func waitReplicated(t *testing.T, master *redis.Client, addr string) {
	t.Helper()
	offset := func(c *redis.Client, field string) int64 {
		info, err := c.Info(context.Background(), "replication").Result()
		if err != nil {
			t.Fatalf("INFO replication: %v", err)
		}
		n, _ := strconv.ParseInt(parseInfo(info)[field], 10, 64)
		return n
	}
	want := offset(master, "master_repl_offset")
	replica := redis.NewClient(&redis.Options{Addr: addr})
	defer replica.Close()
	deadline := time.Now().Add(10 * time.Second)
	for offset(replica, "slave_repl_offset") < want {
		if time.Now().After(deadline) {
			t.Fatalf("replica %s did not reach the master's replication offset %d within 10 s", addr, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
