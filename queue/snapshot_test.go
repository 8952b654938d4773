package queue_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

func streamFirst(t *testing.T, js jetstream.JetStream) uint64 {
	t.Helper()
	s, err := js.Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.FirstSeq
}

func takeSnapshot(t *testing.T, n *queue.Node) queue.SnapshotInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	si, err := n.TakeSnapshot(ctx)
	if err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	return si
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func removeIndex(t *testing.T, dir string) {
	t.Helper()
	if err := data.RemoveIndex(queue.IndexFile(dir)); err != nil {
		t.Fatal(err)
	}
}

// TestSnapshotRestoreAndTrim: snapshots are consistent copies with a
// digest; once they exist the stream is trimmed below the oldest one kept
// and no further; an empty index restores the newest snapshot and applies
// the tail after it (equal digests); a replay continues a restored
// snapshot; a damaged snapshot is skipped loudly for an older one; a full
// replay of the trimmed stream is refused.
func TestSnapshotRestoreAndTrim(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 2,
		Snapshots: queue.SnapshotConfig{Every: 1 << 40, Keep: 2, StreamMaxBytes: 1, TrimGrace: time.Nanosecond}}
	n := startNodeWith(t, cfg, nil)
	workload(t, n, "w", 40)
	// A hold and busy time from before every snapshot, to be found in
	// the index after the stream is trimmed and the index restored.
	hold := book("a", "hold-1", 80, 1)
	hold.Type, hold.Booking.TTLSeconds = actor.TypeHoldCreate, 3600
	held := submit(t, n, hold)
	busyStart := t0.Add(90 * 15 * time.Minute)
	if r := submit(t, n, actor.Command{Type: actor.TypeBusySet, RequestID: "busy-1", CalendarID: "b",
		Busy: &actor.BusySpec{BlockID: "g-1", Start: busyStart, End: busyStart.Add(time.Hour)}}); held.Outcome != actor.OutcomeAccepted || r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("hold %+v, busy %+v", held, r)
	}
	// An index that will fall behind the trimmed stream.
	old := filepath.Join(t.TempDir(), "old.db")
	f, err := os.Create(old)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n.Store().WriteSnapshot(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	first := takeSnapshot(t, n)
	if d := digestOf(t, n.Store()); first.Digest != d.Total || fmt.Sprint(first.Applied) != fmt.Sprint(d.Applied) {
		t.Fatalf("snapshot %+v, live digest %s applied %v", first, d.Total, d.Applied)
	}
	// One snapshot: everything it covers may go, nothing after it.
	if got, want := streamFirst(t, n.JetStream()), first.StreamLast+1; got > want || got < 2 {
		t.Fatalf("stream starts at %d after the first snapshot (covers through %d)", got, first.StreamLast)
	}
	workload(t, n, "v", 30)
	second := takeSnapshot(t, n)
	workload(t, n, "u", 20)
	third := takeSnapshot(t, n)
	var list []queue.SnapshotInfo
	list, err = n.Snapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != second.Name || list[1].Name != third.Name {
		t.Fatalf("kept %v, want the newest two", list)
	}
	if got := streamFirst(t, n.JetStream()); got > second.StreamLast+1 || got <= first.StreamLast {
		t.Fatalf("stream starts at %d; the oldest kept snapshot covers through %d", got, second.StreamLast)
	}
	// A tail after the newest snapshot.
	workload(t, n, "tail", 15)
	want := digestOf(t, n.Store())
	stopNode(t, n)

	// A full replay cannot build from the trimmed stream.
	withStream(t, dir, func(js jetstream.JetStream) {
		if _, err := queue.Replay(context.Background(), js, datatest.MustOpen(t), queue.ReplayOptions{}); !errors.Is(err, queue.ErrHistoryMissing) {
			t.Fatalf("full replay of a trimmed stream: %v", err)
		}
		// Restore + continue gives the live state.
		path := filepath.Join(t.TempDir(), "index.db")
		si, ok, err := queue.RestoreNewest(context.Background(), js, path, discardLog())
		if err != nil || !ok || si.Name != third.Name {
			t.Fatalf("restore: %v %v %s", ok, err, si.Name)
		}
		store, err := data.Open(path)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		if _, err := queue.Replay(context.Background(), js, store, queue.ReplayOptions{Continue: true}); err != nil {
			t.Fatalf("continue replay: %v", err)
		}
		if got := digestOf(t, store); got.Total != want.Total {
			t.Fatalf("snapshot + tail digest %s, live %s", got.Total, want.Total)
		}
	})

	// An empty index (new instance, or discarded after a power loss)
	// starts from the newest snapshot.
	removeIndex(t, dir)
	logs := &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !strings.Contains(logs.String(), "index restored from a snapshot") || !strings.Contains(logs.String(), third.Name) {
		t.Fatalf("no restore logged:\n%s", logs)
	}
	if got := digestOf(t, n.Store()); got.Total != want.Total {
		t.Fatalf("restored + tail digest %s, live %s", got.Total, want.Total)
	}
	if r := submit(t, n, book("a", "after-restore", 60, 1)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("booking after the restore: %+v", r)
	}
	// Retries of keys decided before the snapshot get their recorded answer.
	// (w-1 was accepted at slots 7-8 of b: decided again, it would
	// overlap itself.)
	if r := submit(t, n, book("b", "w-1", 7, 2)); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("retry of a key decided before the snapshot: %+v", r)
	}
	if r := submit(t, n, actor.Command{Type: actor.TypeHoldConfirm, RequestID: "confirm-1", CalendarID: "a", BookingID: held.Booking.ID}); r.Outcome != actor.OutcomeAccepted {
		t.Fatalf("confirming a hold from before the snapshots: %+v", r)
	}
	if r := submit(t, n, book("b", "on-busy", 90, 1)); r.Code != actor.CodeExternalBusy {
		t.Fatalf("booking on busy time from before the snapshots: %+v", r)
	}
	want = digestOf(t, n.Store())

	// Damage the newest snapshot: the restore falls back to the older
	// one, loudly, and still reaches the same state from the tail.
	obs, err := n.JetStream().ObjectStore(context.Background(), queue.SnapshotBucket)
	if err != nil {
		t.Fatal(err)
	}
	part := third.Name + ".part-00000"
	info, err := obs.GetInfo(context.Background(), part)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := obs.Put(context.Background(), info.ObjectMeta, strings.NewReader(strings.Repeat("not an index", int(info.Size)/12+1)[:info.Size])); err != nil {
		t.Fatal(err)
	}
	stopNode(t, n)
	removeIndex(t, dir)
	logs = &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !strings.Contains(logs.String(), "SNAPSHOT NOT USABLE") || !strings.Contains(logs.String(), second.Name) {
		t.Fatalf("no fallback logged:\n%s", logs)
	}
	if got := digestOf(t, n.Store()); got.Total != want.Total {
		t.Fatalf("older snapshot + tail digest %s, live %s", got.Total, want.Total)
	}

	// An index whose history the stream no longer has is set aside for
	// the newest usable snapshot.
	stopNode(t, n)
	removeIndex(t, dir)
	if err := os.Rename(old, queue.IndexFile(dir)); err != nil {
		t.Fatal(err)
	}
	logs = &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !strings.Contains(logs.String(), "INDEX BEHIND THE TRIMMED COMMAND STREAM") {
		t.Fatalf("no restore of an index behind the stream logged:\n%s", logs)
	}
	if got := digestOf(t, n.Store()); got.Total != want.Total {
		t.Fatalf("index behind, restored: digest %s, live %s", got.Total, want.Total)
	}
	if _, err := os.Stat(queue.IndexFile(dir) + ".behind"); err != nil {
		t.Fatalf("the old index was not kept: %v", err)
	}
}

// TestStreamBoundsNeedSnapshots: every configuration under which history
// could go without a snapshot covering it is refused with a clear error.
func TestStreamBoundsNeedSnapshots(t *testing.T) {
	_, err := queue.StartNode(queue.NodeConfig{DataDir: t.TempDir(), Snapshots: queue.SnapshotConfig{StreamMaxAge: time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "needs snapshots") {
		t.Fatalf("max age without snapshots: %v", err)
	}
	// A stream created without snapshots denies purges for good.
	dir := t.TempDir()
	n := startNodeWith(t, queue.NodeConfig{DataDir: dir}, nil)
	submit(t, n, upsert("a"))
	stopNode(t, n)
	_, err = queue.StartNode(queue.NodeConfig{DataDir: dir, Logger: discardLog(),
		Snapshots: queue.SnapshotConfig{Interval: time.Hour, StreamMaxAge: time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "denies purges") {
		t.Fatalf("bound on a stream that denies purges: %v", err)
	}
	// NATS's own limits remove commands whatever the snapshots cover.
	dir = t.TempDir()
	withStream(t, dir, func(js jetstream.JetStream) {
		c := queue.StreamConfig(4, 1)
		c.MaxAge = time.Hour
		if _, err := js.CreateStream(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	})
	_, err = queue.StartNode(queue.NodeConfig{DataDir: dir, Logger: discardLog()})
	if !errors.Is(err, queue.ErrUncoveredHistory) {
		t.Fatalf("stream with max_age: %v", err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
}

// TestClusterFollowsAndRestoresBehindTrimmedStream: in cluster mode an
// instance follows the partitions it does not own without being read, so
// trimming below a snapshot taken elsewhere leaves it no gap; an instance
// that was away while the stream was trimmed past its index restores the
// newest snapshot when it comes back.
func TestClusterFollowsAndRestoresBehindTrimmedStream(t *testing.T) {
	t.Parallel()
	url := queuetest.StartServer(t)
	start := func(id, dir string, logs *queuetest.SyncBuffer) *queue.Node {
		t.Helper()
		n, err := queue.StartNode(queue.NodeConfig{DataDir: dir, NATSURL: url, InstanceID: id, Partitions: 2,
			Replicas: 1, AllowLazySync: true, // not about the servers' durability
			TakeoverTimeout: 2 * time.Second, FollowInterval: 200 * time.Millisecond, Logger: slogTo(logs),
			Snapshots: queue.SnapshotConfig{Every: 1 << 40, Keep: 1, StreamMaxAge: time.Millisecond, TrimGrace: 3 * time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { stopNode(t, n) })
		queuetest.CheckFor(t, queuetest.ReadyTimeout, n.Ready)
		return n
	}
	a := start("a", t.TempDir(), &queuetest.SyncBuffer{})
	bDir, bLogs := t.TempDir(), &queuetest.SyncBuffer{}
	b := start("b", bDir, bLogs)
	workload(t, a, "w", 30)
	waitApplied(t, b, 20*time.Second) // without a single read on b
	sameIndexNow := func() error {
		if got, want := digestOf(t, b.Store()).Total, digestOf(t, a.Store()).Total; got != want {
			return fmt.Errorf("b's index %s, a's %s", got, want)
		}
		return nil
	}
	takeSnapshot(t, a)
	workload(t, a, "v", 20)
	// b follows every partition before the trims below: they keep only
	// the last TrimGrace (3 s) of commands, a margin a loaded machine's
	// follow rounds (200 ms apart) could overrun.
	queuetest.CheckFor(t, 20*time.Second, sameIndexNow)
	// Snapshots keep one and trim up to it, except the last second.
	trimmedPast := func(seq uint64) {
		t.Helper()
		queuetest.CheckFor(t, 20*time.Second, func() error {
			takeSnapshot(t, a)
			if got := streamFirst(t, a.JetStream()); got <= seq {
				return fmt.Errorf("stream starts at %d, want past %d", got, seq)
			}
			return nil
		})
	}
	trimmedPast(40)
	workload(t, a, "u", 10)
	waitApplied(t, b, 20*time.Second)
	if strings.Contains(bLogs.String(), "no longer has") {
		t.Fatalf("b fell behind the trimmed stream:\n%s", bLogs)
	}
	queuetest.CheckFor(t, 20*time.Second, sameIndexNow)

	// b stops; the stream is trimmed past its index meanwhile.
	var bTop uint64
	for _, p := range b.Parts() {
		bTop = max(bTop, p.AppliedSeq())
	}
	stopNode(t, b)
	workload(t, a, "x", 20)
	trimmedPast(bTop + 1)
	workload(t, a, "y", 5)
	bLogs = &queuetest.SyncBuffer{}
	b = start("b", bDir, bLogs)
	if !strings.Contains(bLogs.String(), "INDEX BEHIND THE TRIMMED COMMAND STREAM") {
		t.Fatalf("b did not restore:\n%s", bLogs)
	}
	sameIndex := func(what string) {
		t.Helper()
		// b follows every partition, not only the one that holds the
		// stream's last message, within a few follow rounds.
		queuetest.CheckFor(t, 20*time.Second, func() error {
			if got, want := digestOf(t, b.Store()).Total, digestOf(t, a.Store()).Total; got != want {
				return fmt.Errorf("%s: b's index %s, a's %s", what, got, want)
			}
			return nil
		})
	}
	sameIndex("restored")
}

func slogTo(w io.Writer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// TestStartRemovesSnapshotLeftovers: a crash in the middle of a snapshot
// leaves its copy or its compaction scratch file in the data directory;
// the next start removes both.
func TestStartRemovesSnapshotLeftovers(t *testing.T) {
	dir := t.TempDir()
	var left []string
	for _, name := range []string{"index.db.snapshot-123", "index.db.compact-456"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte("partial"), 0o600); err != nil {
			t.Fatal(err)
		}
		left = append(left, path)
	}
	startNode(t, dir, nil)
	for _, path := range left {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left after the start: %v", path, err)
		}
	}
}
