package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
	"github.com/bookline/bookline/queue"
	"github.com/bookline/bookline/queue/queuetest"
)

// Altered history: a command stream whose stored files were damaged,
// truncated or replaced under an index is refused, naming the first
// differing sequence, instead of being replayed as truth.

// blockWith returns the command stream's block file (under a NATS store
// directory) holding marker, and marker's offset in it.
func blockWith(t *testing.T, storeDir, marker string) (string, int) {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(storeDir, server.JetStreamStoreDir, "*", "streams", queue.StreamName, "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blks {
		buf, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(buf, []byte(marker)); i >= 0 {
			if bytes.Count(buf, []byte(marker)) != 1 {
				t.Fatalf("%q is stored more than once", marker)
			}
			return b, i
		}
	}
	t.Fatalf("no block file of %s holds %q", storeDir, marker)
	return "", 0
}

// flipBit flips one bit inside marker, a part of one stored message's
// body, in the stopped store's block file: a single-bit error on disk.
func flipBit(t *testing.T, storeDir, marker string) {
	t.Helper()
	blk, i := blockWith(t, storeDir, marker)
	buf, err := os.ReadFile(blk)
	if err != nil {
		t.Fatal(err)
	}
	buf[i+len(marker)/2] ^= 0x04
	if err := os.WriteFile(blk, buf, 0o600); err != nil {
		t.Fatal(err)
	}
}

// truncateBlockAt cuts the block file holding marker in the middle of the
// message that holds it: that message and every later one in the block
// are gone.
func truncateBlockAt(t *testing.T, storeDir, marker string) {
	t.Helper()
	blk, i := blockWith(t, storeDir, marker)
	if err := os.Truncate(blk, int64(i)); err != nil {
		t.Fatal(err)
	}
}

// startRefused starts a node that the stream's history must make refuse
// partition p (the first it refuses), and returns the node and the
// refusal.
func startRefused(t *testing.T, cfg queue.NodeConfig, logs io.Writer, p int) (*queue.Node, *queue.HistoryMismatchError) {
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
	var e *queue.HistoryMismatchError
	queuetest.CheckFor(t, 20*time.Second, func() error {
		err := n.Ready()
		if !errors.As(err, &e) || !errors.Is(err, queue.ErrHistoryDiffers) {
			return fmt.Errorf("ready: %v", err)
		}
		if e.Partition != p {
			return fmt.Errorf("refused partition %d, want %d: %v", e.Partition, p, err)
		}
		return nil
	})
	if st := n.PartitionStatuses(context.Background())[p]; !st.HistoryMismatch {
		t.Errorf("partition %d's status: no history mismatch", p)
	}
	return n, e
}

// requestSeq is the stream sequence of request req's command, as the index
// recorded it.
func requestSeq(t *testing.T, s *data.Store, cal, req string) uint64 {
	t.Helper()
	var seq uint64
	if err := s.View(func(tx *data.Tx) error {
		rec, ok, err := tx.Request(cal, req)
		if err != nil || !ok {
			return fmt.Errorf("request %s/%s not recorded (%v)", cal, req, err)
		}
		seq = rec.Seq
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return seq
}

func recorded(t *testing.T, s *data.Store, cal, req string) bool {
	t.Helper()
	var ok bool
	if err := s.View(func(tx *data.Tx) (err error) { _, ok, err = tx.Request(cal, req); return err }); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestBitFlipInStreamIsRefused: a single bit flipped in a stored message
// below the index's applied sequence. nats-server then cannot read that
// message (its checksum fails) and passes over it without a word: before,
// the index's last message was intact and the partition went on, and a
// rebuild or replay silently lacked the command. Now the partition is
// refused, naming the message's sequence, its index is kept as it is, a
// replay refuses the stream too, and only an operator's explicit
// acceptance of exactly that difference rebuilds it from the stream.
func TestBitFlipInStreamIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1}
	n := startNodeWith(t, cfg, nil)
	workload(t, n, "w", 30)
	seq := requestSeq(t, n.Store(), "e", "w-10") // workload: calendar cals[10%6]
	applied := n.Parts()[0].AppliedSeq()
	stopNode(t, n)
	flipBit(t, queue.StoreDirFor(dir), `"w-10"`)

	logs := &queuetest.SyncBuffer{}
	n, e := startRefused(t, cfg, logs, 0)
	if e.Seq != seq || !e.Exact || e.Applied != applied || e.Tail {
		t.Fatalf("refusal %+v, want the first difference at seq %d (applied %d): %v", *e, seq, applied, e)
	}
	if out := logs.String(); !strings.Contains(out, "STREAM HISTORY DIFFERS") || strings.Contains(out, "INDEX AHEAD OF STREAM") ||
		!strings.Contains(out, fmt.Sprintf("--accept-stream-history=0@%d", seq)) {
		t.Fatalf("logs:\n%s", out)
	}
	if !recorded(t, n.Store(), "e", "w-10") {
		t.Fatal("the refused partition's index was changed")
	}
	cmd := book("e", "w-new", 90, 1)
	cmd.V = actor.SchemaVersion
	if _, err := n.Submit(context.Background(), &cmd, cmd.Fingerprint()); !errors.Is(err, queue.ErrUnavailable) || !errors.Is(err, queue.ErrHistoryDiffers) {
		t.Fatalf("a command of the refused partition: %v", err)
	}
	_, err := queue.Replay(context.Background(), n.JetStream(), datatest.MustOpen(t), queue.ReplayOptions{})
	var damaged *queue.DamagedStreamError
	if !errors.As(err, &damaged) || damaged.Seqs[0] != seq {
		t.Fatalf("replay of the damaged stream: %v", err)
	}
	stopNode(t, n)

	// Accepting another difference does not do.
	cfg.AcceptHistory = map[int]uint64{0: seq + 1}
	n, _ = startRefused(t, cfg, nil, 0)
	stopNode(t, n)
	cfg.AcceptHistory = map[int]uint64{0: seq}
	logs = &queuetest.SyncBuffer{}
	n = startNodeWith(t, cfg, logs)
	if !strings.Contains(logs.String(), "STREAM HISTORY ACCEPTED BY THE OPERATOR") {
		t.Fatalf("no loud acceptance:\n%s", logs.String())
	}
	if recorded(t, n.Store(), "e", "w-10") || !recorded(t, n.Store(), "e", "w-16") {
		t.Fatal("the partition was not rebuilt from the stream as it is")
	}
}

// TestTruncatedBlockIsRefused: a block file cut in the middle of a message
// below the index's applied sequence (the server drops the rest of the
// block). Before, the index was found "ahead of its stream" and rebuilt
// from what was left; acknowledged, answered commands were gone without a
// word. Now the partition is refused, naming the first lost message.
func TestTruncatedBlockIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1}
	n := startNodeWith(t, cfg, nil)
	workload(t, n, "w", 30)
	seq := requestSeq(t, n.Store(), "e", "w-10")
	stopNode(t, n)
	truncateBlockAt(t, queue.StoreDirFor(dir), `"w-10"`)

	n, e := startRefused(t, cfg, nil, 0)
	if e.Seq != seq || !e.Exact || !e.Tail || !strings.Contains(e.What, "does not have") {
		t.Fatalf("refusal %+v, want the first lost message, seq %d: %v", *e, seq, e)
	}
	if !recorded(t, n.Store(), "a", "w-24") {
		t.Fatal("the refused partition's index was changed")
	}
}

// TestDamagedLastMessageIsRefused: the message the index applied last is
// the damaged one. The server still counts it as pending for the
// partition's readers but never delivers it; the check must not wait for
// it for ever. Before, such an index was reset and rebuilt from the
// stream without the command.
func TestDamagedLastMessageIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1}
	n := startNodeWith(t, cfg, nil)
	submit(t, n, upsert("a"))
	for i := 0; i < 5; i++ {
		submit(t, n, book("a", fmt.Sprintf("z-%d", i), i, 1))
	}
	applied := n.Parts()[0].AppliedSeq()
	if seq := requestSeq(t, n.Store(), "a", "z-4"); seq != applied {
		t.Fatalf("z-4 at seq %d, applied %d", seq, applied)
	}
	stopNode(t, n)
	flipBit(t, queue.StoreDirFor(dir), `"z-4"`)
	_, e := startRefused(t, cfg, nil, 0)
	if e.Seq != applied || !e.Exact || !e.Tail {
		t.Fatalf("refusal %+v: %v", *e, e)
	}
}

// TestOlderDifferenceIsNamedByCheckpoint: a damaged message older than the
// recent messages whose hashes the index keeps is found where a checkpoint
// of the chain is; the refusal names the window it lies in.
func TestOlderDifferenceIsNamedByCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1}
	n := startNodeWith(t, cfg, nil)
	submit(t, n, upsert("a"))
	var last uint64
	for i := 0; i < 3*data.CheckpointEvery+300; i++ {
		last = publishCommand(t, n.JetStream(), book("a", fmt.Sprintf("bulk-%05d", i), i%96, 1))
	}
	queuetest.CheckFor(t, 30*time.Second, func() error {
		if got := n.Parts()[0].AppliedSeq(); got != last {
			return fmt.Errorf("applied %d of %d", got, last)
		}
		return nil
	})
	var cps []data.Checkpoint
	var recent []data.Link
	if err := n.Store().View(func(tx *data.Tx) (err error) {
		cps = tx.Checkpoints(0)
		recent, err = tx.RecentLinks(0)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(cps) != 3 || len(recent) == 0 || recent[0].Seq <= cps[0].Seq {
		t.Fatalf("checkpoints %+v, recent messages %d", cps, len(recent))
	}
	s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), cps[0].Seq)
	if err != nil {
		t.Fatal(err)
	}
	var cmd actor.Command
	if err := json.Unmarshal(m.Data, &cmd); err != nil {
		t.Fatal(err)
	}
	stopNode(t, n)
	flipBit(t, queue.StoreDirFor(dir), `"`+cmd.RequestID+`"`)

	_, e := startRefused(t, cfg, nil, 0)
	if e.Seq != cps[0].Seq || e.Exact || e.After != 0 {
		t.Fatalf("refusal %+v, want the window up to the first checkpoint, seq %d: %v", *e, cps[0].Seq, e)
	}
}

// TestSnapshotOfAnotherHistoryIsRefused: an empty index is restored from a
// snapshot whose last applied message the stream no longer holds as it
// was. Before, that snapshot was skipped and the whole stream, as it now
// is, rebuilt into the index; now the start is refused, naming it.
func TestSnapshotOfAnotherHistoryIsRefused(t *testing.T) {
	dir := t.TempDir()
	cfg := queue.NodeConfig{DataDir: dir, Partitions: 1, Snapshots: queue.SnapshotConfig{Interval: time.Hour}}
	n := startNodeWith(t, cfg, nil)
	workload(t, n, "w", 20)
	si := takeSnapshot(t, n)
	a := si.Applied[0]
	s, err := n.JetStream().Stream(context.Background(), queue.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetMsg(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	var cmd actor.Command
	if err := json.Unmarshal(m.Data, &cmd); err != nil {
		t.Fatal(err)
	}
	stopNode(t, n)
	removeIndex(t, dir)
	flipBit(t, queue.StoreDirFor(dir), `"`+cmd.RequestID+`"`)

	cfg.Logger = discardLog()
	n, err = queue.StartNode(cfg)
	if err == nil {
		stopNode(t, n)
		t.Fatal("an index was built on a stream that lost what the snapshot applied")
	}
	var e *queue.HistoryMismatchError
	if !errors.As(err, &e) || e.Partition != 0 || e.Seq != a {
		t.Fatalf("start: %v", err)
	}
}

// restartableServer is a standalone JetStream server that can be stopped
// and started again on the same port and store.
type restartableServer struct {
	opts *server.Options
	ns   *server.Server
}

func startRestartable(t *testing.T) *restartableServer {
	t.Helper()
	r := &restartableServer{opts: &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}}
	r.start(t)
	r.opts.Port = r.ns.Addr().(*net.TCPAddr).Port
	t.Cleanup(r.stop)
	return r
}

func (r *restartableServer) start(t *testing.T) {
	t.Helper()
	ns, err := server.NewServer(r.opts)
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats not ready")
	}
	r.ns = ns
}

func (r *restartableServer) stop() { r.ns.Shutdown(); r.ns.WaitForShutdown() }

// TestClusterCatchUpRefusesChangedHistory: an instance in cluster mode
// follows a partition another instance decides. While the NATS server is
// down, the stored message at the sequence the follower applied last is
// damaged; when the follower next catches up (a read), it must not apply
// what follows on top of a history that changed under it: it refuses the
// partition, naming the sequence. (One NATS server stands in for a stream
// leader whose files were damaged: making a damaged node of a real
// cluster the leader is the fault suite's work.)
func TestClusterCatchUpRefusesChangedHistory(t *testing.T) {
	t.Parallel()
	srv := startRestartable(t)
	url := srv.ns.ClientURL()
	a := startInstance(t, url, "a", nil)
	b := startInstance(t, url, "b", nil)
	submit(t, a, upsert("cal"))
	for i := 0; i < 5; i++ {
		submit(t, a, book("cal", fmt.Sprintf("c-%d", i), i, 1))
	}
	if err := b.SyncCalendar(context.Background(), "cal"); err != nil {
		t.Fatal(err)
	}
	p := queue.PartitionOf("cal", 2)
	applied := b.Parts()[p].AppliedSeq()
	if got := requestSeq(t, b.Store(), "cal", "c-4"); got != applied {
		t.Fatalf("b applied seq %d, c-4 is seq %d", applied, got)
	}
	srv.stop()
	flipBit(t, srv.opts.StoreDir, `"c-4"`)
	srv.start(t)
	// The partition's consumer is paused first: after its restart the
	// server may pin b, whose delivery would then bring the new command
	// (an owner trusts its consumer's unbroken delivery chain), and the
	// read must be what brings it here.
	queuetest.CheckFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := b.JetStream().PauseConsumer(ctx, queue.StreamName, queue.ConsumerPrefix+strconv.Itoa(p), time.Now().Add(time.Minute))
		return err
	})
	// A new command of the calendar.
	queuetest.CheckFor(t, 30*time.Second, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		cmd := book("cal", "c-new", 20, 1)
		cmd.V = actor.SchemaVersion
		body, _ := json.Marshal(cmd)
		_, err := b.JetStream().Publish(ctx, queue.CommandSubject("cal"), body)
		return err
	})
	err := b.SyncCalendar(context.Background(), "cal")
	var e *queue.HistoryMismatchError
	if !errors.As(err, &e) || !errors.Is(err, queue.ErrUnavailable) {
		t.Fatalf("read on the follower: %v", err)
	}
	if e.Partition != p || e.Seq != applied || !e.Tail {
		t.Fatalf("refusal %+v: %v", *e, e)
	}
	queuetest.CheckFor(t, 10*time.Second, func() error {
		if err := b.Ready(); !errors.Is(err, queue.ErrHistoryDiffers) {
			return fmt.Errorf("ready: %v", err)
		}
		return nil
	})
	var mismatch bool
	for _, st := range b.PartitionStatuses(context.Background()) {
		mismatch = mismatch || st.Partition == p && st.HistoryMismatch
	}
	if !mismatch {
		t.Error("no history mismatch in the partition's status")
	}
	if recorded(t, b.Store(), "cal", "c-new") {
		t.Error("the follower applied a command on top of the changed history")
	}
}

// TestHistoryCheckReadsDirectlyWhenTheConsumerIsQuiet: a consumer that
// delivers nothing for a while (a cluster that has just healed) proves
// nothing, so the check reads the rest message by message; it must find
// the same differences, and none in a healthy stream.
func TestHistoryCheckReadsDirectlyWhenTheConsumerIsQuiet(t *testing.T) {
	queue.SetHistoryQuiet(t, time.Nanosecond)
	for _, alter := range []string{"none", "flip", "truncate"} {
		t.Run(alter, func(t *testing.T) {
			dir := t.TempDir()
			cfg := queue.NodeConfig{DataDir: dir, Partitions: 1}
			n := startNodeWith(t, cfg, nil)
			workload(t, n, "w", 30)
			seq := requestSeq(t, n.Store(), "e", "w-10")
			stopNode(t, n)
			switch alter {
			case "none":
				n = startNodeWith(t, cfg, nil)
				if err := n.Ready(); err != nil {
					t.Fatalf("a healthy stream, read directly: %v", err)
				}
				if !recorded(t, n.Store(), "a", "w-24") {
					t.Fatal("the index lost a request")
				}
				return
			case "flip":
				flipBit(t, queue.StoreDirFor(dir), `"w-10"`)
			case "truncate":
				truncateBlockAt(t, queue.StoreDirFor(dir), `"w-10"`)
			}
			_, e := startRefused(t, cfg, nil, 0)
			if e.Seq != seq || !e.Exact {
				t.Fatalf("refusal %+v, want the first difference at seq %d: %v", *e, seq, e)
			}
		})
	}
}
