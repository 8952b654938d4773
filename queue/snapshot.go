package queue

import (
	"bufio"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/bookline/bookline/actor"
	"github.com/bookline/bookline/data"
)

// Snapshots of the index go to a JetStream object store on the same
// servers as the streams (same credentials, same replicas). A new instance,
// an index discarded after a power loss, `bookline replay --from-snapshot`
// and `bookline verify` on a trimmed stream start from the newest snapshot
// the stream can continue and apply only the stream's tail after it. Once
// snapshots are taken, the command stream may be trimmed below the oldest
// snapshot kept (trimStream).

// SnapshotBucket is the object store bucket of index snapshots.
const SnapshotBucket = "BOOKLINE_SNAPSHOTS"

// snapshotMetaKey is the object metadata key holding a SnapshotInfo (JSON).
const snapshotMetaKey = "bookline-snapshot"

// A snapshot is stored as parts of at most snapshotPart bytes (objects
// <name>.part-NNNNN) and, once they are all stored, a manifest object
// <name> that carries the description: a snapshot is listed only when it
// is complete. nats.go publishes an object's chunks without waiting, and
// the server refuses publishes to a stream whose ingest queue holds more
// than 128 MiB (429 too many requests): one part at a time stays below.
// Chunks are larger than the default 128 KiB (fewer messages), below the
// servers' 1 MiB payload limit.
const (
	snapshotChunk = 512 << 10
	snapshotPart  = 32 << 20
)

func partName(name string, i int) string { return fmt.Sprintf("%s.part-%05d", name, i) }

// orphanAge is how old parts without a manifest must be before prune
// deletes them: younger ones may belong to an upload in progress.
const orphanAge = time.Hour

// DefaultSnapshotKeep is how many snapshots are kept by default.
const DefaultSnapshotKeep = 3

// SnapshotConfig says when snapshots are taken and how many are kept.
type SnapshotConfig struct {
	// Every takes a snapshot once the command stream has this many more
	// messages than the newest snapshot covers (0: not by count).
	Every uint64
	// Interval takes a snapshot once the newest one is this old (0: not
	// by age). Snapshots are on when Every or Interval is set.
	Interval time.Duration
	// Keep is how many of the newest snapshots are kept (default
	// DefaultSnapshotKeep); older ones are deleted after each snapshot.
	Keep int
	// StreamMaxAge and StreamMaxBytes bound the command stream (0: keep
	// everything). Messages are removed only below what the oldest kept
	// snapshot covers, so they need snapshots.
	StreamMaxAge   time.Duration
	StreamMaxBytes int64
	// Uncompacted copies the index file page by page (bbolt's WriteTo)
	// instead of writing a compacted copy of its live keys
	// (data.Store.WriteCompactSnapshot): faster to take, as large as the
	// file, free pages of past churn included.
	Uncompacted bool
	// TrimGrace keeps the commands stored this recently even when a
	// snapshot covers them (default DefaultTrimGrace): in cluster mode
	// the instances that do not own a partition follow it a few seconds
	// behind, and must still find what they have not applied yet.
	TrimGrace time.Duration
}

// DefaultTrimGrace is SnapshotConfig.TrimGrace's default: several follow
// intervals.
const DefaultTrimGrace = time.Minute

func (c SnapshotConfig) trimGrace() time.Duration {
	if c.TrimGrace <= 0 {
		return DefaultTrimGrace
	}
	return c.TrimGrace
}

// On reports whether periodic snapshots are configured.
func (c SnapshotConfig) On() bool { return c.Every > 0 || c.Interval > 0 }

// trims reports whether the command stream is to be bounded.
func (c SnapshotConfig) trims() bool { return c.StreamMaxAge > 0 || c.StreamMaxBytes > 0 }

func (c SnapshotConfig) check() error {
	switch {
	case c.Keep < 0:
		return fmt.Errorf("queue: snapshots to keep must be at least 1, got %d", c.Keep)
	case c.StreamMaxAge < 0 || c.StreamMaxBytes < 0:
		return errors.New("queue: stream bounds must not be negative")
	case c.trims() && !c.On():
		return errors.New("queue: bounding the command stream (max age or size) needs snapshots " +
			"(an interval or a command count): without one, a trimmed stream could not rebuild an index")
	}
	return nil
}

func (c SnapshotConfig) keep() int {
	if c.Keep <= 0 {
		return DefaultSnapshotKeep
	}
	return c.Keep
}

// SnapshotInfo describes one stored snapshot (data.SnapshotInfo).
type SnapshotInfo = data.SnapshotInfo

// snapshotFloor is the lowest stream sequence a restore of si needs: every
// partition's history through its horizon is in the snapshot.
func snapshotFloor(si SnapshotInfo) uint64 {
	f := uint64(0)
	for p := 0; p < si.Partitions; p++ {
		need := max(si.Applied[p], si.Horizon[p]) + 1
		if f == 0 || need < f {
			f = need
		}
	}
	return max(f, 1)
}

func snapshotName(at time.Time) string {
	return "index-" + at.UTC().Format("20060102T150405.000000000Z")
}

// ensureSnapshotStore opens the snapshot bucket, creating it if needed;
// created says it did (so it holds no snapshot).
func ensureSnapshotStore(ctx context.Context, js jetstream.JetStream, rp replicaPolicy) (obs jetstream.ObjectStore, created bool, err error) {
	return ensureObjectStore(ctx, js, jetstream.ObjectStoreConfig{
		Bucket: SnapshotBucket, Description: "bookline index snapshots", Replicas: rp.want, Storage: jetstream.FileStorage,
	}, rp)
}

// ListSnapshots returns the stored snapshots, oldest first. No bucket is
// no snapshots.
func ListSnapshots(ctx context.Context, js jetstream.JetStream) ([]SnapshotInfo, error) {
	obs, err := js.ObjectStore(ctx, SnapshotBucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: snapshot bucket: %w", err)
	}
	return listSnapshots(ctx, obs)
}

func listSnapshots(ctx context.Context, obs jetstream.ObjectStore) ([]SnapshotInfo, error) {
	objs, err := listObjects(ctx, obs)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("queue: list snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, o := range objs {
		if o.Deleted || !strings.HasPrefix(o.Name, "index-") || strings.Contains(o.Name, ".part-") {
			continue
		}
		var si SnapshotInfo
		if err := json.Unmarshal([]byte(o.Metadata[snapshotMetaKey]), &si); err != nil {
			continue // not ours, or damaged: never chosen
		}
		si.Name = o.Name
		out = append(out, si)
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// listObjects lists the bucket's objects. Without a deadline nats.go gives
// the listing 5 s, which a server busy storing a large upload can exceed.
func listObjects(ctx context.Context, obs jetstream.ObjectStore) ([]*jetstream.ObjectInfo, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Minute)
		defer cancel()
	}
	return obs.List(ctx)
}

// snapshotter takes the node's snapshots, keeps the newest, and trims the
// command stream below the oldest one kept.
type snapshotter struct {
	n     *Node
	cfg   SnapshotConfig
	obs   jetstream.ObjectStore
	dir   string // where the copy is written before it is uploaded
	log   *slog.Logger
	taken func(SnapshotInfo, time.Duration)
	busy  chan struct{} // one snapshot at a time
	// sync, when set, makes what the object store stored so far durable
	// (embedded server with --sync always): called after each part, it
	// keeps the dirty pages an upload leaves small. A journal commit that
	// the command stream's own fdatasync forces would otherwise write
	// them all out first, stalling the bookings waiting for it.
	sync func() func() error
	// loading, when set, tells whether a bulk load is under way (see
	// deferDuringLoad); deferred is when the snapshot due was first put
	// off for one.
	loading  func() bool
	deferred time.Time
}

// run takes snapshots when they are due, until ctx ends.
func (s *snapshotter) run(ctx context.Context) {
	if !s.cfg.On() {
		return
	}
	if s.loading == nil && s.n.memory != nil {
		s.loading = loadOrBacklog(commandRate(s.n.memory.commands.Load), s.n.store)
	}
	tick := time.NewTicker(snapshotCheck)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// Sampled at every tick, due or not, so that it measures the
		// last interval only.
		loading := s.loading != nil && s.loading()
		due, err := s.due(ctx)
		if err != nil {
			s.log.Warn("snapshot check", "err", err)
			continue
		}
		if !due || s.deferDuringLoad(loading, time.Now()) {
			continue
		}
		s.deferred = time.Time{}
		if s.n.cluster != nil {
			// Other instances check too: a random pause and a second
			// look make two snapshots at once rare (and harmless).
			select {
			case <-ctx.Done():
				return
			case <-time.After(rand.N(3 * time.Second)):
			}
			if due, err = s.due(ctx); err != nil || !due {
				continue
			}
		}
		if _, err := s.take(ctx); err != nil && ctx.Err() == nil {
			s.log.Error("snapshot failed", "err", err)
		}
	}
}

// due reports whether the newest snapshot is older than the interval or
// the stream has grown by Every messages since it.
func (s *snapshotter) due(ctx context.Context) (bool, error) {
	if s.n.Ready() != nil {
		return false, nil // a snapshot of an index still catching up covers little
	}
	info, err := s.n.stream.Info(ctx)
	if err != nil {
		return false, err
	}
	list, err := listSnapshots(ctx, s.obs)
	if err != nil {
		return false, err
	}
	if len(list) == 0 {
		return info.State.LastSeq > 0, nil
	}
	newest := list[len(list)-1]
	if s.cfg.Every > 0 && info.State.LastSeq >= newest.StreamLast+s.cfg.Every {
		return true, nil
	}
	return s.cfg.Interval > 0 && time.Since(newest.TakenAt) >= s.cfg.Interval && info.State.LastSeq > newest.StreamLast, nil
}

// take writes a snapshot of the index, uploads it, deletes the ones past
// the keep count and trims the stream if that is configured.
func (s *snapshotter) take(ctx context.Context) (SnapshotInfo, error) {
	select {
	case s.busy <- struct{}{}:
		defer func() { <-s.busy }()
	case <-ctx.Done():
		return SnapshotInfo{}, ctx.Err()
	}
	began := time.Now()
	if s.n.cluster != nil {
		// This instance follows the partitions it does not own up to a
		// follow interval behind; bring every partition to the stream's
		// end first, so the snapshot covers as much as the owners decided.
		if err := s.n.catchUpAll(ctx); err != nil {
			return SnapshotInfo{}, err
		}
	}
	si, path, err := s.write(ctx)
	if path != "" {
		defer os.Remove(path)
	}
	if err != nil {
		return si, err
	}
	f, err := os.Open(path)
	if err != nil {
		return si, err
	}
	defer f.Close()
	// With a deadline, nats.go waits for the chunks' acknowledgements as
	// long as it allows; without one it gives each 5 s, which a large
	// upload to a busy server can exceed.
	pctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := s.upload(pctx, &si, f); err != nil {
		return si, fmt.Errorf("queue: upload snapshot: %w", err)
	}
	took := time.Since(began)
	s.log.Info("snapshot taken", "name", si.Name, "bytes", si.Size, "stream_seq", si.StreamLast, "took", took.Round(time.Millisecond))
	if s.taken != nil {
		s.taken(si, took)
	}
	if s.n.memory != nil && s.n.memory.cfg.After >= 0 && si.Size >= releaseAfterSnapshot {
		// The copy's buffers, the compression's and the upload's are
		// garbage now; returned at once, not when the runtime gets to it.
		s.n.memory.release("snapshot taken", 0, 0)
	}
	if err := s.prune(ctx); err != nil {
		return si, err
	}
	if s.cfg.trims() {
		if err := s.n.trimStream(ctx, s.obs, s.cfg); err != nil {
			return si, err
		}
	}
	return si, nil
}

// upload stores the copy in f as parts, then the manifest.
func (s *snapshotter) upload(ctx context.Context, si *SnapshotInfo, f *os.File) error {
	si.Parts = int((si.Stored + snapshotPart - 1) / snapshotPart)
	r := bufio.NewReaderSize(f, 1<<20)
	for i := 0; i < si.Parts; i++ {
		if _, err := s.obs.Put(ctx, jetstream.ObjectMeta{
			Name: partName(si.Name, i),
			Opts: &jetstream.ObjectMetaOptions{ChunkSize: snapshotChunk},
		}, io.LimitReader(r, snapshotPart)); err != nil {
			return err
		}
		if s.sync != nil {
			if err := s.sync()(); err != nil {
				return err
			}
		}
	}
	meta, err := json.Marshal(si)
	if err != nil {
		return err
	}
	_, err = s.obs.Put(ctx, jetstream.ObjectMeta{
		Name:        si.Name,
		Description: fmt.Sprintf("bookline index snapshot, stream seq %d, %d parts", si.StreamLast, si.Parts),
		Metadata:    map[string]string{snapshotMetaKey: string(meta)},
	}, strings.NewReader(""))
	return err
}

// write copies the index to a file and describes it, horizons included.
func (s *snapshotter) write(ctx context.Context) (SnapshotInfo, string, error) {
	f, err := os.CreateTemp(s.dir, "index.db.snapshot-*")
	if err != nil {
		return SnapshotInfo{}, "", err
	}
	path := f.Name()
	// Written out as it goes, for the same reason as the parts (sync).
	bw := bufio.NewWriterSize(&syncingWriter{f: f, every: snapshotPart}, 1<<20)
	// Compressed: an index's pages are mostly partly filled, and S2
	// shrinks them about five times at a few hundred MB/s per core, so
	// upload, storage and every restore move a fifth of the bytes. One
	// goroutine: the writers share these cores. S2's stream format
	// checksums each block (CRC-32C), so a damaged copy fails to read.
	w := s2.NewWriter(bw, s2.WriterConcurrency(1))
	// The stream's end is read before the copy: every message after the
	// copy's applied sequences and at or below it is either in the copy
	// or found by the horizon queries below.
	info, err := s.n.stream.Info(ctx)
	if err != nil {
		f.Close()
		return SnapshotInfo{}, path, err
	}
	at := time.Now()
	write := s.n.store.WriteCompactSnapshot
	if s.cfg.Uncompacted {
		write = s.n.store.WriteSnapshot
	}
	st, err := write(w)
	if err == nil {
		err = w.Close()
	}
	if err == nil {
		err = bw.Flush()
	}
	var stored int64
	if err == nil {
		stored, err = f.Seek(0, io.SeekCurrent)
	}
	if err == nil {
		err = f.Close()
	} else {
		f.Close()
	}
	if err != nil {
		return SnapshotInfo{}, path, fmt.Errorf("queue: write snapshot: %w", err)
	}
	si := SnapshotInfo{Name: snapshotName(at), TakenAt: at.UTC(), Instance: s.n.InstanceID(), StreamLast: info.State.LastSeq,
		Partitions: len(s.n.parts), SnapshotState: st, Compression: "s2", Stored: stored}
	if si.Horizon, err = horizons(ctx, s.n.stream, st, len(s.n.parts), info.State.LastSeq); err != nil {
		return si, path, err
	}
	if si.StreamLast > 0 {
		h, err := messageHash(ctx, s.n.stream, si.StreamLast)
		if err != nil {
			return si, path, err
		}
		si.StreamLastHash = h
	}
	return si, path, nil
}

// syncingWriter writes to f and fdatasyncs it after every `every` bytes.
type syncingWriter struct {
	f       *os.File
	every   int
	pending int
}

func (w *syncingWriter) Write(b []byte) (int, error) {
	n, err := w.f.Write(b)
	if w.pending += n; err == nil && w.pending >= w.every {
		w.pending = 0
		err = fdatasync(w.f)
	}
	return n, err
}

// horizons finds, for each partition, the last stream sequence through
// which it has no message after its applied one: the sequence before its
// next message, or last when it has none up to there.
func horizons(ctx context.Context, stream jetstream.Stream, st data.SnapshotState, partitions int, last uint64) (map[int]uint64, error) {
	out := map[int]uint64{}
	for p := 0; p < partitions; p++ {
		covered := max(st.Applied[p], st.Horizon[p])
		h := last
		m, err := stream.GetMsg(ctx, covered+1, jetstream.WithGetMsgSubject(partitionFilter(p)))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
		case err != nil:
			return nil, fmt.Errorf("queue: partition %d's next message: %w", p, err)
		default:
			h = min(h, m.Sequence-1)
		}
		out[p] = max(h, covered)
	}
	return out, nil
}

// messageHash is the hex actor.MessageHash of the stream's message at seq
// ("" if there is none).
func messageHash(ctx context.Context, stream jetstream.Stream, seq uint64) (string, error) {
	m, err := stream.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	_, cal, _ := parseStoredSubject(m.Subject)
	return hex.EncodeToString(actor.MessageHash(actor.Input{Seq: seq, At: m.Time, SubjectCalendar: cal, Data: m.Data})), nil
}

// prune deletes all but the newest snapshots (manifest first, so that a
// half-deleted snapshot is never listed), and parts no manifest names that
// are older than orphanAge (left by an upload that did not finish).
func (s *snapshotter) prune(ctx context.Context) error {
	list, err := listSnapshots(ctx, s.obs)
	if err != nil {
		return err
	}
	for len(list) > s.cfg.keep() {
		if err := deleteSnapshot(ctx, s.obs, list[0]); err != nil {
			return err
		}
		s.log.Info("old snapshot deleted", "name", list[0].Name)
		list = list[1:]
	}
	objs, err := listObjects(ctx, s.obs)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoObjectsFound) {
			return nil
		}
		return err
	}
	kept := map[string]bool{}
	for _, si := range list {
		kept[si.Name] = true
	}
	for _, o := range objs {
		name, _, isPart := strings.Cut(o.Name, ".part-")
		if isPart && !kept[name] && time.Since(o.ModTime) > orphanAge {
			if err := s.obs.Delete(ctx, o.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
				return err
			}
		}
	}
	return nil
}

func deleteSnapshot(ctx context.Context, obs jetstream.ObjectStore, si SnapshotInfo) error {
	if err := obs.Delete(ctx, si.Name); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
		return fmt.Errorf("queue: delete old snapshot %s: %w", si.Name, err)
	}
	for i := 0; i < si.Parts; i++ {
		if err := obs.Delete(ctx, partName(si.Name, i)); err != nil && !errors.Is(err, jetstream.ErrObjectNotFound) {
			return fmt.Errorf("queue: delete old snapshot %s: %w", si.Name, err)
		}
	}
	return nil
}

// catchUpAll has every partition's goroutine apply the stream up to its
// current end (cluster mode).
func (n *Node) catchUpAll(ctx context.Context) error {
	info, err := n.stream.Info(ctx)
	if err != nil {
		return err
	}
	for _, p := range n.parts {
		if p.applied.Load() >= info.State.LastSeq {
			continue
		}
		req := catchRequest{to: info.State.LastSeq, done: make(chan error, 1)}
		select {
		case p.reads <- req:
		case <-p.stopped:
			return fmt.Errorf("queue: partition %d stopped: %w", p.ID, p.Halted())
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case err := <-req.done:
			if err != nil {
				return fmt.Errorf("queue: partition %d catch-up: %w", p.ID, err)
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// TakeSnapshot takes a snapshot now (snapshots need not be on).
func (n *Node) TakeSnapshot(ctx context.Context) (SnapshotInfo, error) {
	if n.snaps == nil {
		return SnapshotInfo{}, errors.New("queue: no snapshot store")
	}
	return n.snaps.take(ctx)
}

// Snapshots lists the stored snapshots, oldest first.
func (n *Node) Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	if n.snaps == nil {
		return nil, nil
	}
	return listSnapshots(ctx, n.snaps.obs)
}
