package queue

import (
	"time"

	"github.com/bookline/bookline/data"
)

// A snapshot's read transaction pins every page the writers free while it
// is written (bbolt reuses a freed page only once no reader can see it),
// and a compacted snapshot of 1M bookings takes seconds: taken in the
// middle of a 1M-row import it left the index file 150 bytes per booking
// larger for good (478 against 329 bytes per booking without it,
// docs/benchmarks.md). A snapshot that falls due during a bulk load
// (bulkLoadCommands applied in one check's interval) waits for its end,
// at most maxSnapshotDefer, so that steady heavy traffic still gets one.
const (
	snapshotCheck    = 5 * time.Second
	bulkLoadCommands = 10_000
	maxSnapshotDefer = 10 * time.Minute
)

// releaseAfterSnapshot is the snapshot size from which its memory is
// given back to the OS once it is uploaded: a snapshot of 1M bookings left
// the process 230 MB of anonymous memory larger until the runtime's forced
// GC (docs/benchmarks.md).
const releaseAfterSnapshot = 16 << 20

// outboxBacklog is how many outcome events waiting in the outbox also
// make a due snapshot wait, within the same bound: the publisher is still
// catching up with a load (for minutes after a large one), and a snapshot
// taken then carries every waiting event into every restore and join
// (after 9M commands, 5.9M events were 864 MB of a 1.1 GB snapshot,
// docs/benchmarks.md).
const outboxBacklog = bulkLoadCommands

// loadOrBacklog is the snapshotter's test for a bulk load: rate (sampled
// at every call, so that it measures the last interval only) says so, or
// the outbox holds outboxBacklog events or more.
func loadOrBacklog(rate func() bool, store *data.Store) func() bool {
	return func() bool {
		if rate() {
			return true
		}
		behind := false
		_ = store.View(func(tx *data.Tx) error { behind = tx.EventsAtLeast(outboxBacklog); return nil })
		return behind
	}
}

// deferDuringLoad reports whether a due snapshot waits for the bulk load
// under way (loading) to end, and notes when it started waiting.
func (s *snapshotter) deferDuringLoad(loading bool, now time.Time) bool {
	if !loading {
		s.deferred = time.Time{}
		return false
	}
	if s.deferred.IsZero() {
		s.deferred = now
		s.log.Info("snapshot due: waiting for the bulk load to end and the outbox to drain", "at_most", maxSnapshotDefer)
	}
	return now.Sub(s.deferred) < maxSnapshotDefer
}

// commandRate turns a counter of applied commands into a test of whether
// more than bulkLoadCommands were applied since the previous call.
func commandRate(applied func() uint64) func() bool {
	last := applied()
	return func() bool {
		now := applied()
		busy := now-last >= bulkLoadCommands
		last = now
		return busy
	}
}
