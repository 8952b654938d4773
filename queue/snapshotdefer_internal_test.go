package queue

import (
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bookline/bookline/data"
	"github.com/bookline/bookline/data/datatest"
)

func TestSnapshotWaitsForBulkLoad(t *testing.T) {
	var applied atomic.Uint64
	s := &snapshotter{log: slog.New(slog.NewTextHandler(io.Discard, nil)), loading: commandRate(applied.Load)}
	t0 := time.Unix(1_800_000_000, 0)

	// A trickle of commands: the due snapshot is taken.
	applied.Add(bulkLoadCommands - 1)
	if s.deferDuringLoad(s.loading(), t0) {
		t.Fatal("deferred below the bulk rate")
	}
	// A bulk load: deferred, for at most maxSnapshotDefer.
	for i, at := range []time.Duration{0, snapshotCheck, maxSnapshotDefer - time.Second} {
		applied.Add(bulkLoadCommands)
		if !s.deferDuringLoad(s.loading(), t0.Add(at)) {
			t.Fatalf("check %d of the load: not deferred", i)
		}
	}
	applied.Add(bulkLoadCommands)
	if s.deferDuringLoad(s.loading(), t0.Add(maxSnapshotDefer)) {
		t.Fatal("deferred past maxSnapshotDefer")
	}
	// The load ends: no deferral, and the next load waits its own bound.
	if s.deferDuringLoad(s.loading(), t0.Add(maxSnapshotDefer+snapshotCheck)) {
		t.Fatal("deferred after the load ended")
	}
	later := t0.Add(time.Hour)
	for _, at := range []time.Duration{0, maxSnapshotDefer - time.Second} {
		applied.Add(2 * bulkLoadCommands)
		if !s.deferDuringLoad(s.loading(), later.Add(at)) {
			t.Fatal("a new load did not get its own deferral")
		}
	}
}

func TestSnapshotNotDeferredWithoutLoad(t *testing.T) {
	s := &snapshotter{log: slog.New(slog.NewTextHandler(io.Discard, nil)), deferred: time.Now()}
	if s.deferDuringLoad(false, time.Now()) || !s.deferred.IsZero() {
		t.Fatal("deferred, or still waiting, without a load")
	}
}

// A due snapshot also waits while the outbox holds outboxBacklog events
// or more, and not once the publisher has drained it.
func TestSnapshotWaitsForTheOutbox(t *testing.T) {
	store := datatest.MustOpen(t)
	put := func(from, n int) {
		t.Helper()
		if err := store.Commit(func(tx *data.Tx) error {
			for i := from; i < from+n; i++ {
				if err := tx.PutEvent(data.Event{Seq: uint64(i + 1), Calendar: "c", Payload: []byte("{}")}); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	quiet := func() bool { return false }
	loading := loadOrBacklog(quiet, store)
	put(0, outboxBacklog-1)
	if loading() {
		t.Fatal("a load below outboxBacklog events waiting")
	}
	put(outboxBacklog-1, 1)
	if !loading() {
		t.Fatal("no load with outboxBacklog events waiting")
	}
	s := &snapshotter{log: slog.New(slog.NewTextHandler(io.Discard, nil)), loading: loading}
	if !s.deferDuringLoad(s.loading(), time.Now()) {
		t.Fatal("the snapshot did not wait for the outbox")
	}
	if err := store.Commit(func(tx *data.Tx) error {
		seqs := make([]uint64, outboxBacklog)
		for i := range seqs {
			seqs[i] = uint64(i + 1)
		}
		return tx.DeleteEvents(seqs)
	}); err != nil {
		t.Fatal(err)
	}
	if s.deferDuringLoad(s.loading(), time.Now()) {
		t.Fatal("the snapshot still waits with the outbox drained")
	}
}
