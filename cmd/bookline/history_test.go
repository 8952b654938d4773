package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/queue"
)

// damageBlock changes the command stream's stored block file that holds
// marker (once) in a stopped data directory: flip flips one bit inside
// marker, otherwise the file is cut where marker starts.
func damageBlock(t *testing.T, dir, marker string, flip bool) {
	t.Helper()
	blks, err := filepath.Glob(filepath.Join(queue.StoreDirFor(dir), server.JetStreamStoreDir, "*", "streams", queue.StreamName, "msgs", "*.blk"))
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range blks {
		buf, err := os.ReadFile(b)
		if err != nil {
			t.Fatal(err)
		}
		i := bytes.Index(buf, []byte(marker))
		if i < 0 {
			continue
		}
		if flip {
			buf[i+len(marker)/2] ^= 0x04
		} else {
			buf = buf[:i]
		}
		if err := os.WriteFile(b, buf, 0o600); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no block file holds %q", marker)
}

// TestVerifyNamesTheFirstDifferingSequence: `bookline verify` of a stopped
// bookline whose stream was damaged under its index (a bit flipped in a
// stored message; a block file cut short) reports the partition and the
// first differing stream sequence, and fails; on the intact stream it
// passes. Before, a cut stream verified "ok" (the replay stops where the
// stream ends, and the lost commands were in neither digest's partitions
// it compared), and a damaged message was only a differing calendar.
func TestVerifyNamesTheFirstDifferingSequence(t *testing.T) {
	dir := t.TempDir()
	n, err := queue.StartNode(queue.NodeConfig{DataDir: dir, Partitions: 2, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for n.Ready() != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	submitCmd := func(cmd actor.Command) {
		t.Helper()
		cmd.V = actor.SchemaVersion
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if _, err := n.Submit(ctx, &cmd, cmd.Fingerprint()); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Date(2027, 4, 5, 9, 0, 0, 0, time.UTC)
	submitCmd(actor.Command{Type: actor.TypeCalendarUpsert, RequestID: "cal", CalendarID: "hist", Calendar: &actor.CalendarSpec{Timezone: "UTC"}})
	for i := 0; i < 12; i++ {
		start := t0.Add(time.Duration(i) * time.Hour)
		submitCmd(actor.Command{Type: actor.TypeBookingCreate, RequestID: fmt.Sprintf("r-%d", i), CalendarID: "hist",
			Booking: &actor.BookingSpec{Start: start, End: start.Add(time.Hour), Customer: "someone"}})
	}
	var seq uint64
	if err := n.Store().View(func(tx *data.Tx) error {
		rec, ok, err := tx.Request("hist", "r-5")
		if !ok || err != nil {
			return fmt.Errorf("r-5 not recorded: %v", err)
		}
		seq = rec.Seq
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runMain("verify", "--data-dir", dir, "--source-dir", dir); code != 0 {
		t.Fatalf("verify of an intact stream: exit %d\n%s\n%s", code, out, errs)
	}
	cut := filepath.Join(t.TempDir(), "cut")
	if out, err := exec.Command("cp", "-a", dir, cut).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	want := fmt.Sprintf("DIFFERENT: partition %d: the stream's history differs from what the live index applied: first differing stream seq %d (the first difference",
		queue.PartitionOf("hist", 2), seq)

	damageBlock(t, dir, `"r-5"`, true)
	code, out, errs := runMain("verify", "--data-dir", dir, "--source-dir", dir)
	if code == 0 || !strings.Contains(out, want) || !strings.Contains(errs, fmt.Sprintf("stream seq %d cannot be read", seq)) {
		t.Fatalf("verify of a stream with a flipped bit: exit %d, want %q\n%s\n%s", code, want, out, errs)
	}
	damageBlock(t, cut, `"r-5"`, false)
	code, out, errs = runMain("verify", "--data-dir", cut, "--source-dir", cut)
	if code == 0 || !strings.Contains(out, want) {
		t.Fatalf("verify of a stream cut short: exit %d, want %q\n%s\n%s", code, want, out, errs)
	}
}
