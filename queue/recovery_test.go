package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// withStream runs fn against the embedded stream store of a stopped
// bookline's data directory.
func withStream(t *testing.T, dir string, fn func(js jetstream.JetStream)) {
	t.Helper()
	ns, err := queue.StartEmbedded(queue.EmbeddedConfig{StoreDir: queue.StoreDirFor(dir)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	nc, err := queue.ConnectEmbedded(ns, "test")
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	fn(js)
}

// publishCommand stores cmd in the command stream and returns its sequence.
func publishCommand(t *testing.T, js jetstream.JetStream, cmd actor.Command) uint64 {
	t.Helper()
	cmd.V = actor.SchemaVersion
	body, err := json.Marshal(cmd)
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(queue.CommandSubject(cmd.CalendarID))
	m.Data = body
	ack, err := js.PublishMsg(context.Background(), m)
	if err != nil {
		t.Fatal(err)
	}
	return ack.Sequence
}

// TestRefilledTailIsRebuilt simulates a power loss that took the stream's
// unsynced tail while the index kept what it had applied from it, after
// which new commands refilled the stream up to the index's applied
// sequence before bookline started. The message at the applied sequence
// then belongs to the right partition but is another message: the index
// must not be trusted (the new commands would be skipped as "already
// applied" and never decided). With --sync interval the partition is
// rebuilt from the stream; by default, where every answered command was
// synced, it is refused, naming the first refilled sequence.
func TestRefilledTailIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1, SyncInterval: true} // one partition: every message is "its"
	n := startNodeWith(t, cfg, nil)
	workload(t, n, "before", 20)
	stopNode(t, n)
	saved := filepath.Join(t.TempDir(), "nats-copy")
	copyDir(t, queue.StoreDirFor(dir), saved)

	// A restart on the intact stream finds the message it applied last.
	logs := &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if bytes.Contains([]byte(logs.String()), []byte("INDEX AHEAD OF STREAM")) {
		t.Fatalf("index reset on an intact stream:\n%s", logs.String())
	}
	workload(t, n, "after", 20) // lost with the stream's tail
	applied := digestOf(t, n.Store()).Applied[0]
	stopNode(t, n)
	if err := os.RemoveAll(queue.StoreDirFor(dir)); err != nil {
		t.Fatal(err)
	}
	copyDir(t, saved, queue.StoreDirFor(dir))

	// Before bookline is back, importers refill the stream exactly up to
	// the sequence the index applied.
	refills := 0
	var firstRefill uint64
	withStream(t, dir, func(js jetstream.JetStream) {
		seq := publishCommand(t, js, upsert("refill"))
		if seq >= applied {
			t.Fatalf("the stream kept seq %d of an index at %d: nothing was lost", seq, applied)
		}
		firstRefill = seq
		for seq < applied {
			seq = publishCommand(t, js, book("refill", fmt.Sprintf("refill-%d", refills), refills, 1))
			refills++
		}
	})

	always := cfg
	always.SyncInterval = false
	n, e := startRefused(t, always, nil, 0)
	if e.Seq != firstRefill || !e.Exact || !e.Tail || !strings.Contains(e.What, "another message") {
		t.Fatalf("refusal %+v, want the first refilled seq %d: %v", *e, firstRefill, e)
	}
	stopNode(t, n)

	logs = &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !bytes.Contains([]byte(logs.String()), []byte("INDEX AHEAD OF STREAM")) {
		t.Fatalf("no loud rebuild message in logs:\n%s", logs.String())
	}
	if err := n.Store().View(func(tx *data.Tx) error {
		if !tx.CalendarExists("refill") {
			return fmt.Errorf("the refilled calendar.upsert was skipped")
		}
		for i := 0; i < refills; i++ {
			if _, ok, err := tx.Request("refill", fmt.Sprintf("refill-%d", i)); err != nil || !ok {
				return fmt.Errorf("refilled booking %d was not decided (%v)", i, err)
			}
		}
		if _, ok, _ := tx.Request("a", "after-0"); ok {
			return fmt.Errorf("a request of the lost tail is still recorded")
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	live := digestOf(t, n.Store())
	if got := replayInto(t, n.JetStream(), queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("rebuilt index differs from the stream, first at %q", cal)
	}
}

// truncateStream keeps only the last keep messages of the command stream,
// as a retention limit (or a purge before deny_purge) would, and returns
// its new first sequence.
func truncateStream(t *testing.T, js jetstream.JetStream, keep int) uint64 {
	t.Helper()
	ctx := context.Background()
	s, err := js.Stream(ctx, queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	cfg.MaxMsgs = int64(keep)
	if s, err = js.UpdateStream(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return info.State.FirstSeq
}

// TestCommandStreamDeniesDeleteAndPurge: the command stream is the source
// of truth, so messages cannot be deleted or purged from it; a stream
// created without those flags gets them at start.
func TestCommandStreamDeniesDeleteAndPurge(t *testing.T) {
	check := func(n *queue.Node) {
		t.Helper()
		ctx := context.Background()
		s, err := n.JetStream().Stream(ctx, queue.StreamName)
		if err != nil {
			t.Fatal(err)
		}
		if c := s.CachedInfo().Config; !c.DenyDelete || !c.DenyPurge {
			t.Fatalf("command stream deny_delete=%v deny_purge=%v", c.DenyDelete, c.DenyPurge)
		}
		if err := s.Purge(ctx); err == nil {
			t.Error("the command stream was purged")
		}
		if err := s.DeleteMsg(ctx, 1); err == nil {
			t.Error("a command was deleted from the stream")
		}
	}
	n := startNode(t, t.TempDir(), nil)
	submit(t, n, upsert("deny"))
	check(n)

	// A stream left by an earlier bookline, without the flags.
	dir := t.TempDir()
	withStream(t, dir, func(js jetstream.JetStream) {
		cfg := queue.StreamConfig(4, 1)
		cfg.DenyDelete, cfg.DenyPurge = false, false
		if _, err := js.CreateStream(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
		publishCommand(t, js, upsert("old"))
	})
	n = startNode(t, dir, nil)
	check(n)
}

// TestHistoryGapIsRefused: a retention limit (or a purge) removed the start
// of the command stream. A running node keeps serving its partitions: their
// consumers go on. But neither a restart, nor a rebuild of an empty index,
// nor bookline replay may build an index from what is left: each is refused
// with the missing range named, and the index is left as it was.
func TestHistoryGapIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 2}
	n := startNodeWith(t, cfg, nil)
	quiet, busy := "quiet", "busy"
	for queue.PartitionOf(busy, 2) == queue.PartitionOf(quiet, 2) {
		busy += "x"
	}
	submit(t, n, upsert(quiet))
	submit(t, n, upsert(busy))
	for i := 0; i < 5; i++ {
		submit(t, n, book(busy, fmt.Sprintf("b-%d", i), i, 1))
	}
	first := truncateStream(t, n.JetStream(), 5)
	// Still served, both partitions.
	r := submit(t, n, book(quiet, "q-0", 0, 1))
	if r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("the quiet partition after the truncation: %+v", r)
	}
	quietApplied := r.Seq
	for i := 5; i < 15; i++ {
		if r := submit(t, n, book(busy, fmt.Sprintf("b-%d", i), i, 1)); r.Outcome != actor.OutcomeAccepted {
			t.Fatalf("the busy partition after the truncation: %+v", r)
		}
	}
	// A writer that starts over (here: all of them) cannot prove that
	// the removed range held nothing of the quiet partition: that one
	// stops, the busy one goes on.
	n.StopWriters()
	n.StartWriters()
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if err := n.Ready(); !errors.Is(err, queue.ErrHistoryMissing) {
			return fmt.Errorf("ready after the writers started over: %v", err)
		}
		return nil
	})
	if r := submit(t, n, book(busy, "b-after-restart", 30, 1)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("the busy partition after its writer started over: %+v", r)
	}
	s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if first = info.State.FirstSeq; first <= quietApplied+1 {
		t.Fatalf("stream starts at %d, the quiet partition applied %d: no gap", first, quietApplied)
	}
	want := digestOf(t, n.Store())
	stopNode(t, n)

	start := func() error {
		t.Helper()
		n, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 2})
		if err == nil {
			stopNode(t, n)
		}
		return err
	}
	missing := fmt.Sprintf("%d..%d", quietApplied+1, first-1)
	err = start()
	if !errors.Is(err, queue.ErrHistoryMissing) || !strings.Contains(err.Error(), missing) ||
		!strings.Contains(err.Error(), fmt.Sprintf("partition %d", queue.PartitionOf(quiet, 2))) {
		t.Fatalf("start on a stream that lost seqs %s: %v", missing, err)
	}
	store, err := data.Open(queue.IndexFile(dir))
	if err != nil {
		t.Fatal(err)
	}
	if got := digestOf(t, store); got.Total != want.Total {
		t.Fatal("the refused start changed the index")
	}
	if err := store.Close(); err != nil {
		t.Fatal(err)
	}

	all := fmt.Sprintf("1..%d", first-1)
	withStream(t, dir, func(js jetstream.JetStream) {
		_, err := queue.Replay(context.Background(), js, datatest.MustOpen(t), queue.ReplayOptions{})
		if !errors.Is(err, queue.ErrHistoryMissing) || !strings.Contains(err.Error(), all) {
			t.Fatalf("replay of a stream without seqs %s: %v", all, err)
		}
	})

	// A new, empty index on the same stream.
	for _, f := range []string{"", ".session"} {
		if err := os.Remove(queue.IndexFile(dir) + f); err != nil {
			t.Fatal(err)
		}
	}
	if err = start(); !errors.Is(err, queue.ErrHistoryMissing) || !strings.Contains(err.Error(), all) {
		t.Fatalf("an empty index on a stream without seqs %s: %v", all, err)
	}
}

// TestRecreatedStreamWithOtherPartitionCount: the command stream is
// deleted and created again with another partition count. Nothing of the
// old stream may survive in the index, including calendars whose new
// partition had no applied sequence in it.
func TestRecreatedStreamWithOtherPartitionCount(t *testing.T) {
	dir := t.TempDir()
	n := startNodeWith(t, queue.NodeConfig{DataDir: dir, Partitions: 4}, nil)
	var cals []string
	for i := 0; len(cals) < 6; i++ {
		// Only in old partitions 2 and 3, so that partitions 0 and 1
		// (the new stream's) have no applied sequence in the index.
		if c := fmt.Sprintf("cal%d", i); queue.PartitionOf(c, 4) >= 2 {
			cals = append(cals, c)
			submit(t, n, upsert(c))
		}
	}
	stopNode(t, n)
	withStream(t, dir, func(js jetstream.JetStream) {
		if err := js.DeleteStream(context.Background(), queue.StreamName); err != nil {
			t.Fatal(err)
		}
	})
	logs := &queuetest.SyncBuffer{}
	n = startNodeWith(t, queue.NodeConfig{DataDir: dir, Partitions: 2}, logs)
	if err := n.Store().View(func(tx *data.Tx) error {
		if ids := tx.CalendarIDs(); len(ids) > 0 {
			return fmt.Errorf("calendars of the deleted stream are still served: %v", ids)
		}
		// Only the new stream's own: its schema version 2 markers, one
		// per partition, at its first sequences.
		for p, a := range tx.Applied() {
			if p >= 2 || a > 2 {
				return fmt.Errorf("applied sequences of the deleted stream: %v", tx.Applied())
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	// The new stream's commands are decided afresh.
	if r := submit(t, n, upsert(cals[0])); r.Seq != 3 || !r.Created {
		t.Fatalf("first command of the new stream: %+v", r)
	}
}
