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
// minutes (docs/benchmarks.md). Once the writers and the event publisher
// went quiet after a bulk load, the node runs a GC and returns every free
// page (freeOSMemory): ~0.1-0.3 s of one core, once per bulk load. Not in
// the middle of one: a GC over the heap of a load in progress, and the
// pages it then faults in again, cost it seconds.
type MemoryRelease struct {
	// After is how many commands applied and outcome events published
	// since the last release make one worthwhile; 0 means
	// DefaultReleaseAfter, negative never.
	After int
	// Every is how often the node looks (default 1s; see run for what
	// ends a bulk load).
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

// run releases memory after every bulk load until ctx ends: once the
// commands applied and the events published since the last release reach
// After, at the first look that finds the writers and the event publisher
// idle and fewer than quietBelow of either since the look before. Idle and
// quiet both: a stall of the writers (a slow sync, a long commit) in the
// middle of a load is not idle, and the publisher keeping pace with an
// import waits for work between the writers' commits, idle but not quiet.
func (r *memoryReleaser) run(ctx context.Context) {
	if r.cfg.After < 0 {
		return
	}
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	idle := func(f func() bool) bool { return f == nil || f() }
	lastC, lastE := r.commands.Load(), r.events.Load()
	var sinceC, sinceE uint64
	var settle time.Time // of the second release (see below)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c, e := r.commands.Load(), r.events.Load()
		dC, dE := c-lastC, e-lastE
		lastC, lastE = c, e
		sinceC, sinceE = sinceC+dC, sinceE+dE
		quiet := dC+dE < quietBelow && idle(r.writersIdle) && idle(r.eventsIdle)
		switch {
		case sinceC+sinceE >= uint64(r.cfg.After) && quiet:
			r.release("bulk load done", sinceC, sinceE)
			sinceC, sinceE = 0, 0
			// What the load left in the embedded server's dedupe
			// windows (the ids of the last 30 s of commands and 2 min
			// of events: 100-200 MB after 1M commands) is freed only
			// when they pass; a second release then returns it, instead
			// of the scavenger after the next GC.
			settle = time.Now().Add(max(DuplicateWindow, EventDuplicateWindow) + 10*time.Second)
		case !settle.IsZero() && time.Now().After(settle) && quiet:
			settle = time.Time{}
			r.release("dedupe windows of the bulk load passed", sinceC, sinceE)
		}
	}
}

func (r *memoryReleaser) release(why string, commands, events uint64) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	began := time.Now()
	r.cfg.Release()
	took := time.Since(began)
	runtime.ReadMemStats(&after)
	const mb = 1 << 20
	r.log.Info(why+": memory returned to the OS", "commands", commands, "events", events,
		"heap_in_use_mb", after.HeapInuse/mb, "returned_mb", int64(after.HeapReleased-before.HeapReleased)/mb,
		"took", took.Round(time.Millisecond))
}
