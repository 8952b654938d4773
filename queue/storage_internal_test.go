package queue

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"syscall"
	"testing"
)

// TestStorageProblemClassifies: what counts as a storage write failure,
// of which component, and whether for lack of space. A failed fsync of the
// log does not: it stays fatal.
func TestStorageProblemClassifies(t *testing.T) {
	enospc := &fs.PathError{Op: "write", Path: "/d/index.db", Err: syscall.ENOSPC}
	fsyncFailed := fmt.Errorf("%w, nothing more is committed until bookline restarts: %w", errLogSyncFailed, enospc)
	for _, c := range []struct {
		name      string
		err       error
		component string
		full, ok  bool
	}{
		{"bbolt write", enospc, StorageIndex, true, true},
		{"wrapped", fmt.Errorf("commit: %w", enospc), StorageIndex, true, true},
		{"quota", &fs.PathError{Op: "write", Err: syscall.EDQUOT}, StorageIndex, true, true},
		{"io error", &fs.PathError{Op: "write", Err: syscall.EIO}, StorageIndex, false, true},
		{"nats api", errors.New("nats: API error: code=500 err_code=10049 description=error creating store for consumer: write x: no space left on device"), StorageNATS, true, true},
		{"nats refusal", errors.New("queue: command stream unavailable: publish refused: insufficient resources (503/10023)"), StorageNATS, true, true},
		{"fsync failed", fsyncFailed, "", false, false},
		{"fsync failed, as the index reports it", fmt.Errorf("data: the log of a commit did not become durable: %w", fsyncFailed), "", false, false},
		{"timeout", context.DeadlineExceeded, "", false, false},
		{"nil", nil, "", false, false},
	} {
		component, full, ok := storageProblem(c.err)
		if component != c.component || full != c.full || ok != c.ok {
			t.Errorf("%s: storageProblem(%v) = %q, %v, %v; want %q, %v, %v", c.name, c.err, component, full, ok, c.component, c.full, c.ok)
		}
	}
}

// TestStorageFaultsReportAndClear: faults are reported with their source
// and what to do, counted per failed write (a state found again counts
// once), and cleared per source.
func TestStorageFaultsReportAndClear(t *testing.T) {
	counted := map[string]int{}
	s := newStorageFaults("/data", "/data/nats", slog.New(slog.NewTextHandler(io.Discard, nil)), func(c string) { counted[c]++ })
	if s.Err() != nil {
		t.Fatalf("Err of no faults: %v", s.Err())
	}
	enospc := &fs.PathError{Op: "write", Path: "/data/index.db", Err: syscall.ENOSPC}
	if s.fail("partition 1 writer", context.Canceled) {
		t.Fatal("a cancellation counted as a storage fault")
	}
	for range 3 {
		if !s.fail("partition 1 writer", enospc) {
			t.Fatal("ENOSPC is not a storage fault")
		}
	}
	for range 2 {
		s.set(storeSource, StorageNATS, errors.New("write error"), true, "", false)
	}
	if counted[StorageIndex] != 3 || counted[StorageNATS] != 1 {
		t.Errorf("counted %v, want 3 index failures and 1 nats", counted)
	}
	s.fail("event publisher", enospc)
	err := s.Err()
	for _, want := range []string{"storage full: the index cannot be written: write /data/index.db: no space left on device (event publisher, partition 1 writer); free space on the file system of /data",
		"storage full: the embedded NATS store refuses writes: write error; free space on the file system of /data/nats"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Err = %v, want it to contain %q", err, want)
		}
	}
	if f := s.failing(); !f[StorageIndex] || !f[StorageNATS] {
		t.Errorf("failing = %v, want both", f)
	}
	s.clear("partition 1 writer", StorageNATS) // not what failed
	if f := s.failing(); !f[StorageIndex] {
		t.Error("clearing another component cleared the index fault")
	}
	s.clear("partition 1 writer", "")
	s.clear("event publisher", "")
	if f := s.failing(); f[StorageIndex] || !f[StorageNATS] {
		t.Errorf("failing after the writer cleared = %v", f)
	}
	s.clear(storeSource, StorageNATS)
	if s.Err() != nil {
		t.Errorf("Err after every fault cleared: %v", s.Err())
	}
}
