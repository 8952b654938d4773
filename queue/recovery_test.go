package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
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
// must be rebuilt from the stream, not trusted (the new commands would be
// skipped as "already applied" and never decided).
func TestRefilledTailIsRebuilt(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1} // one partition: every message is "its"
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
	applied := digestOf(t, n.Store).Applied[0]
	stopNode(t, n)
	if err := os.RemoveAll(queue.StoreDirFor(dir)); err != nil {
		t.Fatal(err)
	}
	copyDir(t, saved, queue.StoreDirFor(dir))

	// Before bookline is back, importers refill the stream exactly up to
	// the sequence the index applied.
	refills := 0
	withStream(t, dir, func(js jetstream.JetStream) {
		seq := publishCommand(t, js, upsert("refill"))
		if seq >= applied {
			t.Fatalf("the stream kept seq %d of an index at %d: nothing was lost", seq, applied)
		}
		for seq < applied {
			seq = publishCommand(t, js, book("refill", fmt.Sprintf("refill-%d", refills), refills, 1))
			refills++
		}
	})

	logs = &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !bytes.Contains([]byte(logs.String()), []byte("INDEX AHEAD OF STREAM")) {
		t.Fatalf("no loud rebuild message in logs:\n%s", logs.String())
	}
	if err := n.Store.View(func(tx *data.Tx) error {
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
	live := digestOf(t, n.Store)
	if got := replayInto(t, n.JS, queue.ReplayOptions{}); got.Total != live.Total {
		cal, _ := data.FirstDifference(live, got)
		t.Fatalf("rebuilt index differs from the stream, first at %q", cal)
	}
}

// TestCommandStreamDeniesDeleteAndPurge: the command stream is the source
// of truth, so messages cannot be deleted or purged from it; a stream
// created without those flags gets them at start.
func TestCommandStreamDeniesDeleteAndPurge(t *testing.T) {
	check := func(n *queue.Node) {
		t.Helper()
		ctx := context.Background()
		s, err := n.JS.Stream(ctx, queue.StreamName)
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
	if err := n.Store.View(func(tx *data.Tx) error {
		if ids := tx.CalendarIDs(); len(ids) > 0 {
			return fmt.Errorf("calendars of the deleted stream are still served: %v", ids)
		}
		if a := tx.Applied(); len(a) > 0 {
			return fmt.Errorf("applied sequences of the deleted stream: %v", a)
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, logs.String())
	}
	// The new stream's commands are decided afresh.
	if r := submit(t, n, upsert(cals[0])); r.Seq != 1 || !r.Created {
		t.Fatalf("first command of the new stream: %+v", r)
	}
}
