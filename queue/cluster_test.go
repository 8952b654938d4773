package queue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// startInstance starts one bookline instance in cluster mode on url.
func startInstance(t *testing.T, url, id string, logs io.Writer) *queue.Node {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: url, InstanceID: id, Partitions: 2,
		Replicas: 1, AllowLazySync: true, // not about the servers' durability
		TakeoverTimeout: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, n) })
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	return n
}

func calendarDigests(t *testing.T, n *queue.Node, cals ...string) []data.CalendarDigest {
	t.Helper()
	for _, c := range cals {
		if err := n.SyncCalendar(context.Background(), c); err != nil {
			t.Fatalf("%s: sync %s: %v", n.InstanceID(), c, err)
		}
	}
	var out []data.CalendarDigest
	for _, cd := range digestOf(t, n.Store()).Calendars {
		if slices.Contains(cals, cd.ID) {
			out = append(out, cd)
		}
	}
	return out
}

// ownerOf returns the instance the server pins partition p to, once the
// membership map has settled: an instance is Ready before it registers as
// a member, and its registration moves partitions (a test that took the
// owner before that saw the partition handed to the other instance). The
// server pins at a delivery: a partition whose owner lost its pin in a
// stall gets another message (of a calendar of its own) while it has none.
func ownerOf(t *testing.T, p int, nodes ...*queue.Node) (owner *queue.Node, others []*queue.Node) {
	t.Helper()
	waitMap(t, nodes...)
	queuetest.CheckFor(t, 20*time.Second, func() error {
		owner, others = nil, nil
		for _, n := range nodes {
			owned, err := n.OwnedPartitions(context.Background())
			if err != nil {
				return err
			}
			if slices.Contains(owned, p) {
				owner = n
			} else {
				others = append(others, n)
			}
		}
		if owner == nil {
			nudge(t, nodes[0], calendarOn(p, len(nodes[0].Parts()), "nudge"))
			return fmt.Errorf("partition %d has no owner", p)
		}
		return nil
	})
	return owner, others
}

// TestClusterStaleOwnerRepeatsIdenticalAnswers makes two instances decide
// the same commands, as a stale owner and a new one can around a takeover:
// the partition's consumer is paused, a non-owner catches up and decides
// the new commands (replying), then the owner gets them from the consumer
// and decides them again. Every requester receives two byte-identical
// replies, the two indexes agree, and the event stream holds each outcome
// once.
func TestClusterStaleOwnerRepeatsIdenticalAnswers(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	a := startInstance(t, url, "a", nil)
	b := startInstance(t, url, "b", nil)
	const cal = "stale"
	p := queue.PartitionOf(cal, 2)
	if r := submit(t, a, upsert(cal)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert: %+v", r)
	}
	owner, others := ownerOf(t, p, a, b)
	other := others[0]
	consumer := queue.ConsumerPrefix + strconv.Itoa(p)
	ctx := context.Background()
	if _, err := a.JetStream().PauseConsumer(ctx, queue.StreamName, consumer, time.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}

	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var mu sync.Mutex
	replies := map[string][][]byte{}
	sub, err := nc.Subscribe("_INBOX.stale.*", func(m *nats.Msg) {
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
	for i := 0; i < n; i++ {
		cmd := book(cal, fmt.Sprintf("s-%d", i), i%3, 2) // overlapping: some accepted, some slot_taken
		cmd.V = actor.SchemaVersion
		body, _ := json.Marshal(cmd)
		m := nats.NewMsg(queue.CommandSubject(cal))
		m.Data = body
		m.Header.Set(queue.HeaderReplyTo, fmt.Sprintf("_INBOX.stale.%d", i))
		m.Header.Set(queue.HeaderSchema, strconv.Itoa(actor.SchemaVersion))
		if _, err := js.PublishMsg(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	count := func(want int) func() error {
		return func() error {
			mu.Lock()
			defer mu.Unlock()
			for i := 0; i < n; i++ {
				if got := len(replies[fmt.Sprintf("_INBOX.stale.%d", i)]); got < want {
					return fmt.Errorf("request %d: %d replies, want %d", i, got, want)
				}
			}
			return nil
		}
	}
	// The non-owner decides them while catching up for a read.
	if err := other.SyncCalendar(ctx, cal); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 10*time.Second, count(1))
	// The owner decides them again from the consumer.
	if _, err := a.JetStream().ResumeConsumer(ctx, queue.StreamName, consumer); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, 20*time.Second, count(2))
	mu.Lock()
	accepted := 0
	for subj, rs := range replies {
		if string(rs[0]) != string(rs[1]) {
			t.Errorf("%s: the two deciders answered differently:\n%s\n%s", subj, rs[0], rs[1])
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
	if da, db := calendarDigests(t, owner, cal), calendarDigests(t, other, cal); !slices.Equal(da, db) {
		t.Fatalf("indexes differ: %v vs %v", da, db)
	}
	// One outcome event per command, though two instances decided them.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		s, err := js.Stream(ctx, queue.EventStreamName)
		if err != nil {
			return err
		}
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(queue.EventSubject(cal)))
		if err != nil {
			return err
		}
		if got := info.State.Subjects[queue.EventSubject(cal)]; got != n+1 {
			return fmt.Errorf("%d events for %d commands", got, n+1)
		}
		return nil
	})
	for _, x := range []*queue.Node{owner, other} {
		queuetest.CheckFor(t, 10*time.Second, func() error {
			return x.Store().View(func(tx *data.Tx) error {
				evs, err := tx.PendingEvents(100)
				if err == nil && len(evs) > 0 {
					err = fmt.Errorf("%s: %d events not published", x.InstanceID(), len(evs))
				}
				return err
			})
		})
	}
}

// TestClusterReadYourWritesTakeoverAndJoin: writes through one instance are
// read at once on another; when the owner stops, the other takes its
// partitions over (catching up first) and decides new commands; a new empty
// instance catches up the whole history and agrees.
func TestClusterReadYourWritesTakeoverAndJoin(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	a := startInstance(t, url, "a", nil)
	b := startInstance(t, url, "b", nil)
	cals := []string{"ryw-a", "ryw-b", "ryw-c", "ryw-d"}
	for _, c := range cals {
		submit(t, a, upsert(c))
	}
	var ids []struct{ cal, id string }
	for i := 0; i < 40; i++ {
		c := cals[i%len(cals)]
		writer, reader := a, b
		if i%2 == 1 {
			writer, reader = b, a
		}
		r := submit(t, writer, book(c, fmt.Sprintf("ryw-%d", i), i, 1))
		if r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("booking %d: %+v", i, r)
		}
		ids = append(ids, struct{ cal, id string }{c, r.Booking.ID})
		// Read-your-writes on the other instance, at once.
		if err := reader.SyncCalendar(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		if err := reader.Store().View(func(tx *data.Tx) error { _, err := tx.Booking(c, r.Booking.ID); return err }); err != nil {
			t.Fatalf("booking %d written on %s not readable on %s: %v", i, writer.InstanceID(), reader.InstanceID(), err)
		}
	}
	// Graceful stop of a: its partitions move to b at once (unpinned).
	stopNode(t, a)
	for i := 0; i < 8; i++ {
		c := cals[i%len(cals)]
		if r := submit(t, b, book(c, fmt.Sprintf("after-%d", i), 100+i, 1)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("booking after takeover: %+v", r)
		}
	}
	// b decided on both partitions, so the server pinned it to both; a
	// stall past the takeover timeout may have cost a pin, which the next
	// message gives back.
	queuetest.CheckFor(t, 20*time.Second, func() error {
		owned, err := b.OwnedPartitions(context.Background())
		if err == nil && len(owned) != 2 {
			for p := range 2 {
				if !slices.Contains(owned, p) {
					nudge(t, b, calendarOn(p, 2, "nudge"))
				}
			}
			err = fmt.Errorf("b owns %v, want both partitions", owned)
		}
		return err
	})
	// A new, empty instance joins: full catch-up, same state.
	c := startInstance(t, url, "c", nil)
	if dc, db := calendarDigests(t, c, cals...), calendarDigests(t, b, cals...); !slices.Equal(dc, db) {
		t.Fatalf("joined instance differs: %v vs %v", dc, db)
	}
	for _, x := range ids {
		if err := c.Store().View(func(tx *data.Tx) error { _, err := tx.Booking(x.cal, x.id); return err }); err != nil {
			t.Fatalf("joined instance lacks %s/%s: %v", x.cal, x.id, err)
		}
	}
}

// TestClusterCatchUpRefusesHistoryGap: an instance whose index of a
// partition is behind must not catch up across messages the stream no
// longer has (a retention limit removed them). It refuses that partition,
// naming the missing range, and keeps serving reads of the partition it
// can still catch up; the owner keeps deciding both.
func TestClusterCatchUpRefusesHistoryGap(t *testing.T) {
	t.Parallel()
	// b must stay behind on both calendars' partitions: it reads them
	// only when the test asks. So both are partitions the map of members
	// {a, b} gives to a; a's membership does not expire while the test
	// runs (a takeover timeout of 10 s: four heartbeats in a row must
	// fail, where 2 s let a loaded machine expire it); b does not follow
	// in the background.
	const parts = 4
	url := queuetest.StartServer(t)
	start := func(id string) *queue.Node {
		n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: url, InstanceID: id, Partitions: parts,
			Replicas: 1, AllowLazySync: true, // not about the servers' durability
			TakeoverTimeout: 10 * time.Second, FollowInterval: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopNode(t, n) })
		queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
		return n
	}
	var ofA []int
	for p, id := range queue.Assign(parts, []queue.Member{{ID: "a"}, {ID: "b"}}) {
		if id == "a" {
			ofA = append(ofA, p)
		}
	}
	stale, fresh := calendarOn(ofA[0], parts, "stale"), calendarOn(ofA[1], parts, "fresh")
	a := start("a")
	waitMap(t, a) // registered: a pulls only from then on
	submit(t, a, upsert(stale))
	submit(t, a, upsert(fresh)) // a is pinned to both partitions now
	b := start("b")
	if m := waitMap(t, a, b); m[ofA[0]] != "a" || m[ofA[1]] != "a" {
		t.Fatalf("map %v gives b partition %d or %d", m, ofA[0], ofA[1])
	}
	for i := 0; i < 5; i++ {
		submit(t, a, book(stale, fmt.Sprintf("s-%d", i), i, 1))
	}
	r := submit(t, a, book(fresh, "f-0", 0, 1))
	ctx := context.Background()
	if err := b.SyncCalendar(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	for i := 1; i < 3; i++ {
		submit(t, a, book(fresh, fmt.Sprintf("f-%d", i), i, 1))
	}
	first := truncateStream(t, a.JetStream(), 3)
	if first != r.Seq {
		t.Fatalf("stream starts at %d, want %d", first, r.Seq)
	}
	// b applied the stale calendar's partition up to its upsert (seq 1);
	// the stream has no message of that calendar any more.
	err := b.SyncCalendar(ctx, stale)
	if missing := fmt.Sprintf("2..%d", first-1); !errors.Is(err, queue.ErrHistoryMissing) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("read of a calendar whose messages were removed: %v", err)
	}
	// A new command of it: b must not catch up across the gap.
	submit(t, a, book(stale, "s-new", 10, 1))
	first = truncateStream(t, a.JetStream(), 3)
	err = b.SyncCalendar(ctx, stale)
	if missing := fmt.Sprintf("2..%d", first-1); !errors.Is(err, queue.ErrHistoryMissing) || !strings.Contains(err.Error(), missing) {
		t.Fatalf("catch-up across the lost seqs %s: %v", missing, err)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if err := b.Ready(); !errors.Is(err, queue.ErrHistoryMissing) {
			return fmt.Errorf("b ready: %v", err)
		}
		return nil
	})
	// The other partition still catches up on b.
	if first != r.Seq+1 {
		t.Fatalf("stream starts at %d, want %d", first, r.Seq+1)
	}
	if err := b.SyncCalendar(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if err := b.Store().View(func(tx *data.Tx) error {
		_, err := tx.Booking(fresh, actor.BookingID(fresh, "f-2"))
		return err
	}); err != nil {
		t.Fatalf("b did not catch up the partition it can: %v", err)
	}
	// The owner keeps deciding both.
	for _, c := range []string{stale, fresh} {
		if r := submit(t, a, book(c, "after-"+c, 20, 1)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("%s after the truncation: %+v", c, r)
		}
	}
}

// TestClusterHoldExpiries: three instances on a three-node cluster (R3)
// take holds with short ttls, and every hold is read on another instance
// than the one that created it, so every index holds holds of partitions
// it does not own. Every hold must end expired on every instance, with at
// most one hold.expire command stored per expiry: only the owner of a
// caught-up partition publishes them. (A non-owner's index stops where its
// last read left it; expiring from there, it would publish the same expiry
// again and again, stored again each time the dedupe window, here 2 s, has
// passed.) BOOKLINE_LONG_TESTS=1 runs 200 holds over two minutes instead
// of 120 over about ten seconds.
func TestClusterHoldExpiries(t *testing.T) {
	t.Parallel()
	span, holds := 10*time.Second, 120
	if os.Getenv("BOOKLINE_LONG_TESTS") != "" {
		span, holds = 2*time.Minute, 200
	}
	c := queuetest.StartCluster(t, 3)
	var nodes []*queue.Node
	// The default takeover timeout keeps pins where they are on a loaded
	// machine; the short dedupe window lets repeated expiries show.
	for i := 0; i < 3; i++ {
		n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), NATSURL: c.URLs(), InstanceID: fmt.Sprintf("i%d", i),
			Partitions: 4, Replicas: 3, TakeoverTimeout: 5 * time.Second, HoldExpiryInterval: 200 * time.Millisecond,
			AllowLazySync:   true, // about hold expiries, not durability
			DuplicateWindow: 2 * time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopNode(t, n) })
		queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
		nodes = append(nodes, n)
	}
	var cals []string
	for i := 0; i < 8; i++ {
		cals = append(cals, fmt.Sprintf("hx-%d", i))
		submit(t, nodes[i%3], actor.Command{Type: actor.TypeCalendarUpsert, RequestID: "cal", CalendarID: cals[i],
			Calendar: &actor.CalendarSpec{Timezone: "UTC"}})
	}
	ctx := context.Background()
	day := time.Now().Add(48 * time.Hour).Truncate(24 * time.Hour)
	type held struct{ cal, id string }
	var all []held
	pace := time.NewTicker(span / time.Duration(holds))
	defer pace.Stop()
	for i := 0; i < holds; i++ {
		<-pace.C // spread the holds, so that expiries keep coming due
		cal := cals[i%len(cals)]
		start := day.Add(time.Duration(i) * time.Hour)
		r := submit(t, nodes[i%3], actor.Command{Type: actor.TypeHoldCreate, RequestID: fmt.Sprintf("h-%d", i), CalendarID: cal,
			Booking: &actor.BookingSpec{Start: start, End: start.Add(30 * time.Minute), Customer: "c", TTLSeconds: 1 + i%3}})
		if r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("hold %d: %+v", i, r)
		}
		all = append(all, held{cal, r.Booking.ID})
		// Read on another instance: its index now has the hold.
		if err := nodes[(i+1)%3].SyncCalendar(ctx, cal); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range nodes {
		queuetest.CheckFor(t, 30*time.Second, func() error {
			for _, cal := range cals {
				if err := n.SyncCalendar(ctx, cal); err != nil {
					return err
				}
			}
			return n.Store().View(func(tx *data.Tx) error {
				for _, h := range all {
					bk, err := tx.Booking(h.cal, h.id)
					if err != nil {
						return err
					}
					if bk.Status != data.StatusExpired {
						return fmt.Errorf("%s: hold %s/%s is %s", n.InstanceID(), h.cal, h.id, bk.Status)
					}
				}
				return nil
			})
		})
	}

	// Every stored command, once: expiries counted per calendar and the
	// expiry they name.
	s, err := nodes[0].JetStream().Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Read by sequence, each read retried: on three loaded nodes a
	// request can meet a moment without a stream leader (no responders).
	expiries := map[string]int{}
	total := 0
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		var m *jetstream.RawStreamMsg
		queuetest.CheckFor(t, 20*time.Second, func() (err error) {
			m, err = s.GetMsg(ctx, seq)
			return err
		})
		var cmd actor.Command
		if err := json.Unmarshal(m.Data, &cmd); err != nil {
			t.Fatal(err)
		}
		if cmd.Type == actor.TypeHoldExpire {
			expiries[cmd.CalendarID+" "+cmd.RequestID]++
			total++
		}
	}
	for k, n := range expiries {
		if n > 1 {
			t.Errorf("%d expire commands stored for %s", n, k)
		}
	}
	t.Logf("%d holds, %d expire commands for %d expiries", holds, total, len(expiries))
	if total == 0 || total > holds {
		t.Fatalf("%d expire commands for %d holds", total, holds)
	}
}

// TestClusterRefusalIsNotStale: an instance answers a booking that the
// index refuses without logging it, in cluster mode too, but only from an
// index brought up to the calendar's last logged command: right after
// another instance cancels the booking in the way, before this index has
// applied the cancel, the slot is not refused any more.
func TestClusterRefusalIsNotStale(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	a := startInstance(t, url, "a", nil)
	b := startInstance(t, url, "b", nil)
	refused := func(n *queue.Node, req string) string {
		t.Helper()
		cmd := book("stale", req, 4, 2)
		cmd.V = actor.SchemaVersion
		_, code, err := n.Refused(context.Background(), &cmd)
		if err != nil {
			t.Fatal(err)
		}
		return code
	}
	submit(t, a, upsert("stale"))
	for round := range 5 {
		r := submit(t, a, book("stale", fmt.Sprintf("taken-%d", round), 4, 2))
		if r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("round %d: booking: %+v", round, r)
		}
		for _, n := range []*queue.Node{a, b} {
			// What the index has not applied yet is not refused (the
			// writer decides it); once it has, it is.
			if err := n.SyncCalendar(context.Background(), "stale"); err != nil {
				t.Fatal(err)
			}
			if code := refused(n, fmt.Sprintf("try-%d-%s", round, n.InstanceID())); code != actor.CodeSlotTaken {
				t.Fatalf("round %d, instance %s, the slot booked: refused %q, want %q", round, n.InstanceID(), code, actor.CodeSlotTaken)
			}
		}
		submit(t, a, actor.Command{Type: actor.TypeBookingCancel, RequestID: fmt.Sprintf("free-%d", round), CalendarID: "stale", BookingID: r.Booking.ID})
		// At once, on the other instance too: nothing stale refuses it.
		for _, n := range []*queue.Node{b, a} {
			if code := refused(n, fmt.Sprintf("again-%d-%s", round, n.InstanceID())); code != "" {
				t.Fatalf("round %d, instance %s, the slot freed: refused %q", round, n.InstanceID(), code)
			}
		}
	}
}
