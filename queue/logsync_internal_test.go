package queue

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"
)

func writeBlock(t *testing.T, dir string, idx int, data string) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, strconv.Itoa(idx)+".blk"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestLogSyncFollowsNewBlocks: the syncer keeps the newest block open and
// moves on when the server starts a new one, whether or not the directory's
// timestamp changed.
func TestLogSyncFollowsNewBlocks(t *testing.T) {
	dir := t.TempDir()
	l := newLogSync(dir, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	defer l.Close()
	// An empty stream has no block yet.
	if err := l.Request()(); err != nil {
		t.Fatalf("sync of an empty stream: %v", err)
	}
	writeBlock(t, dir, 1, "first")
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	writeBlock(t, dir, 1, "more")
	writeBlock(t, dir, 2, "second")
	writeBlock(t, dir, 3, "third")
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	if l.curIdx != 3 {
		t.Fatalf("newest block %d, want 3", l.curIdx)
	}
	// A new block whose creation the directory's mtime does not show (same
	// timestamp granularity tick): the name check still finds it.
	mod := l.dirMod
	writeBlock(t, dir, 4, "fourth")
	if err := os.Chtimes(dir, mod, mod); err != nil {
		t.Fatal(err)
	}
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	if l.curIdx != 4 {
		t.Fatalf("newest block %d after an unannounced new block, want 4", l.curIdx)
	}
}

// TestLogSyncFailureSticks: after a failed sync every waiter gets the error,
// also for syncs requested later, and the syncer reports it.
func TestLogSyncFailureSticks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "msgs")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	l := newLogSync(dir, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	defer l.Close()
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	first := l.Request()()
	if first == nil {
		t.Fatal("a sync of a directory that is gone succeeded")
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := l.Request()(); err == nil || err.Error() != first.Error() {
		t.Fatalf("a later sync = %v, want the first failure again (%v)", err, first)
	}
	if l.Err() == nil {
		t.Error("Err is nil after a failed sync")
	}
}

// TestLogSyncClose: a waiter whose sync never ran learns that it did not.
func TestLogSyncClose(t *testing.T) {
	l := newLogSync(t.TempDir(), slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	l.Close()
	if err := l.Request()(); !errors.Is(err, ErrLogSyncClosed) {
		t.Fatalf("wait after Close = %v, want ErrLogSyncClosed", err)
	}
}

// TestLogSyncCoversBySequence: a sync covers every message up to the
// stream's last sequence read before it started, so a later request for
// such a message needs no new sync; a newer message does.
func TestLogSyncCoversBySequence(t *testing.T) {
	dir := t.TempDir()
	writeBlock(t, dir, 1, "msgs")
	var last atomic.Uint64
	var syncs atomic.Int64
	l := newLogSync(dir, slog.New(slog.NewTextHandler(io.Discard, nil)),
		func(time.Duration) { syncs.Add(1) }, func() (uint64, bool) { return last.Load(), true })
	defer l.Close()
	last.Store(10)
	if err := l.RequestSeq(10)(); err != nil {
		t.Fatal(err)
	}
	before := syncs.Load()
	if err := l.RequestSeq(7)(); err != nil {
		t.Fatal(err)
	}
	if syncs.Load() != before {
		t.Errorf("a message the last sync covered waited for another sync")
	}
	last.Store(11)
	if err := l.RequestSeq(11)(); err != nil {
		t.Fatal(err)
	}
	if syncs.Load() != before+1 {
		t.Errorf("%d syncs for a newer message, want 1", syncs.Load()-before)
	}
}

// TestLogSyncReopen: after reopen the syncer no longer trusts the block it
// keeps open: a block file replaced under the same name (as a reloaded
// store may) is the one it syncs from then on.
func TestLogSyncReopen(t *testing.T) {
	dir := t.TempDir()
	l := newLogSync(dir, slog.New(slog.NewTextHandler(io.Discard, nil)), nil, nil)
	defer l.Close()
	writeBlock(t, dir, 1, "first")
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	mod := l.dirMod
	name := filepath.Join(dir, "1.blk")
	if err := os.Remove(name); err != nil {
		t.Fatal(err)
	}
	writeBlock(t, dir, 1, "replaced")
	if err := os.Chtimes(dir, mod, mod); err != nil {
		t.Fatal(err)
	}
	same := func() bool {
		a, err := l.cur.Stat()
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.Stat(name)
		if err != nil {
			t.Fatal(err)
		}
		return os.SameFile(a, b)
	}
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	if same() {
		t.Fatal("the syncer found the replaced block without reopen: the test shows nothing")
	}
	l.reopen()
	if err := l.Request()(); err != nil {
		t.Fatal(err)
	}
	if !same() {
		t.Fatal("after reopen the syncer still keeps the replaced block open")
	}
}
