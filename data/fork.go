package data

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// A fork is a transaction for deciding some partitions' commands on a
// goroutine of their own, beside other forks deciding other partitions:
// bbolt has one writer, and its write transaction is not safe for use by
// several goroutines. A fork reads the index as last committed, through a
// read-only transaction of its own, and keeps every write in memory: the
// shared trees' in a Pending of its own, every other bucket's in an
// overlay (kv.go). Its reads see its writes over bbolt's, exactly as a
// write transaction would. CommitForks then puts the writes of all forks
// into one write transaction.
//
// Forks decide as if alone: a fork does not see what the others write, so
// they must decide disjoint partitions, whose decisions read and write
// only their own calendars and per-partition keys. CommitForks refuses
// forks that wrote the same key.
type Fork struct {
	tx      *Tx
	pending *Pending
	ended   bool
}

type forkState struct {
	root *ovBucket
}

// ErrForkConflict is returned by CommitForks when two forks wrote the same
// key: they did not decide disjoint partitions.
var ErrForkConflict = errors.New("data: forks wrote the same key")

// Fork begins a fork on the newest commit, durable or not: forks are for
// building an index nobody reads until the build ends (replay), after
// FlushPending, so that bbolt holds every earlier write. Discard it after
// CommitForks, or instead of it.
func (s *Store) Fork() (*Fork, error) {
	btx, err := s.db.Begin(false)
	if err != nil {
		return nil, closedAsErrClosed(err)
	}
	f := &Fork{pending: NewPending()}
	f.tx = &Tx{tx: btx, cals: &s.cals, buffered: true, filters: &s.filters, pending: f.pending,
		fork: &forkState{root: newOvBucket(btx.Cursor().Bucket(), false)}}
	return f, nil
}

// Tx is the fork's transaction. Use it from one goroutine at a time.
func (f *Fork) Tx() *Tx { return f.tx }

// Discard ends the fork's read transaction, and with it the fork; its
// writes are dropped unless CommitForks took them. It may be called more
// than once.
func (f *Fork) Discard() {
	if !f.ended {
		f.ended = true
		_ = f.tx.tx.Rollback()
	}
}

// CommitForks puts the writes of forks into one transaction, written
// without fsync (see CommitUnsynced), their tree writes kept in p for
// FlushPending, which must hold nothing yet (the forks read bbolt only).
// Forks are merged in the order given. It ends the forks first: a read
// transaction left open would hold bbolt's mmap lock, which a commit that
// grows the file waits for (the forks' writes hold no bbolt memory: keys
// and values are copied or the caller's own). If it fails, p may hold part
// of the writes: the build must be abandoned.
func (s *Store) CommitForks(p *Pending, forks []*Fork) error {
	for _, f := range forks {
		f.Discard()
	}
	return s.CommitPending(p, func(tx *Tx) error {
		if len(p.cals) > 0 {
			return errors.New("data: CommitForks with pending writes the forks did not see")
		}
		for i, a := range forks {
			for _, b := range forks[i+1:] {
				if err := forksOverlap(a.tx.fork.root, b.tx.fork.root, "/"); err != nil {
					return err
				}
			}
		}
		root := tx.tx.Cursor().Bucket()
		for _, f := range forks {
			if err := f.tx.fork.root.mergeInto(root); err != nil {
				return err
			}
			for id, runs := range f.pending.cals {
				if p.cals[id] != nil {
					return fmt.Errorf("%w: calendar %q", ErrForkConflict, id)
				}
				p.cals[id] = runs
			}
		}
		return nil
	})
}

// forksOverlap returns ErrForkConflict when two forks' writes to one
// bucket share a key, or one replaced or deleted a sub-bucket the other
// touched. Both created a bucket that was missing is no conflict.
func forksOverlap(a, b *ovBucket, path string) error {
	if a.replaced || b.replaced {
		return fmt.Errorf("%w: bucket %s replaced", ErrForkConflict, path)
	}
	for _, name := range slices.Sorted(maps.Keys(a.kids)) {
		ka := a.kids[name]
		kb, both := b.kids[name]
		if !both {
			continue
		}
		if ka == nil || kb == nil {
			return fmt.Errorf("%w: bucket %s%q deleted", ErrForkConflict, path, name)
		}
		if err := forksOverlap(ka, kb, path+fmt.Sprintf("%q/", name)); err != nil {
			return err
		}
	}
	x, y := a.run.head.next[0], b.run.head.next[0]
	for x != nil && y != nil {
		switch c := bytes.Compare(x.key, y.key); {
		case c < 0:
			x = x.next[0]
		case c > 0:
			y = y.next[0]
		default:
			_, kidA := a.kids[string(x.key)]
			_, kidB := b.kids[string(y.key)]
			if !kidA || !kidB {
				return fmt.Errorf("%w: bucket %s key %x", ErrForkConflict, path, x.key)
			}
			x, y = x.next[0], y.next[0]
		}
	}
	return nil
}

// errInFork is returned by the maintenance calls a fork cannot make: they
// write bbolt directly.
var errInFork = errors.New("data: not available in a fork")

// rawWritable reports errInFork in a fork, for calls that write bbolt's
// buckets directly.
func (t *Tx) rawWritable() error {
	if t.fork != nil {
		return errInFork
	}
	return nil
}
