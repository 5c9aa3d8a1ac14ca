package storetest

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"pgregory.net/rapid"

	"github.com/delayq/delayq/internal/store"
	"github.com/delayq/delayq/internal/store/memstore"
)

// RunModel applies random sequences of operations (inserts with colliding
// ids and random dues, promote, lease, ack, nack, extend, expire, cancel,
// reschedule, dead-letter operations, dedup purges, settings, and time
// advancing) to a store made by open and to a memstore, and fails on the
// first answer that differs: records field by field, errors by class
// (ErrClass), counts and due times through TopicGet and TopicList.
//
// Seq and Receipt values are the backend's own: they are compared through
// a bijection with memstore's (Seq must keep per-topic insert order;
// a receipt must be new for its message at each lease). LeaseExpire and
// DedupPurge are always called with a Max that takes everything eligible,
// because the contract leaves tie order between topics to the backend.
//
// Use -rapid.checks and -rapid.steps to run longer.
func RunModel(t *testing.T, open func(t *testing.T) store.Store) {
	rapid.Check(t, func(rt *rapid.T) {
		m := &model{
			t:       rt,
			sut:     open(t),
			ref:     memstore.New(),
			ctx:     context.Background(),
			now:     T0,
			seqs:    map[uint64]uint64{},
			sutSeqs: map[uint64]bool{},
			lastSeq: map[string]uint64{},
			rcpt:    map[rkey]string{},
			rcptRev: map[rkey]bool{},
			ids:     map[string][]string{},
		}
		rt.Cleanup(func() {
			_ = m.sut.Close()
			_ = m.ref.Close()
		})
		// rapid's default of about 30 steps rarely gets messages dead,
		// replayed and dead again; a few rounds do.
		actions := m.actions()
		for range 4 {
			rt.Repeat(actions)
		}
	})
}

var (
	modelTopics = []string{"a", "b", "c"}
	modelIDs    = []string{"m0", "m1", "m2", "m3"}
	modelErrors = []string{"", "timeout", "bad input"}
)

type rkey struct{ topic, id, receipt string }

type receiptPair struct {
	topic, id, ref, sut string
}

type model struct {
	t        *rapid.T
	sut, ref store.Store
	ctx      context.Context
	now      int64
	tokens   int
	fresh    int

	seqs    map[uint64]uint64 // memstore Seq -> backend Seq
	sutSeqs map[uint64]bool   // backend Seqs seen
	lastSeq map[string]uint64 // topic -> last backend Seq assigned

	receipts []receiptPair       // every receipt handed out, for stale use
	rcpt     map[rkey]string     // (topic, id, memstore receipt) -> backend receipt
	rcptRev  map[rkey]bool       // (topic, id, backend receipt) seen
	ids      map[string][]string // topic -> fresh ids used, besides modelIDs
}

func (m *model) actions() map[string]func(*rapid.T) {
	a := map[string]func(*rapid.T){
		"":            m.check,
		"insert":      m.insert,
		"get":         m.get,
		"cancel":      m.cancel,
		"reschedule":  m.reschedule,
		"promote":     m.promote,
		"lease":       m.lease,
		"ack":         m.ack,
		"ackMany":     m.ackMany,
		"nack":        m.nack,
		"extend":      m.extend,
		"expire":      m.expire,
		"deadList":    m.deadList,
		"messageList": m.messageList,
		"deadReplay":  m.deadReplay,
		"deadDelete":  m.deadDelete,
		"dedupPurge":  m.dedupPurge,
		"advance":     m.advance,
		"settingsPut": m.settingsPut,
		"topicDelete": m.topicDelete,
	}
	// Weights: Repeat picks actions uniformly, so the common path gets
	// more names.
	a["insert2"], a["insert3"] = m.insert, m.insert
	a["promote2"], a["lease2"], a["lease3"] = m.promote, m.lease, m.lease
	a["nack2"], a["nack3"], a["expire2"] = m.nack, m.nack, m.expire
	a["advance2"], a["advance3"] = m.advance, m.advance
	return a
}

// --- comparison -------------------------------------------------------

func (m *model) sameErr(what string, ref, sut error) {
	m.t.Helper()
	if ErrClass(ref) != ErrClass(sut) {
		m.t.Fatalf("%s: memstore answers %v, backend %v", what, ref, sut)
	}
}

// sameRec compares a backend record with memstore's, translating Seq and
// Receipt through the bijections.
func (m *model) sameRec(what string, ref, sut *store.Record) {
	m.t.Helper()
	if ref == nil || sut == nil {
		if ref != sut {
			m.t.Fatalf("%s: memstore %s, backend %s", what, fmtRec(ref), fmtRec(sut))
		}
		return
	}
	c := *sut
	want, ok := m.seqs[ref.Seq]
	if !ok {
		m.t.Fatalf("%s: memstore Seq %d never seen at insert", what, ref.Seq)
	}
	if c.Seq != want {
		m.t.Fatalf("%s: %s/%s has Seq %d, was %d at insert", what, sut.Topic, sut.ID, c.Seq, want)
	}
	c.Seq = ref.Seq
	switch {
	case ref.Receipt == "" && c.Receipt != "":
		m.t.Fatalf("%s: %s/%s %v has receipt %q", what, c.Topic, c.ID, c.State, c.Receipt)
	case ref.Receipt != "":
		if want := m.rcpt[rkey{ref.Topic, ref.ID, ref.Receipt}]; want != c.Receipt {
			m.t.Fatalf("%s: %s/%s receipt %q, want %q (current lease's)", what, c.Topic, c.ID, c.Receipt, want)
		}
		c.Receipt = ref.Receipt
	}
	if d := Diff(ref, &c); d != "" {
		m.t.Fatalf("%s: backend differs from memstore: %s", what, d)
	}
}

// sameRecs compares lists in order.
func (m *model) sameRecs(what string, ref, sut []*store.Record) {
	m.t.Helper()
	if len(ref) != len(sut) {
		m.t.Fatalf("%s: memstore %d records %v, backend %d %v", what, len(ref), ids(ref), len(sut), ids(sut))
	}
	for i := range ref {
		m.sameRec(fmt.Sprintf("%s[%d]", what, i), ref[i], sut[i])
	}
}

func (m *model) sameTopic(what string, ref, sut *store.TopicRecord) {
	m.t.Helper()
	if ref.Name != sut.Name || !bytes.Equal(ref.Settings, sut.Settings) || (ref.Settings == nil) != (sut.Settings == nil) ||
		ref.Counts != sut.Counts || ref.NextDue != sut.NextDue || ref.OldestReady != sut.OldestReady || ref.NextLeaseExpiry != sut.NextLeaseExpiry {
		m.t.Fatalf("%s: memstore %+v, backend %+v", what, *ref, *sut)
	}
}

// --- draws ------------------------------------------------------------

// topic draws mostly "a", so that messages meet; "c" stays unknown for
// long, to compare answers about unknown topics.
func (m *model) topic(t *rapid.T) string {
	switch n := rapid.IntRange(0, 9).Draw(t, "topic"); {
	case n < 6:
		return "a"
	case n < 9:
		return "b"
	}
	return "c"
}

// id draws a pool id (collisions are the point), or one used before.
func (m *model) id(t *rapid.T, topic string) string {
	pool := append(slices.Clone(modelIDs), m.ids[topic]...)
	return rapid.SampledFrom(pool).Draw(t, "id")
}

func (m *model) token() string {
	m.tokens++
	return fmt.Sprintf("tok%d", m.tokens)
}

// receipt draws a receipt pair: recent, stale, or bogus.
func (m *model) receipt(t *rapid.T, topic string) (id, ref, sut string) {
	var mine []receiptPair
	for _, r := range m.receipts {
		if r.topic == topic {
			mine = append(mine, r)
		}
	}
	if len(mine) == 0 || rapid.IntRange(0, 9).Draw(t, "bogus") == 0 {
		return m.id(t, topic), "bogus", "bogus"
	}
	// Small draws are likelier: count back from the newest.
	k := rapid.IntRange(0, len(mine)-1).Draw(t, "receiptAge")
	r := mine[len(mine)-1-k]
	return r.id, r.ref, r.sut
}

func (m *model) due(t *rapid.T, label string) int64 {
	return m.now + rapid.Int64Range(-10, 20).Draw(t, label)
}

// dueSpec draws a due time as senders give it: absolute (deliver_at, maybe
// in the past) or a delay the store resolves against its now.
func (m *model) dueSpec(t *rapid.T, label string) (at int64, relative bool, delay int64) {
	if rapid.Bool().Draw(t, label+"Relative") {
		return 0, true, rapid.Int64Range(0, 20).Draw(t, label+"Delay")
	}
	return m.due(t, label), false, 0
}

// --- actions ----------------------------------------------------------

func (m *model) insert(t *rapid.T) {
	topic := m.topic(t)
	n := rapid.IntRange(1, 3).Draw(t, "n")
	msgs := make([]store.InsertMessage, n)
	for i := range msgs {
		id := m.id(t, topic)
		if rapid.IntRange(0, 7).Draw(t, "freshID") == 0 {
			m.fresh++
			id = fmt.Sprintf("u%d", m.fresh)
			m.ids[topic] = append(m.ids[topic], id)
		}
		var hdr map[string]string
		switch rapid.IntRange(0, 2).Draw(t, "headers") {
		case 1:
			hdr = map[string]string{}
		case 2:
			hdr = map[string]string{"k": rapid.StringN(0, 4, -1).Draw(t, "hv")}
		}
		at, relative, delay := m.dueSpec(t, "due")
		msgs[i] = store.InsertMessage{
			ID:          id,
			Payload:     rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "payload"),
			Headers:     hdr,
			DueAt:       at,
			Relative:    relative,
			Delay:       delay,
			MaxAttempts: rapid.Int32Range(0, 3).Draw(t, "maxAttempts"),
			// Mostly the default; 255 checks the top of the range sorts.
			Priority: []uint8{0, 0, 1, 2, 255}[rapid.IntRange(0, 4).Draw(t, "priority")],
		}
	}
	p := store.MessageInsertManyParams{Topic: topic, Now: m.now, Messages: msgs}
	ref, errR := m.ref.MessageInsertMany(m.ctx, &p)
	sut, errS := m.sut.MessageInsertMany(m.ctx, &p)
	m.sameErr("insert", errR, errS)
	if errR != nil {
		return
	}
	if len(ref) != len(sut) {
		m.t.Fatalf("insert: %d results, want %d", len(sut), len(ref))
	}
	for i := range ref {
		if ref[i].Duplicate != sut[i].Duplicate {
			m.t.Fatalf("insert %s: Duplicate %v, want %v", msgs[i].ID, sut[i].Duplicate, ref[i].Duplicate)
		}
		if sut[i].Record == nil {
			m.t.Fatalf("insert %s: no record", msgs[i].ID)
		}
		if !ref[i].Duplicate {
			s := sut[i].Record.Seq
			if s <= m.lastSeq[topic] || m.sutSeqs[s] {
				m.t.Fatalf("insert %s: Seq %d not above the topic's last %d, or reused", msgs[i].ID, s, m.lastSeq[topic])
			}
			m.lastSeq[topic], m.sutSeqs[s], m.seqs[ref[i].Record.Seq] = s, true, s
		}
		m.sameRec("insert "+msgs[i].ID, ref[i].Record, sut[i].Record)
	}
}

func (m *model) get(t *rapid.T) {
	topic := m.topic(t)
	id := m.id(t, topic)
	ref, errR := m.ref.MessageGet(m.ctx, topic, id)
	sut, errS := m.sut.MessageGet(m.ctx, topic, id)
	m.sameErr("get", errR, errS)
	m.sameRec("get", ref, sut)
}

func (m *model) cancel(t *rapid.T) {
	topic := m.topic(t)
	p := store.MessageCancelParams{Topic: topic, ID: m.id(t, topic), Now: m.now}
	ref, errR := m.ref.MessageCancel(m.ctx, &p)
	sut, errS := m.sut.MessageCancel(m.ctx, &p)
	m.sameErr("cancel", errR, errS)
	m.sameRec("cancel", ref, sut)
}

func (m *model) reschedule(t *rapid.T) {
	topic := m.topic(t)
	at, relative, delay := m.dueSpec(t, "due")
	p := store.MessageRescheduleParams{Topic: topic, ID: m.id(t, topic), DueAt: at, Relative: relative, Delay: delay, Now: m.now}
	ref, errR := m.ref.MessageReschedule(m.ctx, &p)
	sut, errS := m.sut.MessageReschedule(m.ctx, &p)
	m.sameErr("reschedule", errR, errS)
	m.sameRec("reschedule", ref, sut)
}

func (m *model) promote(t *rapid.T) {
	p := store.MessagePromoteParams{Topic: m.topic(t), Now: m.now, Max: rapid.IntRange(1, 4).Draw(t, "max")}
	ref, errR := m.ref.MessagePromote(m.ctx, &p)
	sut, errS := m.sut.MessagePromote(m.ctx, &p)
	m.sameErr("promote", errR, errS)
	if errR == nil {
		// Now is the time the store judged by, 0 meaning p.Now: a store
		// with its own clock reports that clock's reading.
		ref.Now, sut.Now = cmp.Or(ref.Now, p.Now), cmp.Or(sut.Now, p.Now)
	}
	if errR == nil && *ref != *sut {
		m.t.Fatalf("promote: memstore %+v, backend %+v", *ref, *sut)
	}
}

func (m *model) lease(t *rapid.T) {
	p := store.MessageLeaseParams{
		Topic: m.topic(t), Now: m.now, Max: rapid.IntRange(1, 4).Draw(t, "max"),
		LeaseFor: rapid.Int64Range(1, 15).Draw(t, "lease"), Token: m.token(),
	}
	ref, errR := m.ref.MessageLease(m.ctx, &p)
	sut, errS := m.sut.MessageLease(m.ctx, &p)
	m.sameErr("lease", errR, errS)
	if len(ref) != len(sut) {
		m.t.Fatalf("lease: memstore %v, backend %v", ids(ref), ids(sut))
	}
	for i := range ref {
		r, s := ref[i], sut[i]
		if r.ID != s.ID {
			m.t.Fatalf("lease: memstore %v, backend %v", ids(ref), ids(sut))
		}
		if s.Receipt == "" || m.rcptRev[rkey{s.Topic, s.ID, s.Receipt}] {
			m.t.Fatalf("lease %s/%s: receipt %q empty or repeated for this message", s.Topic, s.ID, s.Receipt)
		}
		m.rcpt[rkey{r.Topic, r.ID, r.Receipt}] = s.Receipt
		m.rcptRev[rkey{s.Topic, s.ID, s.Receipt}] = true
		m.receipts = append(m.receipts, receiptPair{r.Topic, r.ID, r.Receipt, s.Receipt})
	}
	m.sameRecs("lease", ref, sut)
}

func (m *model) ack(t *rapid.T) {
	topic := m.topic(t)
	id, rr, sr := m.receipt(t, topic)
	errR := m.ref.MessageAck(m.ctx, &store.MessageAckParams{Topic: topic, ID: id, Receipt: rr, Now: m.now})
	errS := m.sut.MessageAck(m.ctx, &store.MessageAckParams{Topic: topic, ID: id, Receipt: sr, Now: m.now})
	m.sameErr("ack "+id, errR, errS)
}

func (m *model) ackMany(t *rapid.T) {
	topic := m.topic(t)
	n := rapid.IntRange(0, 4).Draw(t, "n")
	var ri, si []store.AckItem
	for range n {
		id, rr, sr := m.receipt(t, topic)
		ri = append(ri, store.AckItem{ID: id, Receipt: rr})
		si = append(si, store.AckItem{ID: id, Receipt: sr})
	}
	ref, errR := m.ref.MessageAckMany(m.ctx, &store.MessageAckManyParams{Topic: topic, Items: ri, Now: m.now})
	sut, errS := m.sut.MessageAckMany(m.ctx, &store.MessageAckManyParams{Topic: topic, Items: si, Now: m.now})
	m.sameErr("ackMany", errR, errS)
	if len(ref) != len(sut) {
		m.t.Fatalf("ackMany: %d results, want %d", len(sut), len(ref))
	}
	for i := range ref {
		m.sameErr(fmt.Sprintf("ackMany[%d] %s", i, ri[i].ID), ref[i], sut[i])
	}
}

func (m *model) nack(t *rapid.T) {
	topic := m.topic(t)
	id, rr, sr := m.receipt(t, topic)
	retry := rapid.Int64Range(-5, 15).Draw(t, "retry")
	reason := rapid.SampledFrom(modelErrors).Draw(t, "error")
	ref, errR := m.ref.MessageNack(m.ctx, &store.MessageNackParams{Topic: topic, ID: id, Receipt: rr, Now: m.now, RetryDelay: retry, Error: reason})
	sut, errS := m.sut.MessageNack(m.ctx, &store.MessageNackParams{Topic: topic, ID: id, Receipt: sr, Now: m.now, RetryDelay: retry, Error: reason})
	m.sameErr("nack "+id, errR, errS)
	m.sameRec("nack", ref, sut)
}

func (m *model) extend(t *rapid.T) {
	topic := m.topic(t)
	id, rr, sr := m.receipt(t, topic)
	lease := rapid.Int64Range(0, 15).Draw(t, "lease")
	ref, errR := m.ref.MessageExtend(m.ctx, &store.MessageExtendParams{Topic: topic, ID: id, Receipt: rr, Now: m.now, LeaseFor: lease})
	sut, errS := m.sut.MessageExtend(m.ctx, &store.MessageExtendParams{Topic: topic, ID: id, Receipt: sr, Now: m.now, LeaseFor: lease})
	m.sameErr("extend "+id, errR, errS)
	m.sameRec("extend", ref, sut)
}

func byTopicID(a, b *store.Record) int {
	if c := strings.Compare(a.Topic, b.Topic); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

func (m *model) expire(*rapid.T) {
	p := store.LeaseExpireParams{Now: m.now, Max: 1 << 20}
	ref, errR := m.ref.LeaseExpire(m.ctx, &p)
	sut, errS := m.sut.LeaseExpire(m.ctx, &p)
	m.sameErr("expire", errR, errS)
	slices.SortFunc(ref, byTopicID)
	slices.SortFunc(sut, byTopicID)
	m.sameRecs("expire", ref, sut)
}

// deadAllOf pages through a topic's dead list.
func (m *model) deadAllOf(s store.Store, name, topic string, limit int) []*store.Record {
	var all []*store.Record
	cursor := ""
	for page := 0; ; page++ {
		recs, next, err := s.DeadList(m.ctx, &store.DeadListParams{Topic: topic, Limit: limit, Cursor: cursor})
		if err != nil {
			m.t.Fatalf("%s DeadList(%s): %v", name, topic, err)
		}
		if len(recs) > limit || page > 1000 || (len(recs) == 0 && next != "") {
			m.t.Fatalf("%s DeadList(%s, limit %d): page %d of %d records, next %q", name, topic, limit, page, len(recs), next)
		}
		all = append(all, recs...)
		if next == "" {
			return all
		}
		cursor = next
	}
}

func (m *model) deadList(t *rapid.T) {
	topic := m.topic(t)
	limit := rapid.IntRange(1, 4).Draw(t, "limit")
	m.sameRecs("deadList", m.deadAllOf(m.ref, "memstore", topic, limit), m.deadAllOf(m.sut, "backend", topic, limit))
}

// listAllOf pages through MessageList.
func (m *model) listAllOf(s store.Store, name string, p store.MessageListParams) []*store.Record {
	var all []*store.Record
	for page := 0; ; page++ {
		recs, next, err := s.MessageList(m.ctx, &p)
		if err != nil {
			m.t.Fatalf("%s MessageList(%+v): %v", name, p, err)
		}
		if len(recs) > p.Limit || page > 1000 || (len(recs) == 0 && next != "") {
			m.t.Fatalf("%s MessageList(%+v): page %d of %d records, next %q", name, p, page, len(recs), next)
		}
		all = append(all, recs...)
		if next == "" {
			return all
		}
		p.Cursor = next
	}
}

func (m *model) messageList(t *rapid.T) {
	states := []store.State{store.StateScheduled, store.StateReady, store.StateInflight, store.StateDead}
	p := store.MessageListParams{
		Topic: m.topic(t), State: states[rapid.IntRange(0, 3).Draw(t, "state")],
		DueFrom: math.MinInt64, DueTo: math.MaxInt64, Limit: rapid.IntRange(1, 4).Draw(t, "limit"),
	}
	if rapid.Bool().Draw(t, "from") {
		p.DueFrom = m.due(t, "dueFrom")
	}
	if rapid.Bool().Draw(t, "to") {
		p.DueTo = m.due(t, "dueTo")
	}
	m.sameRecs("messageList", m.listAllOf(m.ref, "memstore", p), m.listAllOf(m.sut, "backend", p))
}

func (m *model) deadReplay(t *rapid.T) {
	topic := m.topic(t)
	p := store.DeadReplayParams{Topic: topic, Now: m.now}
	if rapid.Bool().Draw(t, "one") {
		p.ID = m.id(t, topic)
	} else {
		p.Max = rapid.IntRange(1, 3).Draw(t, "max")
	}
	ref, errR := m.ref.DeadReplay(m.ctx, &p)
	sut, errS := m.sut.DeadReplay(m.ctx, &p)
	m.sameErr("deadReplay", errR, errS)
	m.sameRecs("deadReplay", ref, sut)
}

func (m *model) deadDelete(t *rapid.T) {
	topic := m.topic(t)
	p := store.DeadDeleteParams{Topic: topic}
	if rapid.Bool().Draw(t, "one") {
		p.ID = m.id(t, topic)
	} else {
		p.Max = rapid.IntRange(1, 3).Draw(t, "max")
	}
	ref, errR := m.ref.DeadDelete(m.ctx, &p)
	sut, errS := m.sut.DeadDelete(m.ctx, &p)
	m.sameErr("deadDelete", errR, errS)
	if ref != sut {
		m.t.Fatalf("deadDelete: %d deleted, want %d", sut, ref)
	}
}

func (m *model) dedupPurge(t *rapid.T) {
	p := store.DedupPurgeParams{Now: m.now, Window: rapid.Int64Range(0, 15).Draw(t, "age"), Max: 1 << 20}
	ref, errR := m.ref.DedupPurge(m.ctx, &p)
	sut, errS := m.sut.DedupPurge(m.ctx, &p)
	m.sameErr("dedupPurge", errR, errS)
	if ref != sut {
		m.t.Fatalf("dedupPurge: %d purged, want %d", sut, ref)
	}
}

func (m *model) advance(t *rapid.T) {
	m.now += rapid.Int64Range(0, 10).Draw(t, "advance")
}

func (m *model) settingsPut(t *rapid.T) {
	topic := m.topic(t)
	b := rapid.SliceOfN(rapid.Byte(), 1, 6).Draw(t, "settings") // never empty: empty vs never set is not a distinction the engine makes
	m.sameErr("settingsPut", m.ref.TopicSettingsPut(m.ctx, topic, b), m.sut.TopicSettingsPut(m.ctx, topic, b))
}

func (m *model) topicDelete(t *rapid.T) {
	topic := m.topic(t)
	m.sameErr("topicDelete", m.ref.TopicDelete(m.ctx, topic), m.sut.TopicDelete(m.ctx, topic))
}

// check compares everything observable: topics and every message id used.
func (m *model) check(*rapid.T) {
	refList, errR := m.ref.TopicList(m.ctx)
	sutList, errS := m.sut.TopicList(m.ctx)
	m.sameErr("TopicList", errR, errS)
	if len(refList) != len(sutList) {
		m.t.Fatalf("TopicList: %d topics, want %d", len(sutList), len(refList))
	}
	for i := range refList {
		m.sameTopic("TopicList", refList[i], sutList[i])
	}
	for _, topic := range modelTopics {
		ref, errR := m.ref.TopicGet(m.ctx, topic)
		sut, errS := m.sut.TopicGet(m.ctx, topic)
		m.sameErr("TopicGet "+topic, errR, errS)
		if errR == nil {
			m.sameTopic("TopicGet", ref, sut)
			m.sameRecs("DeadList "+topic, m.deadAllOf(m.ref, "memstore", topic, 2), m.deadAllOf(m.sut, "backend", topic, 2))
		}
		for _, id := range append(slices.Clone(modelIDs), m.ids[topic]...) {
			ref, errR := m.ref.MessageGet(m.ctx, topic, id)
			sut, errS := m.sut.MessageGet(m.ctx, topic, id)
			m.sameErr("MessageGet "+topic+"/"+id, errR, errS)
			m.sameRec("MessageGet", ref, sut)
		}
	}
}
