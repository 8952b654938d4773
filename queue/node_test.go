package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	bolt "go.etcd.io/bbolt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func startNode(t *testing.T, dir string, logs io.Writer) *queue.Node {
	t.Helper()
	return startNodeWith(t, queue.NodeConfig{DataDir: dir}, logs)
}

// startNodeWith starts a node with cfg (4 partitions unless set) and waits
// until it is ready.
func startNodeWith(t *testing.T, cfg queue.NodeConfig, logs io.Writer) *queue.Node {
	t.Helper()
	if logs == nil {
		logs = io.Discard
	}
	if cfg.Partitions == 0 {
		cfg.Partitions = 4
	}
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	n, err := queue.StartNode(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopNode(t, n) })
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	return n
}

var stopped sync.Map // *queue.Node -> bool

// stopNode checks the index invariants and closes n, once.
func stopNode(t *testing.T, n *queue.Node) {
	t.Helper()
	if _, done := stopped.LoadOrStore(n, true); done {
		return
	}
	datatest.CheckInvariants(t, n.Store())
	if err := n.Close(); err != nil {
		t.Errorf("close: %v", err)
	}
}

var t0 = time.Date(2027, 5, 3, 9, 0, 0, 0, time.UTC)

// submit sends a command through the node and returns the decoded reply.
func submit(t *testing.T, n *queue.Node, cmd actor.Command) actor.Reply {
	t.Helper()
	cmd.V = cmd.MinVersion()
	if errs := cmd.Validate(); len(errs) > 0 {
		t.Fatalf("invalid test command: %v", errs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := n.Submit(ctx, &cmd, cmd.Fingerprint())
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	var r actor.Reply
	if err := json.Unmarshal(raw, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

func upsert(cal string) actor.Command {
	return actor.Command{Type: actor.TypeCalendarUpsert, RequestID: "cal-" + cal, CalendarID: cal, Calendar: &actor.CalendarSpec{Timezone: "Europe/Berlin"}}
}

func book(cal, req string, slot int, slots int) actor.Command {
	start := t0.Add(time.Duration(slot) * 15 * time.Minute)
	return actor.Command{Type: actor.TypeBookingCreate, RequestID: req, CalendarID: cal,
		Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Duration(slots) * 15 * time.Minute), Customer: "c-" + req}}
}

// workload runs a deterministic mix of commands over several calendars.
func workload(t *testing.T, n *queue.Node, prefix string, count int) (accepted, rejected int) {
	t.Helper()
	cals := []string{"a", "b", "c", "d", "e", "f"}
	for _, c := range cals {
		submit(t, n, upsert(c))
	}
	for i := 0; i < count; i++ {
		cal := cals[i%len(cals)]
		r := submit(t, n, book(cal, fmt.Sprintf("%s-%d", prefix, i), (i*7)%40, 1+i%5))
		if r.Outcome == actor.OutcomeAccepted {
			accepted++
			if i%9 == 0 {
				submit(t, n, actor.Command{Type: actor.TypeBookingCancel, RequestID: fmt.Sprintf("%s-x%d", prefix, i), CalendarID: cal, BookingID: r.Booking.ID})
			}
		} else {
			rejected++
		}
	}
	return accepted, rejected
}

func digestOf(t *testing.T, s *data.Store) data.Digest {
	t.Helper()
	var d data.Digest
	if err := s.View(func(tx *data.Tx) (err error) { d, err = tx.Digest(); return err }); err != nil {
		t.Fatal(err)
	}
	return d
}

// replayInto replays the stream into a new index and returns its digest.
// Without opt.Deciders it replays twice, the partitions decided in one
// fork and in three side by side, and requires the same records in every
// bucket.
func replayInto(t *testing.T, js jetstream.JetStream, opt queue.ReplayOptions) data.Digest {
	t.Helper()
	replay := func(opt queue.ReplayOptions) (data.Digest, string) {
		store := datatest.MustOpen(t)
		if _, err := queue.Replay(context.Background(), js, store, opt); err != nil {
			t.Fatalf("replay (%d deciders): %v", opt.Deciders, err)
		}
		var content string
		if err := store.View(func(tx *data.Tx) error { content = tx.ContentHash(); return nil }); err != nil {
			t.Fatal(err)
		}
		return digestOf(t, store), content
	}
	if opt.Deciders != 0 {
		d, _ := replay(opt)
		return d
	}
	opt.Deciders = 1
	one, oneContent := replay(opt)
	opt.Deciders = 3
	three, threeContent := replay(opt)
	if three.Total != one.Total {
		cal, _ := data.FirstDifference(one, three)
		t.Fatalf("replay in three forks differs from the replay in one, first at calendar %q", cal)
	}
	if threeContent != oneContent {
		t.Fatal("replay in three forks wrote other records than the replay in one (same digest)")
	}
	return one
}

func TestReplayEqualsLiveAndPointInTime(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	acc, rej := workload(t, n, "w1", 120)
	if acc == 0 || rej == 0 {
		t.Fatalf("workload accepted %d rejected %d: want both", acc, rej)
	}
	mid := digestOf(t, n.Store())
	var midSeq uint64
	for _, s := range mid.Applied {
		midSeq = max(midSeq, s)
	}
	workload(t, n, "w2", 80)
	live := digestOf(t, n.Store())
	if live.Total == mid.Total {
		t.Fatal("second workload changed nothing")
	}
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("replay differs from live index, first at calendar %q", cal)
	}
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{ToSeq: midSeq}); got.Total != mid.Total {
		cal, _ := data.FirstDifference(mid, got)
		t.Fatalf("--to-seq %d differs from the index at that point, first at %q", midSeq, cal)
	}
	// Replay refuses an index that already holds state.
	if _, err := queue.Replay(context.Background(), n.JetStream(), n.Store(), queue.ReplayOptions{}); err != queue.ErrIndexNotEmpty {
		t.Fatalf("replay into live index: %v", err)
	}
}

func TestOutcomeEventsForEveryDecision(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	submit(t, n, upsert("ev"))
	ok := submit(t, n, book("ev", "r1", 0, 4))
	submit(t, n, book("ev", "r2", 1, 1)) // slot_taken
	submit(t, n, actor.Command{Type: actor.TypeBookingCancel, RequestID: "r3", CalendarID: "ev", BookingID: ok.Booking.ID})
	// A poison message straight on the subject: answered and recorded as an event.
	if _, err := n.JetStream().Publish(context.Background(), queue.CommandSubject("ev"), []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	cons, err := n.JetStream().OrderedConsumer(context.Background(), queue.EventStreamName, jetstream.OrderedConsumerConfig{FilterSubjects: []string{queue.EventSubject("ev")}})
	if err != nil {
		t.Fatal(err)
	}
	var got []actor.Reply
	queuetest.CheckFor(t, 10*time.Second, func() error {
		batch, err := cons.FetchNoWait(10)
		if err != nil {
			return err
		}
		for m := range batch.Messages() {
			var r actor.Reply
			if err := json.Unmarshal(m.Data(), &r); err != nil {
				return err
			}
			got = append(got, r)
		}
		if len(got) < 5 {
			return fmt.Errorf("%d events", len(got))
		}
		return nil
	})
	want := []struct{ typ, outcome, code string }{
		{actor.TypeCalendarUpsert, "accepted", ""},
		{actor.TypeBookingCreate, "accepted", ""},
		{actor.TypeBookingCreate, "rejected", "slot_taken"},
		{actor.TypeBookingCancel, "accepted", ""},
		{"", "rejected", "invalid_command"},
	}
	for i, w := range want {
		if got[i].Type != w.typ || got[i].Outcome != w.outcome || got[i].Code != w.code {
			t.Errorf("event %d: %+v, want %+v", i, got[i], w)
		}
	}
	if got[3].Booking == nil || got[3].Booking.Status != data.StatusCancelled {
		t.Errorf("cancel event without the cancelled booking: %+v", got[3])
	}
	// The outbox drains once JetStream has the events.
	queuetest.CheckFor(t, 10*time.Second, func() error {
		return n.Store().View(func(tx *data.Tx) error {
			evs, err := tx.PendingEvents(10)
			if err == nil && len(evs) > 0 {
				err = fmt.Errorf("%d events still in the outbox", len(evs))
			}
			return err
		})
	})
}

// TestIndexAheadOfStreamIsRebuilt simulates a power loss that took the
// stream's unsynced tail while the index kept it: the stream directory is
// restored from an earlier copy under a newer index. With --sync interval
// that loss is the documented price, and the affected partitions are
// rebuilt from the stream, not served from the index. By default (--sync
// always) every answered command was synced first: a stream that lost
// them lost history, and the partitions are refused, naming the first
// lost sequence, with their indexes kept.
func TestIndexAheadOfStreamIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	workload(t, n, "before", 30)
	stopNode(t, n)
	saved := filepath.Join(t.TempDir(), "nats-copy")
	copyDir(t, queue.StoreDirFor(dir), saved)

	n = startNode(t, dir, nil)
	workload(t, n, "after", 30) // lost with the stream's tail
	firstLost := requestSeq(t, n.Store(), "a", "after-0")
	stopNode(t, n)
	if err := os.RemoveAll(queue.StoreDirFor(dir)); err != nil {
		t.Fatal(err)
	}
	copyDir(t, saved, queue.StoreDirFor(dir))

	n, e := startRefused(t, queue.NodeConfig{DataDir: dir}, nil, queue.PartitionOf("a", 4))
	if e.Seq != firstLost || !e.Exact || !e.Tail {
		t.Fatalf("refusal %+v, want the first lost message of a's partition, seq %d: %v", *e, firstLost, e)
	}
	stopNode(t, n)

	logs := &queuetest.SyncBuffer{}
	n = startNodeWith(t, queue.NodeConfig{DataDir: dir, SyncInterval: true}, logs)
	if !bytes.Contains([]byte(logs.String()), []byte("INDEX AHEAD OF STREAM")) {
		t.Fatalf("no loud rebuild message in logs:\n%s", logs.String())
	}
	live := digestOf(t, n.Store())
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("rebuilt index differs from the stream, first at %q", cal)
	}
	// Nothing from the lost tail survives, and new commands are decided
	// normally (not skipped as "already applied").
	if err := n.Store().View(func(tx *data.Tx) error {
		if _, ok, _ := tx.Request("a", "after-0"); ok {
			return fmt.Errorf("a request of the lost tail is still recorded")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	r := submit(t, n, book("a", "after-0", 100, 1))
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("new booking after rebuild: %+v", r)
	}
}

// TestIndexOfUncleanRebootIsRebuilt: with --sync interval the index is not
// fsynced per commit, so after a power loss it may be torn. A session file
// that says "open" under another kernel boot id is that case: the node must
// not read the index at all (here it is overwritten with garbage), move it
// aside and rebuild the same state from the stream.
func TestIndexOfUncleanRebootIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, SyncInterval: true}
	n := startNodeWith(t, cfg, nil)
	if n.Store().Synced() {
		t.Fatal("with --sync interval the embedded index should not fsync per commit")
	}
	accepted, _ := workload(t, n, "before", 60)
	want := digestOf(t, n.Store())
	stopNode(t, n)

	index := queue.IndexFile(dir)
	session, err := os.ReadFile(index + ".session")
	if err != nil || !bytes.Contains(session, []byte(" clean")) {
		t.Fatalf("session file after a clean stop: %q, %v", session, err)
	}
	// The power loss: the last session never closed, the machine rebooted,
	// and the unsynced file is torn.
	if err := os.WriteFile(index+".session", []byte("bookline-index-session 1 open boot-before-the-power-loss\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(index, bytes.Repeat([]byte{0xde, 0xad}, 8192), 0o600); err != nil {
		t.Fatal(err)
	}

	logs := &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !bytes.Contains([]byte(logs.String()), []byte("INDEX DISCARDED")) {
		t.Fatalf("no loud discard message in logs:\n%s", logs.String())
	}
	if _, err := os.Stat(index + ".discarded"); err != nil {
		t.Fatalf("the untrusted index was not kept aside: %v", err)
	}
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	if got := digestOf(t, n.Store()); got.Total != want.Total {
		cal, _ := data.FirstDifference(want, got)
		t.Fatalf("rebuilt index differs from the one before the power loss, first at %q", cal)
	}
	if accepted == 0 {
		t.Fatal("workload accepted nothing")
	}
	// New commands are decided normally after the rebuild.
	r := submit(t, n, book("a", "after-0", 300, 1))
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking after the rebuild: %+v", r)
	}
}

// TestIndexOfOtherLayoutIsRebuilt: an index another version laid out
// (its schema differs) is kept aside and rebuilt from the stream, loudly,
// to the same state.
func TestIndexOfOtherLayoutIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	n := startNode(t, dir, nil)
	accepted, _ := workload(t, n, "before", 40)
	want := digestOf(t, n.Store())
	stopNode(t, n)
	index := queue.IndexFile(dir)
	db, err := bolt.Open(index, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(tx *bolt.Tx) error { return tx.Bucket([]byte("meta")).Put([]byte("schema"), []byte("3")) }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	logs := &queuetest.SyncBuffer{}
	n = startNode(t, dir, logs)
	if !strings.Contains(logs.String(), "INDEX LAYOUT CHANGED") {
		t.Fatalf("no loud message in logs:\n%s", logs.String())
	}
	if _, err := os.Stat(index + ".old-schema"); err != nil {
		t.Fatalf("the old index was not kept aside: %v", err)
	}
	if got := digestOf(t, n.Store()); got.Total != want.Total || accepted == 0 {
		cal, _ := data.FirstDifference(want, got)
		t.Fatalf("rebuilt index differs, first at %q (accepted %d)", cal, accepted)
	}
}

// TestIndexOfOtherTzdataIsReported: the index records the time zone data
// releases that decided it, and a start with a build whose release is not
// the only one recorded says so loudly, with what to do; the digest carries
// the releases, so a replay by this build is told apart.
func TestIndexOfOtherTzdataIsReported(t *testing.T) {
	dir := t.TempDir()
	logs := &queuetest.SyncBuffer{}
	n := startNode(t, dir, logs)
	workload(t, n, "w", 20)
	if d := digestOf(t, n.Store()); d.Tzdata != zones.Version {
		t.Fatalf("new index records tzdata %q, want %q", d.Tzdata, zones.Version)
	}
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Tzdata != zones.Version || got.Total != digestOf(t, n.Store()).Total {
		t.Fatalf("replay: tzdata %q, total differs from live", got.Tzdata)
	}
	stopNode(t, n)
	if strings.Contains(logs.String(), "TIME ZONE DATA") {
		t.Fatalf("reported other time zone data for an index of this build:\n%s", logs)
	}

	// A build with another release decided some commands of this index.
	s, err := data.Open(queue.IndexFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(func(tx *data.Tx) error { _, err := tx.NoteTzdata("1999z"); return err }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	logs = &queuetest.SyncBuffer{}
	n = startNode(t, dir, logs)
	want := zones.Version + ",1999z," + zones.Version
	var line string
	for _, l := range strings.Split(logs.String(), "\n") {
		if strings.Contains(l, "TIME ZONE DATA") {
			line = l
		}
	}
	for _, s := range []string{"level=ERROR", want, "bookline replay"} {
		if !strings.Contains(line, s) {
			t.Fatalf("start log does not report the index's time zone data (%q missing):\n%s", s, logs)
		}
	}
	live := digestOf(t, n.Store())
	if live.Tzdata != want {
		t.Fatalf("digest tzdata %q, want %q", live.Tzdata, want)
	}
	fresh := replayInto(t, n.JetStream(), queue.ReplayOptions{})
	if cal, differs := data.FirstDifference(live, fresh); !differs || cal != "" {
		t.Fatalf("replay by this build vs the mixed index: differs %v at %q", differs, cal)
	}
}

func copyDir(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
}

// TestPartitionOfMatchesServerTransform: the Go partition function (used to
// reset a partition's calendars) agrees with the stream's subject transform.
func TestPartitionOfMatchesServerTransform(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	n.StopWriters()
	s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 64; i++ {
		cal := fmt.Sprintf("cal-%d_X", i*7919)
		ack, err := n.JetStream().Publish(context.Background(), queue.CommandSubject(cal), []byte("{}"))
		if err != nil {
			t.Fatal(err)
		}
		m, err := s.GetMsg(context.Background(), ack.Sequence)
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("bookline.part.%d.%s", queue.PartitionOf(cal, 4), cal)
		if m.Subject != want {
			t.Fatalf("stored as %s, PartitionOf says %s", m.Subject, want)
		}
	}
}

// TestSubmitWithoutStream: a command nobody stores is answered
// ErrUnavailable as soon as NATS says no stream listens (no responders),
// not when the caller's deadline runs out.
func TestSubmitWithoutStream(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	submit(t, n, upsert("c"))
	n.StopWriters()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := n.JetStream().DeleteStream(ctx, queue.StreamName); err != nil {
		t.Fatal(err)
	}
	cmd := book("c", "r1", 0, 1)
	cmd.V = actor.SchemaVersion
	_, err := n.Submit(ctx, &cmd, cmd.Fingerprint())
	if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "503") || ctx.Err() != nil {
		t.Fatalf("submit without a stream: %v (ctx %v)", err, ctx.Err())
	}
}

// TestPartitionsDefaultAndAdopted: without a configured count a new stream
// gets DefaultPartitions, and an existing stream keeps its own count (an
// index built with 8 partitions is served as it was); an explicit count
// that differs from the stream's still refuses to start.
func TestPartitionsDefaultAndAdopted(t *testing.T) {
	start := func(dir string, partitions int) (*queue.Node, error) {
		return queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: partitions, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	}
	checkTransform := func(n *queue.Node, want int) {
		t.Helper()
		s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.CachedInfo().Config.SubjectTransform.Destination; !strings.Contains(got, fmt.Sprintf("{{partition(%d,1)}}", want)) || len(n.Parts()) != want {
			t.Fatalf("%d writers, transform %q; want %d partitions", len(n.Parts()), got, want)
		}
	}

	n, err := start(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	checkTransform(n, queue.DefaultPartitions)
	stopNode(t, n)

	dir := t.TempDir()
	if n, err = start(dir, 8); err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	for c := 0; c < 16; c++ {
		submit(t, n, upsert(fmt.Sprintf("cal%d", c)))
	}
	want := digestOf(t, n.Store())
	stopNode(t, n)
	if n, err = start(dir, 0); err != nil {
		t.Fatal(err)
	}
	checkTransform(n, 8)
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	if got := digestOf(t, n.Store()); got.Total != want.Total || len(got.Applied) != len(want.Applied) {
		t.Fatalf("index changed when the stream's partition count was adopted: %v vs %v", got.Applied, want.Applied)
	}
	stopNode(t, n)
	if n, err = start(dir, 4); !errors.Is(err, queue.ErrPartitionMismatch) {
		if n != nil {
			n.Close()
		}
		t.Fatalf("explicit 4 partitions on an 8-partition stream: %v", err)
	}
}

// TestRepliesToThisProcessStayInProcess: the writer hands the reply of a
// command submitted by this process's own client to it directly; NATS
// carries only the publish acknowledgement. Everything the connection
// published before the sentinel arrives before it, so a reply sent through
// NATS would be seen.
func TestRepliesToThisProcessStayInProcess(t *testing.T) {
	n := startNode(t, t.TempDir(), nil)
	sub, err := n.Conn().SubscribeSync("_INBOX.bookline.>")
	if err != nil {
		t.Fatal(err)
	}
	if r := submit(t, n, upsert("c")); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("upsert: %+v", r)
	}
	if r := submit(t, n, book("c", "r1", 0, 2)); r.Outcome != actor.OutcomeAccepted || r.Booking == nil {
		t.Fatalf("booking: %+v", r)
	}
	const sentinel = "_INBOX.bookline.sentinel.end"
	if err := n.Conn().Publish(sentinel, nil); err != nil {
		t.Fatal(err)
	}
	acks := 0
	for {
		m, err := sub.NextMsg(10 * time.Second)
		if err != nil {
			t.Fatalf("waiting for the sentinel: %v", err)
		}
		if m.Subject == sentinel {
			break
		}
		if !strings.Contains(m.Subject, ".a.") {
			t.Errorf("a reply went through NATS: %s %s", m.Subject, m.Data)
			continue
		}
		acks++
	}
	if acks != 2 {
		t.Errorf("%d publish acknowledgements through NATS, want 2", acks)
	}
}

// TestViewAfterCloseIsUnavailable: a read that races the node's shutdown
// is unavailable (the API answers 503, retry elsewhere), not an internal
// error.
func TestViewAfterCloseIsUnavailable(t *testing.T) {
	n := startNode(t, t.TempDir(), io.Discard)
	stopNode(t, n)
	if err := n.View(func(*data.Tx) error { return nil }); !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("View after Close = %v, want ErrUnavailable", err)
	}
}

// A Close after Close (a deferred one after an explicit one) returns the
// first one's result instead of failing.
func TestNodeCloseTwice(t *testing.T) {
	n, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
	first := n.Close()
	if second := n.Close(); second != first {
		t.Fatalf("second Close: %v, first: %v", second, first)
	}
}
