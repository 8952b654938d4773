package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The Google sync outbox: every decision that changes a confirmed booking of
// a calendar linked to Google leaves an entry here, in the same transaction
// as the decision (see actor). The calendarsync worker drains it per
// calendar, in sequence order, off the writers' path, and deletes what
// Google has. Replay does not fill it (history is not mirrored again).

var bucketSync = []byte("gsync") // calendar ++ 0 ++ stream seq (8) -> SyncEntry (binary)

// Sync operations.
const (
	SyncCreate byte = 1 // a booking became confirmed: insert its event
	SyncUpdate byte = 2 // a confirmed booking moved: patch its event
	SyncDelete byte = 3 // a booking was cancelled: delete its event
)

// SyncEntry is one pending mirror operation.
type SyncEntry struct {
	Calendar string // bookline calendar id
	Seq      uint64 // stream sequence of the deciding command
	Op       byte
	// GoogleCalendar is the linked Google calendar id when it was decided.
	GoogleCalendar string
	Booking        Booking // the booking as decided
}

const syncVersion = 1

func syncKey(cal string, seq uint64) []byte {
	k := make([]byte, 0, len(cal)+9)
	k = append(k, cal...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

// PutSync queues a mirror operation.
func (t *Tx) PutSync(e SyncEntry) error {
	b, err := t.tx.CreateBucketIfNotExists(bucketSync)
	if err != nil {
		return err
	}
	v := make([]byte, 0, 200+len(e.Booking.Customer)+len(e.Booking.Metadata))
	v = append(v, syncVersion, e.Op)
	v = AppendString(v, e.GoogleCalendar)
	v = AppendBooking(v, &e.Booking)
	return b.Put(syncKey(e.Calendar, e.Seq), v)
}

func decodeSync(k, v []byte) (SyncEntry, error) {
	var e SyncEntry
	i := bytes.IndexByte(k, 0)
	if i < 0 || len(k) != i+9 {
		return e, fmt.Errorf("data: malformed sync key %x", k)
	}
	e.Calendar, e.Seq = string(k[:i]), binary.BigEndian.Uint64(k[i+1:])
	r := NewReader(v)
	if r.Byte() != syncVersion {
		return e, ErrCorrupt
	}
	e.Op = r.Byte()
	e.GoogleCalendar = r.String()
	e.Booking = ReadBooking(r)
	return e, r.Err()
}

// PendingSync returns up to max queued operations of calendar cal, in
// sequence order.
func (t *Tx) PendingSync(cal string, max int) ([]SyncEntry, error) {
	b := t.tx.Bucket(bucketSync)
	if b == nil {
		return nil, nil
	}
	prefix := append([]byte(cal), 0)
	var out []SyncEntry
	c := b.Cursor()
	for k, v := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && len(out) < max; k, v = c.Next() {
		e, err := decodeSync(k, v)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// SyncDepth counts the queued operations of cal, up to max.
func (t *Tx) SyncDepth(cal string, max int) int {
	b := t.tx.Bucket(bucketSync)
	if b == nil {
		return 0
	}
	prefix := append([]byte(cal), 0)
	n := 0
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix) && n < max; k, _ = c.Next() {
		n++
	}
	return n
}

// SyncCalendars lists the calendars with queued operations, in id order.
func (t *Tx) SyncCalendars() []string {
	b := t.tx.Bucket(bucketSync)
	if b == nil {
		return nil
	}
	var out []string
	c := b.Cursor()
	for k, _ := c.First(); k != nil; {
		i := bytes.IndexByte(k, 0)
		if i < 0 {
			k, _ = c.Next()
			continue
		}
		out = append(out, string(k[:i]))
		// Skip the rest of this calendar: seek past cal ++ 0 ++ ff...
		next := append(append([]byte(nil), k[:i]...), 1)
		k, _ = c.Seek(next)
	}
	return out
}

// DeleteSync removes operations of cal that Google has.
func (t *Tx) DeleteSync(cal string, seqs []uint64) error {
	b := t.tx.Bucket(bucketSync)
	if b == nil {
		return nil
	}
	for _, s := range seqs {
		if err := b.Delete(syncKey(cal, s)); err != nil {
			return err
		}
	}
	return nil
}

// dropSync removes every queued operation of cal.
func (t *Tx) dropSync(cal string) error {
	b := t.tx.Bucket(bucketSync)
	if b == nil {
		return nil
	}
	prefix := append([]byte(cal), 0)
	var keys [][]byte
	c := b.Cursor()
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		keys = append(keys, bytes.Clone(k))
	}
	for _, k := range keys {
		if err := b.Delete(k); err != nil {
			return err
		}
	}
	return nil
}
