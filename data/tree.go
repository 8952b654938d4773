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
// returned by it are without the calendar prefix.
type calTree struct {
	b      *bolt.Bucket
	prefix []byte
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
func (c *calTree) Get(k []byte) []byte { return c.b.Get(c.key(k)) }

// Put sets k to v.
func (c *calTree) Put(k, v []byte) error { return c.b.Put(c.key(k), v) }

// Delete removes k.
func (c *calTree) Delete(k []byte) error { return c.b.Delete(c.key(k)) }

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
	cur := c.b.Cursor()
	for k, _ := cur.Seek(c.prefix); k != nil && bytes.HasPrefix(k, c.prefix); k, _ = cur.Seek(c.prefix) {
		if err := cur.Delete(); err != nil {
			return err
		}
	}
	return nil
}

// Cursor iterates over the calendar's keys.
func (c *calTree) Cursor() *calCursor { return &calCursor{c: c.b.Cursor(), prefix: c.prefix} }

type calCursor struct {
	c      *bolt.Cursor
	prefix []byte
}

func (c *calCursor) trim(k, v []byte) ([]byte, []byte) {
	if k == nil || !bytes.HasPrefix(k, c.prefix) {
		return nil, nil
	}
	return k[len(c.prefix):], v
}

// First moves to the calendar's first key.
func (c *calCursor) First() ([]byte, []byte) { return c.trim(c.c.Seek(c.prefix)) }

// Seek moves to the first key at or after k.
func (c *calCursor) Seek(k []byte) ([]byte, []byte) {
	full := make([]byte, 0, len(c.prefix)+len(k))
	return c.trim(c.c.Seek(append(append(full, c.prefix...), k...)))
}

// Next moves to the next key of the calendar.
func (c *calCursor) Next() ([]byte, []byte) { return c.trim(c.c.Next()) }

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
		if n, err := idEncoding.Decode(k[1:], []byte(id)); err == nil && n == 16 && idEncoding.EncodeToString(k[1:]) == id {
			k[0] = idRaw
			return k
		}
	}
	return append(append(k[:0], idText), id...)
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
