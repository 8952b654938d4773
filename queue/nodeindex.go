package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/actor/zones"
	"github.com/bookline/bookline/data"
)

// The node's index at start: opened (or converted from another layout),
// restored from a snapshot when empty or left behind by a trimmed stream,
// and reconciled with the stream before anything is answered.

// openIndex opens the index, converting one of another layout.
func (n *Node) openIndex(cfg NodeConfig) (err error) {
	// The index is never fsynced per commit. The command stream is the
	// durable record: with the embedded server its new messages are
	// synced once per group commit before anything decided from them is
	// answered or shown (logsync.go, data.Store.CommitDurable); in cluster
	// mode the servers sync and replicate every message before they
	// acknowledge it (queue.CheckServers, at start), so it is durable
	// before a writer even reads it. Either way the index can be rebuilt
	// from the stream, and decisions are a function of the stream, so a
	// rebuilt index decides and answers as the lost one did. The index
	// survives kill -9 through the page cache; after a power loss it may
	// be torn, and it is discarded and rebuilt from the stream (from the
	// newest snapshot, then the stream; data.Options.NoSync). In cluster
	// mode another instance takes the partitions over meanwhile.
	n.store, err = data.OpenWith(IndexFile(cfg.DataDir), indexOptions)
	if errors.Is(err, data.ErrSchema) {
		n.store, err = convertIndex(IndexFile(cfg.DataDir), err, cfg.Logger)
	}
	if err != nil {
		return err
	}
	if why := n.store.Discarded(); why != "" {
		cfg.Logger.Error("INDEX DISCARDED: rebuilding it from the stream before serving", "reason", why,
			"moved_to", IndexFile(cfg.DataDir)+".discarded")
	}
	return nil
}

// recoverIndex brings the index to the stream before anything is
// answered: a snapshot restored into an empty index (or one the trimmed
// stream left behind), then reconciled with the stream, whose history
// must still be the one the index applied. It returns the partitions
// refused for a history that differs.
func (n *Node) recoverIndex(cfg NodeConfig, stream jetstream.Stream, obs jetstream.ObjectStore, fresh bool) (refused map[int]*HistoryMismatchError, err error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.snaps = &snapshotter{n: n, cfg: cfg.Snapshots, obs: obs, dir: cfg.DataDir, log: cfg.Logger.With("component", "snapshots"),
		taken: cfg.SnapshotTaken, busy: make(chan struct{}, 1)}
	// Copies, and compaction scratch files, left by a snapshot that a
	// crash interrupted.
	for _, pattern := range []string{".snapshot-*", ".compact-*"} {
		stale, _ := filepath.Glob(IndexFile(cfg.DataDir) + pattern)
		for _, f := range stale {
			_ = os.Remove(f)
		}
	}
	began := time.Now()
	// A bucket created just now holds no snapshot: no need to list it
	// (on a JetStream cluster under load, listing a new bucket can take
	// a good part of the start-up time).
	if err = n.restoreIfEmpty(cfg, !fresh); err != nil {
		return nil, err
	}
	if time.Since(began) > time.Second {
		// A restore takes as long as the snapshot is large: what follows
		// gets its own time.
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
	}
	if _, refused, err = reconcileIndex(ctx, stream, n.store, cfg.Partitions, cfg.Logger, n.history); err != nil {
		if !errors.Is(err, ErrHistoryMissing) {
			return nil, err
		}
		// The stream was trimmed past what this index holds (it was
		// stopped, or cut off, for longer than the stream keeps): a
		// snapshot may cover what is gone.
		if err = n.restoreBehind(ctx, cfg, err); err != nil {
			return nil, err
		}
		ctx, cancel = context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, refused, err = reconcileIndex(ctx, stream, n.store, cfg.Partitions, cfg.Logger, n.history); err != nil {
			return nil, err
		}
	}
	// After reconcileIndex, whose refusal of a history already lost
	// names the missing range.
	if err = checkStreamBounds(stream.CachedInfo().Config, cfg.Snapshots); err != nil {
		return nil, err
	}
	if err = noteTzdata(n.store, cfg.DataDir, cfg.Logger); err != nil {
		return nil, err
	}
	return refused, nil
}

// indexOptions opens the index wherever the node opens it: never
// fsynced per commit (see StartNode).
var indexOptions = data.Options{NoSync: true}

// convertIndex replaces an index another version laid out (why says
// how): one of the layout before this one is migrated record by record
// (a trimmed stream no longer holds the history to rebuild it from);
// any other is left empty, to be rebuilt from a snapshot of this layout
// and the stream's tail, or the whole stream. The old file is kept as
// index.db.old-schema either way, for a downgrade.
func convertIndex(path string, why error, log *slog.Logger) (*data.Store, error) {
	if v, err := data.IndexSchema(path); err == nil && v == "4" {
		log.Error("INDEX LAYOUT CHANGED: migrating the index to this version's layout before serving",
			"reason", why.Error(), "kept_as", path+".old-schema")
		began := time.Now()
		tmp := path + ".migrating"
		if err := data.RemoveIndex(tmp); err != nil {
			return nil, err
		}
		// The files are data's, the conversion of each request record's
		// reply the actor's: actor itself opens no files.
		if err := data.Migrate(path, tmp, actor.MigrateRecord); err != nil {
			return nil, fmt.Errorf("queue: migrate the index: %w", err)
		}
		if err := data.SetAside(path, ".old-schema"); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, path); err != nil {
			return nil, err
		}
		if err := data.SyncDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
		log.Info("index migrated", "took", time.Since(began).Round(time.Millisecond))
		return data.OpenWith(path, indexOptions)
	}
	log.Error("INDEX LAYOUT CHANGED: rebuilding the index from the stream before serving",
		"reason", why.Error(), "kept_as", path+".old-schema")
	if err := data.SetAside(path, ".old-schema"); err != nil {
		return nil, err
	}
	return data.OpenWith(path, indexOptions)
}

// restoreIfEmpty replaces an empty index (new, or discarded after a power
// loss) with the newest snapshot the command stream can continue, so that
// the writers apply only the stream's tail after it. Without a usable
// snapshot the index stays empty and is rebuilt from the whole stream.
func (n *Node) restoreIfEmpty(cfg NodeConfig, look bool) error {
	if !look {
		return nil
	}
	empty := false
	if err := n.store.View(func(tx *data.Tx) error {
		empty = len(tx.Applied()) == 0 && tx.StreamIdentity() == "" && len(tx.CalendarIDs()) == 0
		return nil
	}); err != nil || !empty {
		return err
	}
	list := n.snapshotsAtStart()
	if len(list) == 0 {
		return nil
	}
	path := IndexFile(cfg.DataDir)
	if err := n.store.Close(); err != nil {
		return err
	}
	n.store = nil
	if err := data.RemoveIndex(path); err != nil {
		return err
	}
	began := time.Now()
	// Restoring a large index takes longer than the start-up timeout's
	// share; it has its own.
	rctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	si, ok, err := restoreNewest(rctx, n.js, path, n.log, func(SnapshotInfo) bool { return true }, n.history)
	if err != nil {
		return fmt.Errorf("queue: restore a snapshot: %w", err)
	}
	if ok {
		n.log.Info("index restored from a snapshot; applying the stream after it", "snapshot", si.Name, "bytes", si.Size,
			"stream_seq", si.StreamLast, "took", time.Since(began).Round(time.Millisecond))
	} else {
		n.log.Error("NO USABLE SNAPSHOT: rebuilding the index from the whole command stream", "snapshots", len(list))
	}
	if n.store, err = data.OpenWith(path, indexOptions); err != nil || !ok {
		return err
	}
	return n.store.Commit(func(tx *data.Tx) error { return tx.AdoptRestored(si.Horizon) })
}

// startSnapshotWait is how long a start with an empty index asks for the
// snapshots before it rebuilds the index from the stream instead.
const startSnapshotWait = time.Minute

// snapshotsAtStart lists the snapshots an empty index could be restored
// from. Right after an outage of the NATS servers the object store may not
// answer for a while (its stream elects a leader like every other): it is
// asked again, each time for up to 10 s, for startSnapshotWait. If it still
// does not answer the index is rebuilt from the command stream, which is
// slower but needs nothing else, and a trimmed stream is found out by the
// history check after it (restoreBehind). Giving up the start instead made
// an instance that restarted in such a moment exit.
func (n *Node) snapshotsAtStart() []SnapshotInfo {
	deadline := time.Now().Add(startSnapshotWait)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		list, err := listSnapshots(ctx, n.snaps.obs)
		cancel()
		if err == nil {
			return list
		}
		if time.Now().After(deadline) {
			n.log.Error("SNAPSHOTS NOT READABLE AT START: rebuilding the index from the command stream instead", "err", err,
				"waited", startSnapshotWait)
			return nil
		}
		n.log.Warn("listing the snapshots at start failed; asking again", "err", err)
		time.Sleep(time.Second) // the object store's own recovery: nothing to poll but it
	}
}

// restoreBehind replaces an index whose history the command stream no
// longer has (gap) with the newest snapshot the stream can continue; the
// old index is kept as index.db.behind. Without such a snapshot it
// returns gap and leaves the index alone.
func (n *Node) restoreBehind(ctx context.Context, cfg NodeConfig, gap error) error {
	list, err := listSnapshots(ctx, n.snaps.obs)
	if err != nil {
		return errors.Join(gap, err)
	}
	stream, err := n.stream.Info(ctx)
	if err != nil {
		return errors.Join(gap, err)
	}
	usable := false
	for _, si := range list {
		if why, mismatch, err := restoreCandidate(ctx, n.stream, stream, si); err == nil && why == "" && mismatch == nil {
			usable = true
		}
	}
	if !usable {
		return gap
	}
	path := IndexFile(cfg.DataDir)
	n.log.Error("INDEX BEHIND THE TRIMMED COMMAND STREAM: restoring the newest snapshot instead (the old index is kept)",
		"reason", gap.Error(), "kept_as", path+".behind")
	if err := n.store.Close(); err != nil {
		return err
	}
	n.store = nil
	if err := data.SetAside(path, ".behind"); err != nil {
		return err
	}
	if n.store, err = data.OpenWith(path, indexOptions); err != nil {
		return err
	}
	return n.restoreIfEmpty(cfg, true)
}

// noteTzdata records in the index that this build's time zone data decides
// from now on, and reports loudly when the index was (also) decided with
// other data: decisions about calendars whose zone rules differ between the
// releases may then differ from what a replay by this build gives.
func noteTzdata(store *data.Store, dataDir string, log *slog.Logger) error {
	var versions string
	if err := store.Commit(func(tx *data.Tx) (err error) {
		versions, err = tx.NoteTzdata(zones.Version)
		return err
	}); err != nil {
		return fmt.Errorf("queue: record the time zone data: %w", err)
	}
	if versions == zones.Version {
		return nil
	}
	log.Error("INDEX DECIDED WITH OTHER TIME ZONE DATA: decisions in this index were made with time zone rules "+
		"(index_tzdata) other than this build's (build_tzdata); for calendars whose zones changed between those "+
		"releases they may differ from a replay of the log, and bookline verify reports the index as different. "+
		"To rebuild it from the log with this build's rules: stop bookline, move "+IndexFile(dataDir)+" aside and "+
		"start again (the index is rebuilt from the stream before it serves), or build a new one with bookline replay",
		"index_tzdata", versions, "build_tzdata", zones.Version)
	return nil
}
