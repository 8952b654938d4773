package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The calendar sync outbox: every decision that changes a confirmed booking
// of a calendar linked to an external calendar leaves an entry here, in the same transaction
// as the decision (see actor). The calendarsync worker drains it per
// calendar, in sequence order, off the writers' path, and deletes what
// the external calendar has. Replay does not fill it (history is not mirrored again).

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
	// Sub orders several operations queued by one command (the backfill
	// of a new link); 0 for the others.
	Sub uint32
	Op  byte
	// ExternalCalendar is the linked external calendar's id when it was
	// decided.
	ExternalCalendar string
	Booking          Booking // the booking as decided
}

const syncVersion = 1

func syncKey(cal string, seq uint64) []byte { return syncSubKey(cal, seq, 0) }

// syncSubKey is the key of an entry: cal ++ 0 ++ seq, and ++ sub when sub
// is not 0 (so that the keys of earlier builds stay as they were).
func syncSubKey(cal string, seq uint64, sub uint32) []byte {
	k := make([]byte, 0, len(cal)+13)
	k = append(k, cal...)
	k = append(k, 0)
	k = binary.BigEndian.AppendUint64(k, seq)
	if sub != 0 {
		k = binary.BigEndian.AppendUint32(k, sub)
	}
	return k
}

func encodeSync(e *SyncEntry) []byte {
	v := make([]byte, 0, 200+len(e.Booking.Customer)+len(e.Booking.Metadata))
	v = append(v, syncVersion, e.Op)
	v = AppendString(v, e.ExternalCalendar)
	return AppendBooking(v, &e.Booking)
}

// PutSync queues a mirror operation.
func (t *Tx) PutSync(e SyncEntry) error {
	b, err := t.createBucket(bucketSync)
	if err != nil {
		return err
	}
	return b.Put(syncSubKey(e.Calendar, e.Seq, e.Sub), encodeSync(&e))
}

func decodeSync(k, v []byte) (SyncEntry, error) {
	var e SyncEntry
	i := bytes.IndexByte(k, 0)
	if i < 0 || len(k) != i+9 && len(k) != i+13 {
		return e, fmt.Errorf("data: malformed sync key %x", k)
	}
	e.Calendar, e.Seq = string(k[:i]), binary.BigEndian.Uint64(k[i+1:])
	if len(k) == i+13 {
		e.Sub = binary.BigEndian.Uint32(k[i+9:])
	}
	r := NewReader(v)
	if r.Byte() != syncVersion {
		return e, ErrCorrupt
	}
	e.Op = r.Byte()
	e.ExternalCalendar = r.String()
	e.Booking = ReadBooking(r)
	return e, r.Err()
}

// PendingSync returns up to max queued operations of calendar cal, in
// sequence order.
func (t *Tx) PendingSync(cal string, max int) ([]SyncEntry, error) {
	b := t.bucket(bucketSync)
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
	b := t.bucket(bucketSync)
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
	b := t.bucket(bucketSync)
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

// DeleteSync removes operations of cal that the external calendar has.
func (t *Tx) DeleteSync(cal string, seqs []uint64) error {
	b := t.bucket(bucketSync)
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

// DeleteSyncEntries removes the given operations (by calendar, sequence
// and sub).
func (t *Tx) DeleteSyncEntries(es []SyncEntry) error {
	b := t.bucket(bucketSync)
	if b == nil {
		return nil
	}
	for _, e := range es {
		if err := b.Delete(syncSubKey(e.Calendar, e.Seq, e.Sub)); err != nil {
			return err
		}
	}
	return nil
}

// SyncQueued reports whether operation e is still queued.
func (t *Tx) SyncQueued(e SyncEntry) bool {
	b := t.bucket(bucketSync)
	return b != nil && b.Get(syncSubKey(e.Calendar, e.Seq, e.Sub)) != nil
}

// dropSync removes every queued operation of cal.
func (t *Tx) dropSync(cal string) error {
	b := t.bucket(bucketSync)
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
