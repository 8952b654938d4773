package data

import (
	"bytes"
	"errors"
	"maps"
	"slices"

	bolt "go.etcd.io/bbolt"
)

// bkt is one bucket of the index as a transaction sees it: bbolt's own
// bucket, or in a fork (see fork.go) bbolt's bucket as a read-only
// transaction sees it under the fork's writes, which stay in memory until
// the fork is merged. Every bucket other than the shared trees (whose
// writes wait in runs already, see overlay.go) is reached through it, so
// that the same decisions run in either kind of transaction.
type bkt struct {
	b *bolt.Bucket // nil in a fork when bbolt holds no such bucket
	o *ovBucket    // the fork's writes; nil outside forks
}

// ovBucket is a fork's writes to one bucket. A run node with a nil value
// that is no deletion names a sub-bucket (bbolt's cursors return nil
// values for those too).
type ovBucket struct {
	base *bolt.Bucket // bbolt's bucket; nil when fresh
	// fresh: the bucket was created in the fork (bbolt's is not read);
	// replaced: it was deleted in the fork first, so that bbolt's bucket
	// of that name goes at the merge.
	fresh, replaced bool
	run             *memRun
	// kids are the sub-buckets the fork looked up or created; a nil
	// entry is one it deleted.
	kids map[string]*ovBucket
}

func newOvBucket(base *bolt.Bucket, fresh bool) *ovBucket {
	return &ovBucket{base: base, fresh: fresh, run: newMemRun(), kids: map[string]*ovBucket{}}
}

func wrapBolt(b *bolt.Bucket) *bkt {
	if b == nil {
		return nil
	}
	return &bkt{b: b}
}

// bucket returns the top-level bucket name, nil if there is none.
func (t *Tx) bucket(name []byte) *bkt {
	if t.fork != nil {
		return t.fork.root.bucket(name)
	}
	return wrapBolt(t.tx.Bucket(name))
}

// createBucket returns the top-level bucket name, creating it if needed.
func (t *Tx) createBucket(name []byte) (*bkt, error) {
	if t.fork != nil {
		return t.fork.root.createBucket(name)
	}
	b, err := t.tx.CreateBucketIfNotExists(name)
	return wrapBolt(b), err
}

// deleteBucket deletes the top-level bucket name.
func (t *Tx) deleteBucket(name []byte) error {
	if t.fork != nil {
		return t.fork.root.deleteBucket(name)
	}
	return t.tx.DeleteBucket(name)
}

func (o *ovBucket) bucket(name []byte) *bkt {
	kid, ok := o.kids[string(name)]
	if !ok {
		if o.base == nil {
			return nil
		}
		b := o.base.Bucket(name)
		if b == nil {
			return nil
		}
		kid = newOvBucket(b, false)
		o.kids[string(name)] = kid
	}
	if kid == nil {
		return nil
	}
	return &bkt{b: kid.base, o: kid}
}

func (o *ovBucket) createBucket(name []byte) (*bkt, error) {
	if b := o.bucket(name); b != nil {
		return b, nil
	}
	if len(name) == 0 {
		return nil, bolt.ErrBucketNameRequired
	}
	if o.get(name) != nil {
		return nil, bolt.ErrIncompatibleValue
	}
	_, deleted := o.kids[string(name)]
	kid := newOvBucket(nil, true)
	kid.replaced = deleted
	o.kids[string(name)] = kid
	o.run.set(bytes.Clone(name), nil, false)
	return &bkt{o: kid}, nil
}

func (o *ovBucket) deleteBucket(name []byte) error {
	if o.bucket(name) == nil {
		return bolt.ErrBucketNotFound
	}
	o.kids[string(name)] = nil
	o.run.set(bytes.Clone(name), nil, true)
	return nil
}

// get is the value of key as the fork sees it: nil when absent or a
// sub-bucket.
func (o *ovBucket) get(key []byte) []byte {
	if v, known := o.run.get(key); known {
		return v
	}
	if o.base == nil || o.fresh {
		return nil
	}
	return o.base.Get(key)
}

// Get returns the value of key, nil if absent or a sub-bucket.
func (b *bkt) Get(key []byte) []byte {
	if b.o != nil {
		return b.o.get(key)
	}
	return b.b.Get(key)
}

// Put sets key to val. In a fork both are copied: val may be a value read
// from bbolt, whose memory the fork's read transaction gives back before
// the merge.
func (b *bkt) Put(key, val []byte) error {
	if b.o == nil {
		return b.b.Put(key, val)
	}
	switch {
	case len(key) == 0:
		return bolt.ErrKeyRequired
	case len(key) > bolt.MaxKeySize:
		return bolt.ErrKeyTooLarge
	case int64(len(val)) > bolt.MaxValueSize:
		return bolt.ErrValueTooLarge
	}
	if _, isKid := b.o.kids[string(key)]; isKid || b.o.bucket(key) != nil {
		return bolt.ErrIncompatibleValue
	}
	// Never nil: a nil value would read as a missing key.
	b.o.run.set(bytes.Clone(key), append(make([]byte, 0, len(val)), val...), false)
	return nil
}

// Delete removes key (a missing key is no error, as in bbolt).
func (b *bkt) Delete(key []byte) error {
	if b.o == nil {
		return b.b.Delete(key)
	}
	if b.o.bucket(key) != nil {
		return bolt.ErrIncompatibleValue
	}
	b.o.del(key)
	return nil
}

// del deletes key in the fork: a deletion kept for the merge when bbolt
// holds the key, else only the fork's own write goes. Deletions are
// passed over by every later walk of the bucket in the fork, so only
// those the merge needs are kept (keys put and deleted within the fork,
// such as request expiry entries that came and went, leave nothing).
func (o *ovBucket) del(key []byte) {
	if o.base == nil || o.fresh || o.base.Get(key) == nil {
		o.run.remove(key)
		return
	}
	o.run.set(bytes.Clone(key), nil, true)
}

// Bucket returns the sub-bucket name, nil if there is none.
func (b *bkt) Bucket(name []byte) *bkt {
	if b.o != nil {
		return b.o.bucket(name)
	}
	return wrapBolt(b.b.Bucket(name))
}

// CreateBucket creates the sub-bucket name, which must not exist.
func (b *bkt) CreateBucket(name []byte) (*bkt, error) {
	if b.o == nil {
		c, err := b.b.CreateBucket(name)
		return wrapBolt(c), err
	}
	if b.o.bucket(name) != nil {
		return nil, bolt.ErrBucketExists
	}
	return b.o.createBucket(name)
}

// CreateBucketIfNotExists returns the sub-bucket name, creating it if
// needed.
func (b *bkt) CreateBucketIfNotExists(name []byte) (*bkt, error) {
	if b.o == nil {
		c, err := b.b.CreateBucketIfNotExists(name)
		return wrapBolt(c), err
	}
	return b.o.createBucket(name)
}

// DeleteBucket deletes the sub-bucket name.
func (b *bkt) DeleteBucket(name []byte) error {
	if b.o == nil {
		return b.b.DeleteBucket(name)
	}
	return b.o.deleteBucket(name)
}

// ForEach calls fn for every key in key order (nil values for
// sub-buckets), as bbolt's ForEach.
func (b *bkt) ForEach(fn func(k, v []byte) error) error {
	if b.o == nil {
		return b.b.ForEach(fn)
	}
	c := b.Cursor()
	for k, v := c.First(); k != nil; k, v = c.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// Cursor returns a cursor over the bucket's keys.
func (b *bkt) Cursor() *kvCursor {
	if b.o == nil {
		return &kvCursor{c: b.b.Cursor()}
	}
	k := &kvCursor{o: b.o}
	if b.o.base != nil && !b.o.fresh {
		k.c = b.o.base.Cursor()
	}
	return k
}

// kvCursor is bbolt's cursor, or in a fork a cursor that merges the
// fork's writes into bbolt's keys: a written key shadows bbolt's, and
// deleted keys are skipped. As with bbolt's cursors, a bucket must not be
// written while a cursor walks it, except through the cursor's Delete.
type kvCursor struct {
	c *bolt.Cursor // nil in a fork over a fresh bucket
	o *ovBucket    // nil outside forks
	// In a fork: the tree's current key and value (nil at its end), the
	// run's current node, and which of the two is the position. The
	// forward walk keeps bk the smallest unread key of the tree and rn
	// the smallest unread node of the run.
	bk, bv  []byte
	rn      *memNode
	fromRun bool
	pos     []byte // the key returned last (nil: none)
}

func (c *kvCursor) baseAt(k, v []byte) { c.bk, c.bv = k, v }

// pick returns the smaller of the two positions, skipping the tree's key
// where the run holds the same key and the run's deletions.
func (c *kvCursor) pick() ([]byte, []byte) {
	for {
		if c.rn != nil && c.bk != nil {
			switch cmp := bytes.Compare(c.rn.key, c.bk); {
			case cmp == 0:
				c.baseAt(c.c.Next()) // shadowed by the run
				continue
			case cmp > 0:
				c.fromRun, c.pos = false, c.bk
				return c.bk, c.bv
			}
		}
		if c.rn == nil {
			c.fromRun, c.pos = false, c.bk
			return c.bk, c.bv
		}
		if c.rn.del {
			c.rn = c.rn.next[0]
			continue
		}
		c.fromRun, c.pos = true, c.rn.key
		return c.rn.key, c.rn.val
	}
}

// Seek moves to the first key at or after seek.
func (c *kvCursor) Seek(seek []byte) ([]byte, []byte) {
	if c.o == nil {
		return c.c.Seek(seek)
	}
	c.bk, c.bv = nil, nil
	if c.c != nil {
		c.baseAt(c.c.Seek(seek))
	}
	c.rn = c.o.run.seek(seek, nil)
	return c.pick()
}

// First moves to the first key.
func (c *kvCursor) First() ([]byte, []byte) {
	if c.o == nil {
		return c.c.First()
	}
	return c.Seek(nil)
}

// Next moves to the next key.
func (c *kvCursor) Next() ([]byte, []byte) {
	if c.o == nil {
		return c.c.Next()
	}
	if c.pos == nil {
		return nil, nil
	}
	if c.fromRun {
		c.rn = c.rn.next[0]
	} else if c.bk != nil {
		c.baseAt(c.c.Next())
	}
	return c.pick()
}

// Prev moves to the key before the current one (the last key when the
// cursor is past the end).
func (c *kvCursor) Prev() ([]byte, []byte) {
	if c.o == nil {
		return c.c.Prev()
	}
	at := c.pos
	for {
		// The largest key below at, from either side, then skipped if
		// the run deletes or shadows it.
		var bk []byte
		if c.c != nil {
			if at == nil {
				bk, _ = c.c.Last()
			} else if k, _ := c.c.Seek(at); k == nil {
				bk, _ = c.c.Last()
			} else {
				bk, _ = c.c.Prev()
			}
		}
		rn := c.o.run.before(at)
		var k []byte
		switch {
		case rn == nil && bk == nil:
			c.bk, c.bv, c.rn, c.pos = nil, nil, nil, nil
			return nil, nil
		case rn == nil || bk != nil && bytes.Compare(bk, rn.key) > 0:
			k = bk
		default:
			k = rn.key
		}
		if c.o.run.deleted(k) {
			at = k
			continue
		}
		return c.Seek(k)
	}
}

// Delete removes the cursor's current key.
func (c *kvCursor) Delete() error {
	if c.o == nil {
		return c.c.Delete()
	}
	if c.pos == nil {
		return nil
	}
	if _, isKid := c.o.kids[string(c.pos)]; isKid || c.o.bucket(c.pos) != nil {
		return bolt.ErrIncompatibleValue
	}
	// A node removed from the run keeps its links: the cursor may still
	// stand on it.
	c.o.del(c.pos)
	return nil
}

// remove takes key's node out of the run, if it has one. The node keeps
// its own links, so that a walk standing on it can go on.
func (r *memRun) remove(key []byte) {
	var update [memMaxLevel]*memNode
	n := r.seek(key, &update)
	if n == nil || !bytes.Equal(n.key, key) {
		return
	}
	for i := 0; i < len(n.next) && i < r.level; i++ {
		if update[i].next[i] == n {
			update[i].next[i] = n.next[i]
		}
	}
	r.n--
}

// before returns the last node whose key is < key (the last node when key
// is nil), nil if none.
func (r *memRun) before(key []byte) *memNode {
	x := &r.head
	for i := r.level - 1; i >= 0; i-- {
		for n := x.next[i]; n != nil && (key == nil || bytes.Compare(n.key, key) < 0); n = x.next[i] {
			x = n
		}
	}
	if x == &r.head {
		return nil
	}
	return x
}

// deleted reports whether the run holds a deletion of key.
func (r *memRun) deleted(key []byte) bool {
	n := r.seek(key, nil)
	return n != nil && n.del && bytes.Equal(n.key, key)
}

// mergeInto puts the fork's writes to o into b, bbolt's bucket of the
// same name in a write transaction: values in key order, then the
// sub-buckets in name order.
func (o *ovBucket) mergeInto(b *bolt.Bucket) error {
	for n := o.run.head.next[0]; n != nil; n = n.next[0] {
		if _, isKid := o.kids[string(n.key)]; isKid {
			continue
		}
		var err error
		if n.del {
			err = b.Delete(n.key)
		} else {
			err = b.Put(n.key, n.val)
		}
		if err != nil {
			return err
		}
	}
	for _, name := range slices.Sorted(maps.Keys(o.kids)) {
		kid := o.kids[name]
		if kid == nil || kid.replaced {
			if err := b.DeleteBucket([]byte(name)); err != nil && !errors.Is(err, bolt.ErrBucketNotFound) {
				return err
			}
		}
		if kid == nil || kid.run.n == 0 && len(kid.kids) == 0 && !kid.fresh {
			continue
		}
		var sub *bolt.Bucket
		if kid.fresh {
			// Another fork may have created it too.
			var err error
			if sub, err = b.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		} else if sub = b.Bucket([]byte(name)); sub == nil {
			return bolt.ErrBucketNotFound
		}
		if err := kid.mergeInto(sub); err != nil {
			return err
		}
	}
	return nil
}
