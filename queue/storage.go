package queue

import (
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Storage faults. A full disk (or quota) makes writes fail where bookline
// writes: the index (bbolt) and, with the embedded server, NATS's store.
// Neither loses what it had acknowledged: bbolt rolls a failed commit
// back, and nats-server refuses the message it could not write without
// acknowledging it. What must not happen is that the process keeps looking
// healthy, or needs a restart once there is room again. So every write path
// that fails for storage reasons records it here: Node.Ready (and /readyz)
// reports it with what to do, Node.Submit refuses new commands at once
// while it lasts (503, instead of a publish that times out), and the metric
// counts it. Each path clears its own fault when it writes again: the
// partition writers and the event publisher retry with a backoff, and the
// embedded server's store is reloaded once there is room (natsstore.go).
//
// A failed fsync of the log is not such a fault: it stays fatal (see
// logSync), because a later successful write proves nothing about the
// pages the kernel may have dropped.

// Storage components, the label values of the storage metrics.
const (
	// StorageIndex is the bbolt index (index.db).
	StorageIndex = "index"
	// StorageNATS is the embedded NATS server's JetStream store.
	StorageNATS = "nats"
)

// storageFaults holds the write paths that fail for storage reasons now.
type storageFaults struct {
	// dataDir and storeDir are named in the advice of the faults;
	// storeDir is "" without an embedded server.
	dataDir, storeDir string
	// storeWatched says the embedded server's store is watched
	// (natsstore.go): its state is the fault of that store, and the
	// NATS errors the writers meet are only counted.
	storeWatched bool
	log          *slog.Logger
	// count, when set, is told of every storage write failure (metrics).
	count func(component string)

	n      atomic.Int32 // len(faults), read without the lock
	mu     sync.Mutex
	faults map[faultKey]storageFault
}

type faultKey struct{ source, component string }

// storeSource names the embedded server's store among the fault sources
// (natsstore.go).
const storeSource = "embedded NATS server"

type storageFault struct {
	err   error
	full  bool
	since time.Time
	// advice, when set, replaces the default advice (natsstore.go).
	advice string
}

func newStorageFaults(dataDir, storeDir string, log *slog.Logger, count func(string)) *storageFaults {
	return &storageFaults{dataDir: dataDir, storeDir: storeDir, log: log.With("component", "storage"), count: count,
		faults: map[faultKey]storageFault{}}
}

// storageProblem says whether err is a write failure for storage reasons,
// and whether the reason is a lack of space (ENOSPC, EDQUOT, or the
// embedded server refusing for lack of resources) rather than another I/O
// error (EIO, EROFS). The component is the index when the error carries the
// errno (bbolt's file writes) and NATS when it carries only its text
// (nats-server's answers over the wire).
func storageProblem(err error) (component string, full, ok bool) {
	if err == nil || errors.Is(err, errLogSyncFailed) {
		return "", false, false
	}
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return StorageIndex, true, true
	case errors.Is(err, syscall.EIO), errors.Is(err, syscall.EROFS):
		return StorageIndex, false, true
	}
	msg := err.Error()
	switch {
	case strings.Contains(msg, "no space left on device"), strings.Contains(msg, "disk quota exceeded"),
		strings.Contains(msg, "insufficient resources"), strings.Contains(msg, "insufficient storage resources"):
		return StorageNATS, true, true
	case strings.Contains(msg, "input/output error"), strings.Contains(msg, "read-only file system"):
		return StorageNATS, false, true
	}
	return "", false, false
}

// fail records err for source if it is a storage write failure (see
// storageProblem) and reports whether it was one. Every call counts in
// the metric; a new fault is logged once, with what to do.
func (s *storageFaults) fail(source string, err error) bool {
	component, full, ok := storageProblem(err)
	if !ok || s == nil {
		return false
	}
	if component == StorageNATS && s.storeWatched {
		s.counted(component)
		return true
	}
	s.set(source, component, err, full, "", true)
	return true
}

// counted counts a failed write of component without recording a fault.
func (s *storageFaults) counted(component string) {
	if s != nil && s.count != nil {
		s.count(component)
	}
}

// set records a fault. The metric counts it if every is set (each call is
// a failed write) or if the fault is new (a state found again and again,
// such as the store's health, counts once).
func (s *storageFaults) set(source, component string, err error, full bool, advice string, every bool) {
	if s == nil {
		return
	}
	k := faultKey{source, component}
	s.mu.Lock()
	old, had := s.faults[k]
	if (every || !had) && s.count != nil {
		s.count(component)
	}
	f := storageFault{err: err, full: full, since: time.Now(), advice: advice}
	if had {
		f.since = old.since
	}
	s.faults[k] = f
	s.n.Store(int32(len(s.faults)))
	s.mu.Unlock()
	if !had {
		s.log.Error(strings.ToUpper(s.kind(f))+": writes are refused until it clears", "source", source,
			"store", component, "err", err, "what_to_do", s.advice(k, f))
	}
}

// clear ends source's fault of component ("" ends all of source's).
func (s *storageFaults) clear(source, component string) {
	if s == nil || s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	var ended []faultKey
	var since []time.Time
	for k, f := range s.faults {
		if k.source == source && (component == "" || k.component == component) {
			ended, since = append(ended, k), append(since, f.since)
			delete(s.faults, k)
		}
	}
	s.n.Store(int32(len(s.faults)))
	s.mu.Unlock()
	for i, k := range ended {
		s.log.Info("storage writes work again", "source", k.source, "store", k.component,
			"failed_for", time.Since(since[i]).Round(time.Millisecond))
	}
}

// Err is nil when no write path fails for storage reasons, and otherwise
// says, per component, which fail, why, and what to do: "storage full: the
// index cannot be written: <error> (<sources>); <what to do>". Sources
// that fail the same way are named together.
func (s *storageFaults) Err() error {
	if s == nil || s.n.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	keys := make([]faultKey, 0, len(s.faults))
	for k := range s.faults {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].component != keys[j].component {
			return keys[i].component < keys[j].component
		}
		return keys[i].source < keys[j].source
	})
	var parts []string
	for i := 0; i < len(keys); {
		j := i
		for j < len(keys) && keys[j].component == keys[i].component {
			j++
		}
		parts = append(parts, s.describe(keys[i:j]))
		i = j
	}
	if len(parts) == 0 {
		return nil
	}
	return errors.New(strings.Join(parts, "; "))
}

// describe is Err's part for the faults of one component (keys). s.mu is
// held.
func (s *storageFaults) describe(keys []faultKey) string {
	var (
		errs    []string
		sources = map[string][]string{}
		full    bool
	)
	for _, k := range keys {
		f := s.faults[k]
		full = full || f.full
		e := f.err.Error()
		if _, seen := sources[e]; !seen {
			errs = append(errs, e)
		}
		if k.source != storeSource { // the store is what the sentence names
			sources[e] = append(sources[e], k.source)
		} else if sources[e] == nil {
			sources[e] = []string{}
		}
	}
	for i, e := range errs {
		if len(sources[e]) > 0 {
			errs[i] = e + " (" + strings.Join(sources[e], ", ") + ")"
		}
	}
	first := s.faults[keys[0]]
	first.full = full
	return s.kind(first) + ": " + s.what(keys[0]) + ": " + strings.Join(errs, "; ") + "; " + s.advice(keys[0], first)
}

// failing reports, per component, whether a write path of it fails now.
func (s *storageFaults) failing() map[string]bool {
	out := map[string]bool{StorageIndex: false, StorageNATS: false}
	if s == nil || s.n.Load() == 0 {
		return out
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k := range s.faults {
		out[k.component] = true
	}
	return out
}

func (s *storageFaults) kind(f storageFault) string {
	if f.full {
		return "storage full"
	}
	return "storage failing"
}

func (s *storageFaults) what(k faultKey) string {
	if k.component == StorageNATS {
		return "the embedded NATS store refuses writes"
	}
	return "the index cannot be written"
}

func (s *storageFaults) advice(k faultKey, f storageFault) string {
	switch {
	case f.advice != "":
		return f.advice
	case k.component == StorageNATS && s.storeDir != "":
		return "free space on the file system of " + s.storeDir + "; bookline reloads the store by itself once there is room"
	case k.component == StorageNATS:
		return "free space for the NATS servers' JetStream store, or raise its limits; writes are retried"
	case f.full:
		return "free space on the file system of " + s.dataDir + "; writes resume by themselves"
	}
	return "check the disk under " + s.dataDir + "; writes are retried"
}
