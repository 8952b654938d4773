package data

import (
	"bytes"
	"encoding/base32"

	bolt "go.etcd.io/bbolt"
)

// Bookings, slot entries and request records of all calendars share one
// tree each, their keys prefixed by the calendar id and a zero byte
// (calendar ids never contain one). A sub-bucket per calendar and kind
// gave 10,000 calendars 30,000 small trees whose roots and half-empty
// leaves were most of the file, and a small commit rewrote three roots
// per calendar it touched; shared trees fill their pages and share their
// branch pages.
var (
	treeBookings = []byte("bk") // cal ++ 0 ++ idKey(booking id) -> booking (see appendStoredBooking)
	treeSlots    = []byte("sl") // cal ++ 0 ++ start(8) ++ idKey(booking id) -> slot value (see encodeSlotValue)
	treeRequests = []byte("rq") // cal ++ 0 ++ request id -> request record (see encodeRecord)
)

// calTree is one calendar's range of a shared tree. Keys given to it and
// returned by it are without the calendar prefix. In a write transaction
// its writes wait in run until the commit (see overlay.go).
type calTree struct {
	b      *bolt.Bucket
	prefix []byte
	run    *memRun // nil: writes go straight to b
	// filter, when set, holds every key of the tree (see keyFilter).
	filter *keyFilter
}

func newCalTree(b *bolt.Bucket, calID string) *calTree {
	p := make([]byte, 0, len(calID)+1)
	return &calTree{b: b, prefix: append(append(p, calID...), 0)}
}

func (c *calTree) key(k []byte) []byte {
	full := make([]byte, 0, len(c.prefix)+len(k))
	return append(append(full, c.prefix...), k...)
}

// Get returns the value of k, nil if absent.
func (c *calTree) Get(k []byte) []byte {
	full := c.key(k)
	if c.run != nil {
		if v, known := c.run.get(full); known {
			return v
		}
	}
	if c.filter != nil && !c.filter.mayHold(full) {
		return nil
	}
	return c.b.Get(full)
}

// Put sets k to v.
func (c *calTree) Put(k, v []byte) error {
	if c.run != nil {
		if v == nil {
			v = []byte{} // a nil value would read as a missing key
		}
		c.run.set(c.key(k), v, false)
		return nil
	}
	return c.b.Put(c.key(k), v)
}

// Delete removes k.
func (c *calTree) Delete(k []byte) error {
	if c.run != nil {
		c.run.set(c.key(k), nil, true)
		return nil
	}
	return c.b.Delete(c.key(k))
}

// ForEach calls fn for every key of the calendar, in key order.
func (c *calTree) ForEach(fn func(k, v []byte) error) error {
	cur := c.Cursor()
	for k, v := cur.First(); k != nil; k, v = cur.Next() {
		if err := fn(k, v); err != nil {
			return err
		}
	}
	return nil
}

// DeleteAll removes every key of the calendar.
func (c *calTree) DeleteAll() error {
	if c.run != nil {
		// The keys it puts are deleted next: the filter may miss them.
		if err := c.run.flush(c.b, nil); err != nil {
			return err
		}
	}
	cur := c.b.Cursor()
	for k, _ := cur.Seek(c.prefix); k != nil && bytes.HasPrefix(k, c.prefix); k, _ = cur.Seek(c.prefix) {
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Cursor iterates over the calendar's keys: the tree's merged with the
// pending run's, a pending write shadowing the tree's key.
func (c *calTree) Cursor() *calCursor {
	return &calCursor{c: c.b.Cursor(), prefix: c.prefix, run: c.run}
}

// calCursor walks a calendar's range of a shared tree and, in a write
// transaction, its pending run, in key order. The writes of the run are
// not to change while the cursor is used (as with bbolt's own cursors).
type calCursor struct {
	c      *bolt.Cursor
	prefix []byte
	run    *memRun
	// tk, tv: the tree's current key (full) and value, nil at its end;
	// rn: the run's current node; fromRun: which of them is the position.
	tk, tv  []byte
	rn      *memNode
	fromRun bool
}

func (c *calCursor) fromTree(k, v []byte) {
	if k == nil || !bytes.HasPrefix(k, c.prefix) {
		k, v = nil, nil
	}
	c.tk, c.tv = k, v
}

// pick returns the smaller of the two positions, skipping the tree's key
// where the run holds the same key and the run's deletions.
func (c *calCursor) pick() ([]byte, []byte) {
	for {
		if c.rn != nil && c.tk != nil {
			switch cmp := bytes.Compare(c.rn.key, c.tk); {
			case cmp == 0:
				c.fromTree(c.c.Next()) // shadowed by the run
				continue
			case cmp > 0:
				c.fromRun = false
				return c.tk[len(c.prefix):], c.tv
			}
		}
		if c.rn == nil {
			c.fromRun = false
			if c.tk == nil {
				return nil, nil
			}
			return c.tk[len(c.prefix):], c.tv
		}
		if c.rn.del {
			c.rn = c.rn.next[0]
			continue
		}
		c.fromRun = true
		return c.rn.key[len(c.prefix):], c.rn.val
	}
}

func (c *calCursor) seekFull(full []byte) ([]byte, []byte) {
	c.fromTree(c.c.Seek(full))
	c.rn = nil
	if c.run != nil {
		c.rn = c.run.seek(full, nil) // the run holds this calendar's keys only
	}
	return c.pick()
}

// First moves to the calendar's first key.
func (c *calCursor) First() ([]byte, []byte) { return c.seekFull(c.prefix) }

// Seek moves to the first key at or after k.
func (c *calCursor) Seek(k []byte) ([]byte, []byte) {
	full := make([]byte, 0, len(c.prefix)+len(k))
	return c.seekFull(append(append(full, c.prefix...), k...))
}

// Next moves to the next key of the calendar.
func (c *calCursor) Next() ([]byte, []byte) {
	if c.fromRun {
		c.rn = c.rn.next[0]
	} else if c.tk != nil {
		c.fromTree(c.c.Next())
	}
	return c.pick()
}

// Booking ids are 26 characters of base32hex (lowercase) for 128 bits:
// keys hold the 16 bytes instead, in the same order (base32hex keeps the
// bytes' order) behind a one byte. An id of another shape, which only
// tests and lookups of foreign ids make, is kept as text behind a zero
// byte, so the two forms never collide.
const (
	idRaw  = 1
	idText = 0
)

var idEncoding = base32.NewEncoding("0123456789abcdefghijklmnopqrstuv").WithPadding(base32.NoPadding)

func idKey(id string) []byte {
	k := make([]byte, 17, max(17, 1+len(id)))
	if len(id) == 26 {
		// 26 characters carry 130 bits: the last one's two low bits must
		// be zero, or two ids would share a key. (The decoder skips
		// newlines, which makes n short.)
		if n, err := idEncoding.Decode(k[1:], []byte(id)); err == nil && n == 16 && base32hexValue(id[25])&3 == 0 {
			k[0] = idRaw
			return k
		}
	}
	return append(append(k[:0], idText), id...)
}

// base32hexValue is the value of a character of idEncoding's alphabet.
func base32hexValue(c byte) byte {
	if c >= 'a' {
		return c - 'a' + 10
	}
	return c - '0'
}

// idFromKey is the booking id of a key idKey wrote (and the rest of b
// after it).
func idFromKey(b []byte) (id string, rest []byte) {
	if len(b) >= 17 && b[0] == idRaw {
		return idEncoding.EncodeToString(b[1:17]), b[17:]
	}
	if len(b) == 0 {
		return "", nil
	}
	return string(b[1:]), nil
}
