package queue

import "time"

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

// deferDuringLoad reports whether a due snapshot waits for the bulk load
// under way (loading) to end, and notes when it started waiting.
func (s *snapshotter) deferDuringLoad(loading bool, now time.Time) bool {
	if !loading {
		s.deferred = time.Time{}
		return false
	}
	if s.deferred.IsZero() {
		s.deferred = now
		s.log.Info("snapshot due: waiting for the bulk load to end", "at_most", maxSnapshotDefer)
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
