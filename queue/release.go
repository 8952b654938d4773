package queue

import (
	"context"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync/atomic"
	"time"
)

// MemoryRelease says when bookline gives the memory a bulk load needed back
// to the OS. A bulk load (an import, a catch-up after a start, a burst of
// traffic) grows the Go heap: large batches of decoded commands, the
// index's dirty pages of large commits, NATS's buffers of the messages in
// flight. When it ends most of that heap is garbage, but the runtime
// returns freed heap only down to about its next GC goal, which stays where
// the bulk load put it until a GC runs; with no work after the load, that
// is the runtime's forced GC two minutes later. So the anonymous memory of
// a process that just imported 1M commands stayed at ~700 MB for two
// minutes (docs/benchmarks.md). Once the writers, or the event publisher,
// went quiet after a bulk load, the node runs one GC and returns every free
// page (freeOSMemory): ~0.1-0.3 s of one core, once per bulk load. Not in
// the middle of one: a GC over the heap of a load in progress, and the
// pages it then faults in again, cost it seconds.
type MemoryRelease struct {
	// After is how many commands applied (or outcome events published)
	// since the last release make one worthwhile; 0 means
	// DefaultReleaseAfter, negative never.
	After int
	// Every is how often the node looks (default 1s). The end of a bulk
	// load is a look that finds the writers (or the publisher) idle, with
	// fewer than quietBelow commands applied (events published) since the
	// look before, after After or more.
	Every time.Duration
	// Release returns the memory (default freeOSMemory; tests).
	Release func()
}

// DefaultReleaseAfter: below 20,000 commands (a second or two of an import)
// the heap a load leaves is not worth a forced GC.
const DefaultReleaseAfter = 20_000

// quietBelow is the work per Every that counts as quiet: a trickle of
// requests after an import does not keep its memory from being released.
const quietBelow = 200

// freeOSMemory runs two GCs and returns every free page to the OS. The
// first GC only moves what sync.Pools hold to their victim caches (bbolt
// keeps a commit's dirty pages in one: 200 MB after large catch-up
// commits); the second, debug.FreeOSMemory's, frees them.
func freeOSMemory() {
	runtime.GC()
	debug.FreeOSMemory()
}

// memoryReleaser counts the work of the writers and of the event publisher
// and releases memory at the end of each bulk of it.
type memoryReleaser struct {
	cfg MemoryRelease
	log *slog.Logger
	// commands and events count what the writers applied and the event
	// publisher published.
	commands, events atomic.Uint64
	// writersIdle and eventsIdle tell whether the writers and the event
	// publisher wait for work (set by the node).
	writersIdle, eventsIdle func() bool
}

func newMemoryReleaser(cfg MemoryRelease, log *slog.Logger) *memoryReleaser {
	if cfg.After == 0 {
		cfg.After = DefaultReleaseAfter
	}
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	if cfg.Release == nil {
		cfg.Release = freeOSMemory
	}
	return &memoryReleaser{cfg: cfg, log: log.With("component", "memory")}
}

// run releases memory after every bulk of commands and every bulk of
// events, until ctx ends. The two are counted apart: after an import the
// event publisher often still works through the events of the import when
// the writers went quiet, and then each end is a release.
func (r *memoryReleaser) run(ctx context.Context) {
	if r.cfg.After < 0 {
		return
	}
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	type counter struct {
		what        string
		n           *atomic.Uint64
		idle        func() bool
		last, since uint64
	}
	idle := func(f func() bool) func() bool {
		if f == nil {
			return func() bool { return true }
		}
		return f
	}
	counters := []*counter{{what: "commands", n: &r.commands, idle: idle(r.writersIdle)},
		{what: "events", n: &r.events, idle: idle(r.eventsIdle)}}
	for _, c := range counters {
		c.last = c.n.Load()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, c := range counters {
			now := c.n.Load()
			delta := now - c.last
			c.last, c.since = now, c.since+delta
			// Idle now and quiet since the last look: a stall of the
			// writers (a slow sync, a long commit) or of the publisher
			// in the middle of a load is neither.
			if c.since >= uint64(r.cfg.After) && delta < quietBelow && c.idle() {
				r.release(c.what, c.since)
				for _, o := range counters {
					if o != c && o.since < uint64(r.cfg.After) {
						o.since = 0 // covered by this release
					}
				}
				c.since = 0
			}
		}
	}
}

func (r *memoryReleaser) release(what string, n uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	began := time.Now()
	r.cfg.Release()
	took := time.Since(began)
	runtime.ReadMemStats(&after)
	const mb = 1 << 20
	r.log.Info("bulk load done: memory returned to the OS", "after", what, "count", n,
		"heap_in_use_mb", after.HeapInuse/mb, "returned_mb", int64(after.HeapReleased-before.HeapReleased)/mb,
		"took", took.Round(time.Millisecond))
}
