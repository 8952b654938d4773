package data

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Snapshots of the index: a consistent copy, written in one read
// transaction (compacted, compact.go, or the whole file by bbolt's
// Tx.WriteTo), with what a restore needs to know about it. A read transaction does not stop the writers; the one
// thing in bbolt that waits for open readers is a remap of the file, which
// the index's initial mapping (initialMmapSize) keeps off the path until
// the file is that large.

// SchemaVersion is this build's index layout version.
const SchemaVersion = schemaVersion

// SnapshotState describes the index a snapshot holds.
type SnapshotState struct {
	// Schema is the index layout version (schemaVersion of the build
	// that wrote it).
	Schema string `json:"schema"`
	// Stream is the identity of the command stream the index was built
	// from.
	Stream string `json:"stream"`
	// Applied is each partition's applied stream sequence, AppliedHash
	// the hash of the message applied there (hex; see SetApplied).
	Applied     map[int]uint64 `json:"applied"`
	AppliedHash map[int]string `json:"applied_hash,omitempty"`
	// AppliedChain is each partition's hash chain through its applied
	// sequence (hex; see chain.go), for partitions that keep one.
	AppliedChain map[int]string `json:"applied_chain,omitempty"`
	// Horizon is, per partition, the sequence through which the
	// partition had no message the index lacks (see Tx.Horizon).
	Horizon map[int]uint64 `json:"horizon,omitempty"`
	// Tzdata is the list of time zone data releases that decided it.
	Tzdata string `json:"tzdata,omitempty"`
	// Digest is the decided state's digest (Digest.Total).
	Digest string `json:"digest"`
	// Size is the number of bytes of the copy.
	Size int64 `json:"size"`
}

// SnapshotInfo describes one stored snapshot: where it is, when and from
// which stream it was taken, and the index it holds.
type SnapshotInfo struct {
	// Name is the object's name (index-<taken at, UTC>): names sort by age.
	Name     string    `json:"name"`
	TakenAt  time.Time `json:"taken_at"`
	Instance string    `json:"instance,omitempty"`
	// StreamLast is the command stream's last sequence when it was taken,
	// StreamLastHash the hash of the message there (hex, as AppliedHash):
	// the horizons are true of the stream as it was up to it.
	StreamLast     uint64 `json:"stream_last"`
	StreamLastHash string `json:"stream_last_hash,omitempty"`
	// Partitions is the command stream's partition count.
	Partitions int `json:"partitions"`
	SnapshotState
	// Compression of the stored copy ("s2": S2 stream format; "" none),
	// Stored its size as stored, and Parts the number of objects it is
	// stored in (each with the object store's SHA-256, checked when it is
	// read back).
	Compression string `json:"compression,omitempty"`
	Stored      int64  `json:"stored"`
	Parts       int    `json:"parts"`
}

// WriteSnapshot writes a consistent copy of the index to w and returns
// what it holds. It runs in one read transaction: writers go on
// committing meanwhile, and the copy is the state of one commit.
func (s *Store) WriteSnapshot(w io.Writer) (SnapshotState, error) {
	var st SnapshotState
	err := s.View(func(tx *Tx) error {
		var err error
		if st, err = tx.snapshotState(true); err != nil {
			return err
		}
		st.Size, err = tx.tx.WriteTo(w)
		return err
	})
	return st, err
}

// snapshotState describes the index; the digest, which reads every page,
// only if asked for.
func (t *Tx) snapshotState(digest bool) (SnapshotState, error) {
	var d Digest
	if digest {
		var err error
		if d, err = t.Digest(); err != nil {
			return SnapshotState{}, err
		}
	}
	st := SnapshotState{
		Schema: string(t.bucket(bucketMeta).Get(keySchema)), Stream: t.StreamIdentity(),
		Applied: map[int]uint64{}, AppliedHash: map[int]string{}, AppliedChain: map[int]string{}, Horizon: t.Horizons(),
		Tzdata: t.TzdataVersions(), Digest: d.Total,
	}
	for p := range t.Applied() {
		h := t.ChainHead(p)
		st.Applied[p] = h.Seq
		if h.Hash != nil {
			st.AppliedHash[p] = hex.EncodeToString(h.Hash)
		}
		if h.Chain != nil {
			st.AppliedChain[p] = hex.EncodeToString(h.Chain)
		}
	}
	return st, nil
}

// ErrSnapshotMismatch is returned by PrepareRestored for a copy whose
// content is not what its description says.
var ErrSnapshotMismatch = errors.New("data: snapshot does not match its description")

// CheckRestored checks a snapshot copied to path against want (schema,
// stream, applied sequences and hash chains; with checkDigest also the decided state's
// digest, which reads every page: the copy's bytes are already checked by
// the object store's and the compression's checksums). It only reads:
// bbolt rebuilds the free list of an index without a synced one on the
// first write, which for a large index takes seconds, so the writes a
// restored index needs (AdoptRestored) wait for the store that serves it.
func CheckRestored(path string, want SnapshotState, checkDigest bool) error {
	db, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, ReadOnly: true})
	if err != nil {
		return fmt.Errorf("data: open restored snapshot: %w", err)
	}
	defer db.Close()
	var got SnapshotState
	if err := db.View(func(btx *bolt.Tx) error {
		if btx.Bucket(bucketMeta) == nil || btx.Bucket(bucketApplied) == nil || btx.Bucket(bucketCal) == nil || btx.Bucket(bucketCalendars) == nil {
			return fmt.Errorf("%w: not a bookline index", ErrSnapshotMismatch)
		}
		if v := btx.Bucket(bucketMeta).Get(keySchema); string(v) != schemaVersion {
			return fmt.Errorf("%w: %v: schema %q, this build needs %q", ErrSchema, ErrSnapshotMismatch, v, schemaVersion)
		}
		if btx.Bucket(treeBookings) == nil || btx.Bucket(treeSlots) == nil || btx.Bucket(treeRequests) == nil || btx.Bucket(bucketSpan) == nil {
			return fmt.Errorf("%w: not a bookline index", ErrSnapshotMismatch)
		}
		tx := &Tx{tx: btx}
		got, err = tx.snapshotState(checkDigest)
		return err
	}); err != nil {
		return err
	}
	switch {
	case got.Schema != schemaVersion:
		return fmt.Errorf("%w: %v: schema %q, this build needs %q", ErrSchema, ErrSnapshotMismatch, got.Schema, schemaVersion)
	case got.Stream != want.Stream:
		return fmt.Errorf("%w: built from stream %q, described as %q", ErrSnapshotMismatch, got.Stream, want.Stream)
	case !maps.Equal(got.Applied, want.Applied):
		return fmt.Errorf("%w: applied %v, described as %v", ErrSnapshotMismatch, got.Applied, want.Applied)
	case want.AppliedChain != nil && !maps.Equal(got.AppliedChain, want.AppliedChain):
		// (A description from a build before chains has none to compare.)
		return fmt.Errorf("%w: hash chains %v, described as %v", ErrSnapshotMismatch, got.AppliedChain, want.AppliedChain)
	case checkDigest && got.Digest != want.Digest:
		return fmt.Errorf("%w: state digest %s, described as %s", ErrSnapshotMismatch, got.Digest, want.Digest)
	}
	return nil
}

// AdoptRestored makes a restored snapshot an index of this instance: the
// event outbox of the instance that took it is dropped (those events were
// that instance's to publish, and are in the event stream or will be) and
// the horizons are raised to horizon (see Tx.Horizon).
func (t *Tx) AdoptRestored(horizon map[int]uint64) error {
	for _, name := range [][]byte{bucketEvents, bucketEventsAside} {
		if t.bucket(name) != nil {
			if err := t.deleteBucket(name); err != nil {
				return err
			}
		}
	}
	for p, h := range horizon {
		if err := t.RaiseHorizon(p, h); err != nil {
			return err
		}
	}
	return nil
}

// InstallRestored moves a prepared snapshot copy at from to the index path
// to (which must not exist, or be discarded by the caller first) and makes
// the rename durable.
func InstallRestored(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	// A session file left by an earlier index would describe that one.
	if err := os.Remove(sessionPath(to)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return SyncDir(filepath.Dir(to))
}

// bucketHorizon: partition (4) -> stream seq (8). Bookkeeping about the
// log, outside the digest like the stream identity.
var bucketHorizon = []byte("horizon")

// Horizon is the stream sequence through which partition p has no message
// this index lacks, when that is known beyond its applied sequence: the
// applied sequence is the partition's last message, and a stream whose
// start was trimmed away (below a snapshot) no longer shows that the
// messages before its first sequence were other partitions'. 0 if unknown.
func (t *Tx) Horizon(p int) uint64 {
	b := t.bucket(bucketHorizon)
	if b == nil {
		return 0
	}
	if v := b.Get(partitionKey(p)); len(v) == 8 {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

// Horizons lists every partition's horizon.
func (t *Tx) Horizons() map[int]uint64 {
	out := map[int]uint64{}
	if b := t.bucket(bucketHorizon); b != nil {
		_ = b.ForEach(func(k, v []byte) error {
			if len(k) == 4 && len(v) == 8 {
				out[int(binary.BigEndian.Uint32(k))] = binary.BigEndian.Uint64(v)
			}
			return nil
		})
	}
	return out
}

// Covered is how far partition p's history is known to be in the index:
// the larger of its applied sequence and its horizon.
func (t *Tx) Covered(p int) uint64 {
	seq, _ := t.AppliedMsg(p)
	return max(seq, t.Horizon(p))
}

// RaiseHorizon records that partition p has no message the index lacks
// through stream sequence seq; it never lowers a horizon.
func (t *Tx) RaiseHorizon(p int, seq uint64) error {
	if seq <= t.Horizon(p) {
		return nil
	}
	b, err := t.createBucket(bucketHorizon)
	if err != nil {
		return err
	}
	return b.Put(partitionKey(p), seqKey(seq))
}

// DropHorizon forgets partition p's horizon (a stream that lost its tail
// may since hold other messages below it).
func (t *Tx) DropHorizon(p int) error { return t.dropHorizon(p) }

func (t *Tx) dropHorizon(p int) error {
	b := t.bucket(bucketHorizon)
	if b == nil {
		return nil
	}
	return b.Delete(partitionKey(p))
}

// RemoveIndex deletes an index file and its session file (a closed,
// empty index about to be replaced by a restored one).
func RemoveIndex(path string) error {
	for _, f := range []string{path, sessionPath(path)} {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	return nil
}

// SetAside moves a closed index file (and its session file) to path +
// suffix, replacing an earlier one there, so that a restored index can
// take its place while the old one stays for inspection.
func SetAside(path, suffix string) error {
	if err := os.Rename(path, path+suffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("data: move the index aside: %w", err)
	}
	if err := os.Remove(sessionPath(path)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return SyncDir(filepath.Dir(path))
}
