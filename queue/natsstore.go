package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// The embedded server's store on a full disk (nats-server v2.15.2, one
// server, not clustered):
//
//   - A stream whose file store fails to write a message (ENOSPC) neither
//     stores nor acknowledges it and keeps the error for good (filestore.go
//     setWriteErr, stream.go setWriteErrLocked): every later publish to the
//     stream fails unanswered, also once there is room again. Only
//     reopening the stream clears it. (handleOutOfSpace, which disables
//     JetStream for the whole server, runs only in clustered mode.)
//   - JetStream's store limit, unless set (--nats-max-store), is sized once
//     at start: 75% of the space then free plus 75% of what the streams
//     already hold (jetstream.go dynJetStreamConfig, finalizeDynamicMaxStore). Once
//     the streams hold more than that, every publish is refused with
//     "insufficient resources" (10023), whatever is freed afterwards.
//
// storeWatch finds both (the server's health check reports a stream's
// write error; its JetStream statistics the store's use and limit), records
// them as storage faults, and once the disk has room again reloads
// JetStream in place: ShutdownJetStream and EnableJetStream with the same
// configuration, which reopens every stream from its files (a message whose
// write failed was never acknowledged and is dropped with its torn record)
// and sizes a dynamic limit again from the space free now. The writers are
// stopped around it and start over from the index, after reconcileIndex
// has checked the reopened command stream against the index as at start.

// Intervals and sizes of the store watch.
const (
	// storeCheckEvery is how often the store's health is read (a readdir
	// of the store and a few lookups).
	storeCheckEvery = 500 * time.Millisecond
	// spaceProbeBytes is written (and removed) to see that the store's
	// file system takes writes again before the store is reloaded; twice
	// that must be free by statfs first.
	spaceProbeBytes = 1 << 20
	// storeHeadroom is the room a dynamic store limit must leave above
	// what the streams hold before a reload for it is worth it.
	storeHeadroom = 4 << 20
	// reloadBackoffMax bounds the wait between reloads that did not help.
	reloadBackoffMax = 16 * time.Second
)

type storeWatch struct {
	n    *Node
	ns   *server.Server
	opts *server.Options
	// maxStoreSet says the store limit was given (--nats-max-store),
	// not sized from the free space at start.
	maxStoreSet bool
	storeDir    string
	log         *slog.Logger

	stop, done chan struct{}
	nextReload time.Time
	backoff    time.Duration
}

// storeProblem is what is wrong with the store now.
type storeProblem struct {
	err    error
	full   bool
	advice string
	// reloadWhenRoom says a reload helps once the disk has room; with
	// limit set, only once the space free gives a dynamic limit
	// storeHeadroom above used, what the streams hold.
	reloadWhenRoom bool
	limit          bool
	used           int64
}

func newStoreWatch(n *Node, ns *server.Server, opts *server.Options, maxStoreSet bool, storeDir string) *storeWatch {
	return &storeWatch{n: n, ns: ns, opts: opts, maxStoreSet: maxStoreSet, storeDir: storeDir,
		log: n.log.With("component", "nats-store"), stop: make(chan struct{}), done: make(chan struct{}), backoff: time.Second}
}

func (w *storeWatch) run() {
	defer close(w.done)
	t := time.NewTicker(storeCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
		}
		w.checkOnce()
	}
}

func (w *storeWatch) close() {
	close(w.stop)
	<-w.done
}

// checkOnce records the store's problem, if any, and reloads the store
// when that can clear it.
func (w *storeWatch) checkOnce() {
	p := w.problem()
	if p == nil {
		w.n.storage.clear(storeSource, StorageNATS)
		w.backoff = time.Second
		return
	}
	w.n.storage.set(storeSource, StorageNATS, p.err, p.full, p.advice, false)
	if !p.reloadWhenRoom || time.Now().Before(w.nextReload) || !w.roomFor(p) {
		return
	}
	w.nextReload = time.Now().Add(w.backoff)
	w.backoff = min(2*w.backoff, reloadBackoffMax)
	w.log.Warn("there is room on the disk again: reloading the embedded NATS store", "problem", p.err)
	began := time.Now()
	if err := w.n.reloadJetStream(w.ns, w.opts); err != nil {
		w.log.Error("reloading the embedded NATS store failed; trying again later", "err", err)
		return
	}
	w.log.Info("embedded NATS store reloaded", "took", time.Since(began).Round(time.Millisecond))
	if w.problem() == nil {
		w.n.storage.clear(storeSource, StorageNATS)
	}
}

// problem reads the store's health: a stream that cannot write, JetStream
// disabled, or the streams over the store limit (nil: none of these).
func (w *storeWatch) problem() *storeProblem {
	if !w.ns.JetStreamEnabled() {
		// nats-server disables it after a permission error, and in
		// clustered mode when out of space; a reload may bring it back.
		return &storeProblem{err: errors.New("JetStream is disabled"), reloadWhenRoom: true}
	}
	h := w.ns.Healthz(&server.HealthzOptions{Details: true})
	var werrs []string
	for _, e := range h.Errors {
		if e.Type == server.HealthzErrorStream && strings.Contains(e.Error, "write error") {
			werrs = append(werrs, e.Error)
		}
	}
	if len(werrs) > 0 {
		err := errors.New(strings.Join(werrs, "; "))
		_, full, _ := storageProblem(err)
		return &storeProblem{err: err, full: full, reloadWhenRoom: true}
	}
	z, err := w.ns.Jsz(nil)
	if err != nil || z.Config.MaxStore <= 0 || int64(z.Store) <= z.Config.MaxStore {
		return nil
	}
	return w.limitProblem(int64(z.Store), z.Config.MaxStore)
}

// limitProblem says that the streams hold used bytes, over the store
// limit max, and what to do about it.
func (w *storeWatch) limitProblem(used, max int64) *storeProblem {
	err := fmt.Errorf("the streams hold %s, over the store limit of %s", sizeString(used), sizeString(max))
	if w.maxStoreSet {
		return &storeProblem{err: err, full: true, limit: true, used: used,
			advice: "raise --nats-max-store and restart bookline (or free space inside the streams)"}
	}
	return &storeProblem{err: fmt.Errorf("%w (sized at start from the disk space then free)", err), full: true, limit: true, used: used,
		reloadWhenRoom: true,
		advice: "free space on the file system of " + w.storeDir + " (bookline then sizes the limit again by itself), " +
			"or set --nats-max-store"}
}

// roomFor reports whether the disk has room again for what p needs: a
// write of spaceProbeBytes, and for a dynamic store limit enough free
// space that the limit sized from it leaves storeHeadroom.
func (w *storeWatch) roomFor(p *storeProblem) bool {
	var st syscall.Statfs_t
	if err := syscall.Statfs(w.storeDir, &st); err != nil {
		return false
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free < 2*spaceProbeBytes {
		return false
	}
	// As nats-server sizes it: 75% of the free space plus 75% of what
	// the streams hold.
	if p.limit && free/4*3+p.used/4*3 < p.used+storeHeadroom {
		return false
	}
	return probeWrite(w.storeDir) == nil
}

// probeWrite writes spaceProbeBytes to a file in dir and removes it.
func probeWrite(dir string) error {
	name := filepath.Join(dir, ".bookline-space-probe")
	f, err := os.OpenFile(name, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(make([]byte, spaceProbeBytes))
	return errors.Join(err, f.Close(), os.Remove(name))
}

// reloadJetStream reopens the embedded server's JetStream store from its
// files with the configuration it started with, the writers stopped
// meanwhile; it then checks the command stream against the index as at
// start (reconcileIndex) and starts the writers again, whatever happened.
func (n *Node) reloadJetStream(ns *server.Server, opts *server.Options) error {
	n.StopWriters()
	defer n.StartWriters()
	if err := ns.ShutdownJetStream(); err != nil {
		return fmt.Errorf("queue: stop JetStream: %w", err)
	}
	// As the server builds it at start (server.go, Start).
	cfg := &server.JetStreamConfig{
		StoreDir:     opts.StoreDir,
		SyncInterval: opts.SyncInterval,
		SyncAlways:   opts.SyncAlways,
		Strict:       !opts.NoJetStreamStrict,
		MaxMemory:    opts.JetStreamMaxMemory,
		MaxStore:     opts.JetStreamMaxStore,
		Domain:       opts.JetStreamDomain,
		CompressOK:   true,
		UniqueTag:    opts.JetStreamUniqueTag,
	}
	if err := ns.EnableJetStream(cfg); err != nil {
		return fmt.Errorf("queue: start JetStream again: %w", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for wait := 10 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		_, err := n.js.Stream(ctx, StreamName)
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("queue: command stream after reloading JetStream: %w", err)
		case <-time.After(wait):
		}
	}
	for _, l := range []*logSync{n.cmdSync, n.evtSync, n.snapSync} {
		if l != nil {
			l.reopen()
		}
	}
	_, refused, err := reconcileIndex(ctx, n.stream, n.store, len(n.parts), n.log, n.history)
	if err != nil {
		return fmt.Errorf("queue: check the index against the reloaded command stream: %w", err)
	}
	for p, e := range refused {
		n.parts[p].halt(e)
	}
	return nil
}

// storeStartProblem is the error StartNode returns when the embedded
// server refused, or its store could not be written, with what to do.
func storeStartProblem(err error, dataDir string, maxStoreSet bool) error {
	_, full, ok := storageProblem(err)
	if !ok || !full {
		return err
	}
	advice := "free space on the file system of " + dataDir
	if strings.Contains(err.Error(), "insufficient") && !maxStoreSet {
		advice += ", or set --nats-max-store (unset, the embedded NATS server sizes its store limit at start " +
			"from the disk space then free)"
	} else if strings.Contains(err.Error(), "insufficient") {
		advice += ", or raise --nats-max-store"
	}
	return fmt.Errorf("%w: storage full: %s", err, advice)
}

// sizeString prints a byte count in MiB with one decimal, or in bytes
// below 1 MiB.
func sizeString(n int64) string {
	if n < 1<<20 {
		return strconv.FormatInt(n, 10) + " B"
	}
	return strconv.FormatFloat(float64(n)/(1<<20), 'f', 1, 64) + " MiB"
}
