package data

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	bolt "go.etcd.io/bbolt"
)

// Compacted snapshots. bbolt reuses freed pages but never shrinks its file,
// and Tx.WriteTo copies every page, free or not: an index whose history
// churned (request records that came and expired, holds released) made
// snapshots as large as its largest past. WriteCompactSnapshot writes the
// same state, the read transaction's, into a fresh file with live keys only,
// in key order and packed pages, and copies that: the snapshot's size
// follows the live data. The copy is a bbolt file like the other, so a
// restore opens it the same way.

// compactBatchBytes bounds a write transaction of the compaction: a
// transaction holds its dirty pages, and the nodes bbolt builds for them,
// in memory until it commits. At 64 MiB a snapshot of 300k bookings took
// 168 MB of heap at its peak, at 2 MiB 26 MB, and it was faster (1.76
// against 2.43 s: fewer nodes built and collected; BenchmarkSnapshotCopy's
// peak-heap-MB). A snapshot that follows a bulk load runs while the
// process gives the load's memory back.
const compactBatchBytes = 2 << 20

// compactFill packs the copy's pages: keys arrive in order, and a restored
// index splits full pages only where it is written to again.
const compactFill = 1.0

// compactor copies the buckets of a read transaction into dst, committing
// every compactBatchBytes.
type compactor struct {
	dst     *bolt.DB
	tx      *bolt.Tx
	pending int
	// path and at are the destination bucket being filled and its path:
	// found again in each new transaction.
	path [][]byte
	at   *bolt.Bucket
}

func (c *compactor) begin() (err error) {
	c.tx, err = c.dst.Begin(true)
	c.at, c.pending = nil, 0
	return err
}

// bucket is the destination bucket at path, created with seq as its
// sequence when new.
func (c *compactor) bucket(path [][]byte) (*bolt.Bucket, error) {
	if c.at != nil && equalPath(c.path, path) {
		return c.at, nil
	}
	var b *bolt.Bucket
	for i, name := range path {
		var next *bolt.Bucket
		if i == 0 {
			next = c.tx.Bucket(name)
		} else {
			next = b.Bucket(name)
		}
		if next == nil {
			return nil, fmt.Errorf("data: compact: bucket %q not created", name)
		}
		b = next
	}
	b.FillPercent = compactFill
	c.path, c.at = append(c.path[:0], path...), b
	return b, nil
}

func equalPath(a, b [][]byte) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !bytes.Equal(a[i], b[i]) {
			return false
		}
	}
	return true
}

// copyBucket copies src, found at path (its own name last), and what it
// holds.
func (c *compactor) copyBucket(src *bolt.Bucket, path [][]byte) error {
	var parent *bolt.Bucket
	if len(path) > 1 {
		var err error
		if parent, err = c.bucket(path[:len(path)-1]); err != nil {
			return err
		}
	}
	name := path[len(path)-1]
	var b *bolt.Bucket
	var err error
	if parent == nil {
		b, err = c.tx.CreateBucket(name)
	} else {
		b, err = parent.CreateBucket(name)
	}
	if err != nil {
		return fmt.Errorf("data: compact: bucket %q: %w", name, err)
	}
	if err := b.SetSequence(src.Sequence()); err != nil {
		return err
	}
	c.at = nil
	cur := src.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if v == nil { // a nested bucket
			if err := c.copyBucket(src.Bucket(k), append(path[:len(path):len(path)], k)); err != nil {
				return err
			}
			continue
		}
		dst, err := c.bucket(path)
		if err != nil {
			return err
		}
		if err := dst.Put(k, v); err != nil {
			return err
		}
		if c.pending += len(k) + len(v); c.pending >= compactBatchBytes {
			if err := c.tx.Commit(); err != nil {
				return err
			}
			if err := c.begin(); err != nil {
				return err
			}
		}
	}
	return nil
}

// WriteCompactSnapshot is WriteSnapshot's compacted form: the same state,
// copied through a fresh file in the index's directory with live keys
// only (removed afterwards). It costs a walk of every key and a second
// file of the live size while it runs; the copy is usually much smaller
// than the index file.
func (s *Store) WriteCompactSnapshot(w io.Writer) (SnapshotState, error) {
	var st SnapshotState
	err := s.View(func(tx *Tx) error {
		var err error
		if st, err = tx.snapshotState(true); err != nil {
			return err
		}
		st.Size, err = tx.writeCompact(filepath.Dir(s.Path()), w)
		return err
	})
	return st, err
}

// writeCompact compacts t into a temporary file in dir and copies it to w.
func (t *Tx) writeCompact(dir string, w io.Writer) (int64, error) {
	f, err := os.CreateTemp(dir, "index.db.compact-*")
	if err != nil {
		return 0, err
	}
	path := f.Name()
	f.Close()
	defer os.Remove(path)
	// A scratch file: nothing waits for it to be durable, the snapshot's
	// own writer syncs what it writes.
	dst, err := bolt.Open(path, 0o600, &bolt.Options{NoSync: true, NoGrowSync: true, NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
	if err != nil {
		return 0, err
	}
	c := &compactor{dst: dst}
	if err := c.begin(); err != nil {
		dst.Close()
		return 0, err
	}
	err = t.tx.ForEach(func(name []byte, b *bolt.Bucket) error {
		return c.copyBucket(b, [][]byte{name})
	})
	if err == nil {
		err = c.tx.Commit()
	} else {
		_ = c.tx.Rollback()
	}
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return 0, fmt.Errorf("data: compact the index for a snapshot: %w", err)
	}
	in, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	return io.Copy(w, in)
}
