package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func TestAssignIsBalancedAndDeterministic(t *testing.T) {
	members := func(ids ...string) []queue.Member {
		var ms []queue.Member
		for _, id := range ids {
			ms = append(ms, queue.Member{ID: id})
		}
		return ms
	}
	for _, tc := range []struct{ parts, n int }{{8, 1}, {8, 2}, {8, 3}, {8, 4}, {8, 5}, {16, 3}, {64, 7}, {2, 3}} {
		var ids []string
		for i := range tc.n {
			ids = append(ids, fmt.Sprintf("host-%d", i))
		}
		a := queue.Assign(tc.parts, members(ids...))
		rev := slices.Clone(ids)
		slices.Reverse(rev)
		if b := queue.Assign(tc.parts, members(rev...)); !slices.Equal(a, b) {
			t.Fatalf("%d/%d: the map depends on the members' order: %v vs %v", tc.parts, tc.n, a, b)
		}
		count := map[string]int{}
		for _, id := range a {
			if !slices.Contains(ids, id) {
				t.Fatalf("%d/%d: partition assigned to %q", tc.parts, tc.n, id)
			}
			count[id]++
		}
		room := (tc.parts + tc.n - 1) / tc.n
		for id, c := range count {
			if c > room {
				t.Errorf("%d/%d: %s has %d partitions, more than %d", tc.parts, tc.n, id, c, room)
			}
		}
		if tc.parts >= tc.n && len(count) != tc.n {
			t.Errorf("%d/%d: only %d members have partitions: %v", tc.parts, tc.n, len(count), a)
		}
	}
	// A member unable to decide a partition never gets it; one that no
	// member can decide is left to everyone.
	ms := members("a", "b", "c")
	ms[0].Unable, ms[1].Unable, ms[2].Unable = []int{0, 1, 2, 3}, []int{0}, []int{0}
	got := queue.Assign(4, ms)
	if got[0] != "" {
		t.Errorf("partition no member can decide assigned to %q", got[0])
	}
	for p := 1; p < 4; p++ {
		if got[p] == "a" {
			t.Errorf("partition %d assigned to a member unable to decide it", p)
		}
	}
	// Adding a member moves a bounded share of the partitions.
	before := queue.Assign(64, members("a", "b", "c"))
	after := queue.Assign(64, members("a", "b", "c", "d"))
	moved := 0
	for p := range before {
		if before[p] != after[p] {
			moved++
		}
	}
	t.Logf("64 partitions, 3 -> 4 members: %d moved (16 must)", moved)
	if moved < 16 || moved > 40 {
		t.Errorf("%d of 64 partitions moved from 3 to 4 members", moved)
	}
}

// clusterNode starts one bookline instance on the NATS cluster (R3).
func clusterNode(t *testing.T, urls, id string, parts int, ttl time.Duration, logs io.Writer) *queue.Node {
	t.Helper()
	return clusterNodeWith(t, urls, id, parts, ttl, logs, false)
}

// clusterNodeWith is clusterNode, with event batches on or off.
func clusterNodeWith(t *testing.T, urls, id string, parts int, ttl time.Duration, logs io.Writer, eventBatches bool) *queue.Node {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: urls, InstanceID: id, Partitions: parts, EventBatches: eventBatches,
		Replicas: 3, AllowLazySync: true /* not about durability */, TakeoverTimeout: ttl, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, n) })
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	return n
}

// killNode makes n vanish as a crashed process does: its connection drops
// at once (no unpin, no leave, no acks), then what is left is closed.
func killNode(n *queue.Node) {
	stopped.Store(n, true)
	n.Conn().Close()
	_ = n.Close()
}

// calendarOn is a calendar id of partition p.
func calendarOn(p, parts int, prefix string) string {
	for i := 0; ; i++ {
		if c := prefix + strconv.Itoa(i); queue.PartitionOf(c, parts) == p {
			return c
		}
	}
}

// waitSpread waits until every node sees exactly nodes as members, the
// same map, and pulls exactly its assigned partitions; then, after one
// command per partition, until the server pins each partition to its
// assigned instance. It returns the map.
func waitSpread(t *testing.T, parts int, cals []string, nodes ...*queue.Node) []string {
	t.Helper()
	assign := waitMap(t, nodes...)
	for i, c := range cals {
		if r := submit(t, nodes[i%len(nodes)], book(c, fmt.Sprintf("spread-%d-%d", len(nodes), time.Now().UnixNano()), i, 1)); r.Outcome == "" {
			t.Fatalf("no answer for %s", c)
		}
	}
	// The server pins a pull when it delivers a message to it. An owner
	// whose pulls stalled past the takeover timeout (a loaded machine)
	// loses its pin, and nobody is pinned again before the next message:
	// such partitions get one more command, at most once a second, of a
	// calendar of their own (the tests count the commands of cals).
	var nudged time.Time
	queuetest.CheckFor(t, 30*time.Second, func() error {
		var wrong []int
		var why error
		for _, n := range nodes {
			owned, err := n.OwnedPartitions(context.Background())
			if err != nil {
				return err
			}
			var want []int
			for p, id := range assign {
				if id == n.InstanceID() {
					want = append(want, p)
					if !slices.Contains(owned, p) {
						wrong = append(wrong, p)
					}
				}
			}
			if !slices.Equal(owned, want) && why == nil {
				why = fmt.Errorf("%s is pinned %v, assigned %v", n.InstanceID(), owned, want)
			}
		}
		if len(wrong) > 0 && time.Since(nudged) > time.Second {
			nudged = time.Now()
			for _, p := range wrong {
				nudge(t, nodes[0], calendarOn(p, parts, "nudge"))
			}
		}
		return why
	})
	return assign
}

// nudge stores a command of cal without waiting for its answer.
func nudge(t *testing.T, n *queue.Node, cal string) {
	t.Helper()
	cmd := book(cal, fmt.Sprintf("nudge-%d", time.Now().UnixNano()), 0, 1)
	cmd.V = actor.SchemaVersion
	body, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(queue.CommandSubject(cal))
	m.Data = body
	m.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
	if _, err := n.JetStream().PublishMsg(context.Background(), m); err != nil {
		t.Logf("nudge %s: %v", cal, err)
	}
}

// TestClusterRebalanceSpreadsPartitions: on three NATS nodes (R3),
// instances join one by one and each takes its share once caught up; a
// graceful stop hands its share over at once, a killed instance's share
// moves after the takeover timeout. The server's pins follow the map.
func TestClusterRebalanceSpreadsPartitions(t *testing.T) {
	t.Parallel()
	const parts = 8
	ttl := 2 * time.Second
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	var cals []string
	for p := range parts {
		cals = append(cals, calendarOn(p, parts, "sp"))
	}
	a := clusterNode(t, urls, "a", parts, ttl, nil)
	for _, cal := range cals {
		submit(t, a, upsert(cal))
	}
	if m := waitSpread(t, parts, cals, a); slices.ContainsFunc(m, func(id string) bool { return id != "a" }) {
		t.Fatalf("a alone: map %v", m)
	}
	b := clusterNode(t, urls, "b", parts, ttl, nil)
	t.Logf("a, b: %v", waitSpread(t, parts, cals, a, b))
	cc := clusterNode(t, urls, "c", parts, ttl, nil)
	m := waitSpread(t, parts, cals, a, b, cc)
	t.Logf("a, b, c: %v", m)
	for _, id := range []string{"a", "b", "c"} {
		if n := countOf(m, id); n < 2 || n > 3 {
			t.Errorf("%s has %d of 8 partitions", id, n)
		}
	}

	left := time.Now()
	stopNode(t, b)
	t.Logf("b stopped: %v (map settled and pinned in %s)", waitSpread(t, parts, cals, a, cc), time.Since(left).Round(time.Millisecond))

	died := time.Now()
	killNode(cc)
	m = waitSpread(t, parts, cals, a)
	t.Logf("c killed: %v (map settled and pinned in %s, takeover timeout %s)", m, time.Since(died).Round(time.Millisecond), ttl)
	for _, cal := range cals {
		if r := submit(t, a, book(cal, "after-all", 40, 1)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("%s after the rebalancing: %+v", cal, r)
		}
	}
}

// waitMap waits until every node sees exactly nodes as members, the same
// map, and pulls exactly its assigned partitions. It returns the map.
func waitMap(t *testing.T, nodes ...*queue.Node) []string {
	t.Helper()
	var ids []string
	for _, n := range nodes {
		ids = append(ids, n.InstanceID())
	}
	slices.Sort(ids)
	var assign []string
	queuetest.CheckFor(t, 30*time.Second, func() error {
		assign = nil
		for _, n := range nodes {
			st, _, err := n.ClusterStatus(context.Background())
			if err != nil {
				return err
			}
			if !slices.Equal(st.Members, ids) {
				return fmt.Errorf("%s sees members %v, want %v", n.InstanceID(), st.Members, ids)
			}
			if assign == nil {
				assign = st.Assignment
			} else if !slices.Equal(assign, st.Assignment) {
				return fmt.Errorf("%s has map %v, others %v", n.InstanceID(), st.Assignment, assign)
			}
			if !slices.Equal(st.Consuming, st.Assigned) {
				return fmt.Errorf("%s pulls %v, assigned %v", n.InstanceID(), st.Consuming, st.Assigned)
			}
		}
		return nil
	})
	return assign
}

func countOf(m []string, id string) int {
	n := 0
	for _, x := range m {
		if x == id {
			n++
		}
	}
	return n
}

// TestClusterStaleOwnerAcrossRebalance is the stale-owner case at a
// rebalancing: the old owner decides new commands (for a read), the
// partition then moves to a joining instance, which decides the same
// commands from the consumer. Every requester receives two identical
// replies, the indexes agree and every outcome is announced once.
func TestClusterStaleOwnerAcrossRebalance(t *testing.T) {
	t.Parallel()
	const parts = 2
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	a := clusterNode(t, urls, "a", parts, 2*time.Second, nil)
	// The partition the map gives b when a and b are members.
	m := queue.Assign(parts, []queue.Member{{ID: "a"}, {ID: "b"}})
	p := slices.Index(m, "b")
	cal := calendarOn(p, parts, "moving")
	if r := submit(t, a, upsert(cal)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert: %+v", r)
	}
	ctx := context.Background()
	consumer := queue.ConsumerPrefix + strconv.Itoa(p)
	if _, err := a.JetStream().PauseConsumer(ctx, queue.StreamName, consumer, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		cons, err := a.JetStream().Consumer(ctx, queue.StreamName, consumer)
		if err == nil && !cons.CachedInfo().Paused {
			err = fmt.Errorf("consumer %s not paused yet", consumer)
		}
		return err
	})
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	replies := map[string][][]byte{}
	sub, err := nc.Subscribe("_INBOX.moving.*", func(m *nats.Msg) {
		mu.Lock()
		replies[m.Subject] = append(replies[m.Subject], m.Data)
		mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	const n = 8
	for i := range n {
		cmd := book(cal, fmt.Sprintf("m-%d", i), i%3, 2) // overlapping: bookings and conflicts
		cmd.V = actor.SchemaVersion
		body, _ := json.Marshal(cmd)
		msg := nats.NewMsg(queue.CommandSubject(cal))
		msg.Data = body
		msg.Header.Set(queue.HeaderReplyTo, fmt.Sprintf("_INBOX.moving.%d", i))
		msg.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
		queuetest.CheckFor(t, 10*time.Second, func() error { _, err := js.PublishMsg(ctx, msg); return err })
	}
	// A pull the owner had waiting when the pause was asked for may still
	// have been answered: those commands were decided once, from the
	// consumer, and acknowledged. The others are the stale-owner case.
	cons, err := a.JetStream().Consumer(ctx, queue.StreamName, consumer)
	if err != nil {
		t.Fatal(err)
	}
	info, err := cons.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	decidedOnce := int(info.AckFloor.Stream) - 1 // after the upsert
	if decidedOnce > 1 {
		t.Fatalf("%d commands decided before the pause took effect", decidedOnce)
	}
	count := func(want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				w := want
				if i < decidedOnce {
					w = 1
				}
				if got := len(replies[fmt.Sprintf("_INBOX.moving.%d", i)]); got < w {
					return fmt.Errorf("request %d: %d replies, want %d", i, got, want)
				}
			}
			return nil
		}
	}
	// The old owner decides them for a read.
	if err := a.SyncCalendar(ctx, cal); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 10*time.Second, count(1))
	// b joins and takes the partition; it decides them again.
	blogs := &queuetest.SyncBuffer{}
	b := clusterNode(t, urls, "b", parts, 2*time.Second, blogs)
	defer func() {
		if t.Failed() {
			t.Logf("b:\n%s", blogs.String())
		}
	}()
	queuetest.CheckFor(t, 20*time.Second, func() error {
		st, _, err := b.ClusterStatus(ctx)
		if err == nil && !slices.Contains(st.Consuming, p) {
			err = fmt.Errorf("b pulls %v", st.Consuming)
		}
		return err
	})
	if _, err := a.JetStream().ResumeConsumer(ctx, queue.StreamName, consumer); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 20*time.Second, count(2))
	mu.Lock()
	accepted := 0
	for subj, rs := range replies {
		for _, r := range rs[1:] {
			if string(rs[0]) != string(r) {
				t.Errorf("%s: two deciders answered differently:\n%s\n%s", subj, rs[0], r)
			}
		}
		var r actor.Reply
		if err := json.Unmarshal(rs[0], &r); err != nil {
			t.Fatal(err)
		}
		if r.Outcome == actor.OutcomeAccepted {
			accepted++
		}
	}
	mu.Unlock()
	if accepted == 0 || accepted == n {
		t.Fatalf("%d of %d accepted: want a mix of bookings and conflicts", accepted, n)
	}
	if da, db := calendarDigests(t, a, cal), calendarDigests(t, b, cal); !slices.Equal(da, db) {
		t.Fatalf("indexes differ: %v vs %v", da, db)
	}
	checkEvents(t, js, cal, n+1)
	for _, x := range []*queue.Node{a, b} {
		queuetest.CheckFor(t, 20*time.Second, func() error { return noPendingEvents(x) })
	}
}

// checkEvents waits until the event stream holds want events of cal,
// one per command, in command order, and no more.
func checkEvents(t *testing.T, js jetstream.JetStream, cal string, want int) []uint64 {
	t.Helper()
	ctx := context.Background()
	var seqs []uint64
	queuetest.CheckFor(t, 30*time.Second, func() error {
		seqs = nil
		s, err := js.Stream(ctx, queue.EventStreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(queue.EventSubject(cal)))
		if err != nil {
			return err
		}
		if got := info.State.Subjects[queue.EventSubject(cal)]; got != uint64(want) {
			return fmt.Errorf("%d events of %s, want %d", got, cal, want)
		}
		next := uint64(0)
		for range want {
			m, err := s.GetMsg(ctx, next+1, jetstream.WithGetMsgSubject(queue.EventSubject(cal)))
			if err != nil {
				return err
			}
			next = m.Sequence
			cmdSeq, err := strconv.ParseUint(m.Header.Get(queue.HeaderCommandSeq), 10, 64)
			if err != nil {
				return err
			}
			seqs = append(seqs, cmdSeq)
		}
		return nil
	})
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			t.Fatalf("events of %s out of command order: %v", cal, seqs)
		}
	}
	return seqs
}

func noPendingEvents(n *queue.Node) error {
	return n.Store().View(func(tx *data.Tx) error {
		evs, err := tx.PendingEvents(100)
		if err == nil && len(evs) > 0 {
			err = fmt.Errorf("%s: %d events still queued", n.InstanceID(), len(evs))
		}
		return err
	})
}

// TestClusterTakeoverSendsPendingEvents: the owner of a partition decides
// commands but cannot publish their outcome events, then dies. The
// instance that takes the partition over publishes them, once each, in
// command order, with the events published before the death not repeated.
func TestClusterTakeoverSendsPendingEvents(t *testing.T) {
	t.Parallel()
	const parts = 4
	ttl := 2 * time.Second
	c := queuetest.StartCluster(t, 3)
	urls := c.URLs()
	nodes := []*queue.Node{clusterNode(t, urls, "e0", parts, ttl, nil), clusterNode(t, urls, "e1", parts, ttl, nil),
		clusterNode(t, urls, "e2", parts, ttl, nil)}
	var cals []string
	for p := range parts {
		cals = append(cals, calendarOn(p, parts, "ev"))
	}
	for _, cal := range cals {
		submit(t, nodes[0], upsert(cal))
	}
	m := waitSpread(t, parts, cals, nodes...)
	p := queue.PartitionOf(cals[0], parts)
	var owner *queue.Node
	var rest []*queue.Node
	for _, n := range nodes {
		if n.InstanceID() == m[p] {
			owner = n
		} else {
			rest = append(rest, n)
		}
	}
	cal := cals[0]
	// Published and confirmed: the upsert and the spread's booking.
	nc, err := nats.Connect(urls)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	checkEvents(t, js, cal, 2)
	queue.PauseEvents(owner, true)
	var bookings []string
	const k = 12
	for i := range k {
		r := submit(t, owner, book(cal, fmt.Sprintf("pend-%d", i), 4+i%5, 2))
		if r.Outcome == actor.OutcomeAccepted {
			bookings = append(bookings, r.Booking.ID)
		}
	}
	for _, id := range bookings[:1] {
		submit(t, owner, actor.Command{Type: actor.TypeBookingCancel, RequestID: "cancel-" + id, CalendarID: cal, BookingID: id})
	}
	total := 2 + k + 1
	var pending int
	if err := owner.Store().View(func(tx *data.Tx) error {
		evs, err := tx.PendingEvents(1000)
		pending = len(evs)
		return err
	}); err != nil || pending < k+1 {
		t.Fatalf("owner has %d events queued (%v), want at least %d", pending, err, k+1)
	}
	killed := time.Now()
	killNode(owner)
	t.Logf("killed %s, owner of partition %d, with %d events unpublished", owner.InstanceID(), p, pending)
	seqs := checkEvents(t, js, cal, total)
	t.Logf("TAKEOVER EVENTS: all %d events of %s in the stream %s after the kill (takeover timeout %s); command seqs %v",
		total, cal, time.Since(killed).Round(time.Millisecond), ttl, seqs)
	// The survivors agree and keep nothing queued.
	for _, n := range rest {
		queuetest.CheckFor(t, 20*time.Second, func() error { return noPendingEvents(n) })
	}
	if d0, d1 := calendarDigests(t, rest[0], cals...), calendarDigests(t, rest[1], cals...); !slices.Equal(d0, d1) {
		t.Fatalf("survivors differ: %v vs %v", d0, d1)
	}
}

// startServerWithUser starts one JetStream server whose only user,
// bookline, may publish to allow (and subscribe to _INBOX.>).
func startServerWithUser(t *testing.T, allow []string) string {
	t.Helper()
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true,
		Users: []*server.User{{Username: "bookline", Password: "secret", Permissions: &server.Permissions{
			Publish:   &server.SubjectPermission{Allow: allow},
			Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	if !ns.ReadyForConnections(queuetest.ReadyTimeout) {
		t.Fatal("nats not ready")
	}
	u, _ := url.Parse(ns.ClientURL())
	u.User = url.UserPassword("bookline", "secret")
	return u.String()
}

// TestClusterMembershipPermissions: with the permissions docs/protocol.md
// documents, instances register and share the partitions; without the
// KV subjects (a configuration from before the members bucket) they fall
// back to pulling every partition, loudly, and keep deciding.
func TestClusterMembershipPermissions(t *testing.T) {
	t.Parallel()
	base := []string{"$JS.API.>", "$JS.ACK.BOOKLINE_CMD.>", "bookline.cmd.>", "bookline.evt.>", "bookline.evt-invalid", "_INBOX.>"}
	t.Run("documented", func(t *testing.T) {
		u := startServerWithUser(t, append(slices.Clone(base), "$KV.bookline_members.>", "$KV.bookline_progress.>"))
		a := startInstance(t, u, "a", nil)
		b := startInstance(t, u, "b", nil)
		var cals []string
		for p := range 2 {
			cals = append(cals, calendarOn(p, 2, "perm"))
			submit(t, a, upsert(cals[p]))
		}
		m := waitSpread(t, 2, cals, a, b)
		if countOf(m, "a") != 1 || countOf(m, "b") != 1 {
			t.Fatalf("map %v", m)
		}
	})
	t.Run("without KV", func(t *testing.T) {
		u := startServerWithUser(t, base)
		logs := &queuetest.SyncBuffer{}
		a := startInstance(t, u, "a", logs)
		cal := calendarOn(0, 2, "perm")
		queuetest.CheckFor(t, 20*time.Second, func() error {
			if !strings.Contains(logs.String(), "MEMBERSHIP UNAVAILABLE") {
				return fmt.Errorf("no fallback yet")
			}
			return nil
		})
		if r := submit(t, a, upsert(cal)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("upsert without members: %+v", r)
		}
	})
}
