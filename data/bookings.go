package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// BookingExists reports whether calendar calID has a booking (or hold)
// record with id, whatever its status, without decoding it.
func (t *Tx) BookingExists(calID, id string) bool {
	if t.knownAbsent(calID, id) {
		return false
	}
	if t.calTree(calID, iBookings).Get(idKey(id)) != nil {
		return true
	}
	t.txCal(calID).absent = id
	return false
}

// knownAbsent reports whether the transaction found booking id of calID
// absent and wrote no booking of calID since: a new command looks up the
// booking its request id would create up to three times (its request
// record, whether it was made before, the record it replaces).
func (t *Tx) knownAbsent(calID, id string) bool {
	tc := t.byCal[calID]
	return tc != nil && tc.absent == id && id != ""
}

// Booking returns the booking id of calendar calID, or ErrNotFound.
func (t *Tx) Booking(calID, id string) (Booking, error) {
	s, err := t.storedBooking(calID, id)
	return s.Booking, err
}

func (t *Tx) storedBooking(calID, id string) (storedBooking, error) {
	v := t.calTree(calID, iBookings).Get(idKey(id))
	if v == nil {
		return storedBooking{}, ErrNotFound
	}
	s, err := decodeStoredBooking(calID, id, v)
	if err != nil {
		return s, fmt.Errorf("data: booking %s/%s: %w", calID, id, err)
	}
	return s, nil
}

func slotKey(start time.Time, id string) []byte {
	k := make([]byte, 0, 8+17)
	k = append(k, EncodeTime(start)...)
	return append(k, idKey(id)...)
}

// PutBooking stores bk and keeps the slot index in step with its status: a
// confirmed booking or a hold occupies its interval, anything else does not.
// If bk replaces a record with another start, the old slot is removed too.
// A replaced record's creation record stays with it, and the first change
// keeps the form the booking was created in (see stored.go).
// The caller (the partition's actor) has already checked the rules.
func (t *Tx) PutBooking(bk Booking) error { return t.putBooking(bk, nil, false) }

// CreateBooking stores bk, a booking (or hold) whose id has no record yet,
// with cr, the record of the request that creates it (nil: none is kept
// with it). See PutRequest.
func (t *Tx) CreateBooking(bk Booking, cr *Creation) error { return t.putBooking(bk, cr, true) }

func (t *Tx) putBooking(bk Booking, cr *Creation, fresh bool) error {
	if err := t.calMark(bk.CalendarID); err != nil {
		return err
	}
	bookings, slots := t.calTree(bk.CalendarID, iBookings), t.calTree(bk.CalendarID, iSlots)
	ik := idKey(bk.ID)
	var old []byte
	if !t.knownAbsent(bk.CalendarID, bk.ID) {
		old = bookings.Get(ik)
	}
	t.txCal(bk.CalendarID).absent = ""
	if fresh && old != nil {
		return fmt.Errorf("data: booking %s/%s exists already", bk.CalendarID, bk.ID)
	}
	var original []byte
	if old != nil {
		prev, err := decodeStoredBooking(bk.CalendarID, bk.ID, old)
		if err != nil {
			return fmt.Errorf("data: booking %s: %w", bk.ID, err)
		}
		if !prev.Start.Equal(bk.Start) {
			if err := slots.Delete(slotKey(prev.Start, prev.ID)); err != nil {
				return err
			}
		}
		if prev.Status == StatusHeld && prev.ExpiresAt != nil {
			if err := t.holdIndex(false, *prev.ExpiresAt, prev.CalendarID, prev.ID); err != nil {
				return err
			}
		}
		if prev.Status == StatusPending && bk.Status != StatusPending {
			if err := t.pendingIndex(false, pendingDue(&prev.Booking), prev.CalendarID, prev.ID); err != nil {
				return err
			}
		}
		cr, original = prev.creation, prev.original
		if cr != nil && original == nil {
			was := appendCompactBooking(nil, &prev.Booking, nil, nil)
			if !bytes.Equal(was, appendCompactBooking(nil, &bk, nil, nil)) {
				original = was
			}
		}
	}
	v := appendCompactBooking(make([]byte, 0, 64+len(bk.Customer)+len(bk.Metadata)+len(original)), &bk, cr, original)
	if err := bookings.Put(ik, v); err != nil {
		return err
	}
	if bk.Status == StatusPending {
		if err := t.pendingIndex(true, pendingDue(&bk), bk.CalendarID, bk.ID); err != nil {
			return err
		}
	}
	key := slotKey(bk.Start, bk.ID)
	if !Occupies(bk.Status) {
		return slots.Delete(key)
	}
	if bk.Status == StatusHeld && bk.ExpiresAt != nil {
		if err := t.holdIndex(true, *bk.ExpiresAt, bk.CalendarID, bk.ID); err != nil {
			return err
		}
	}
	if err := t.growMaxSpan(bk.CalendarID, bk.End.Sub(bk.Start)+bk.BufferBefore+bk.BufferAfter); err != nil {
		return err
	}
	return slots.Put(key, encodeSlotValue(&bk))
}

// dropCreation removes the creation record kept in s, a stored booking,
// and the form as created kept only for that record's reply.
func (t *Tx) dropCreation(s storedBooking) error {
	t.txCal(s.CalendarID).absent = ""
	s.creation, s.original = nil, nil
	return t.calTree(s.CalendarID, iBookings).Put(idKey(s.ID), s.encode())
}

// Slot entry values: flags (1: hold, 2: buffers), the length (see
// appendDuration), then the hold's expiry (8) and the buffers when flagged.
const (
	slotHold    = 1
	slotBuffers = 2
)

func encodeSlotValue(bk *Booking) []byte {
	v := make([]byte, 1, 24)
	if bk.Status == StatusHeld {
		v[0] |= slotHold
	}
	if bk.BufferBefore != 0 || bk.BufferAfter != 0 {
		v[0] |= slotBuffers
	}
	v = appendDuration(v, bk.End.Sub(bk.Start))
	if bk.Status == StatusHeld {
		var exp int64
		if bk.ExpiresAt != nil {
			exp = bk.ExpiresAt.UnixNano()
		}
		v = AppendInt64(v, exp)
	}
	if v[0]&slotBuffers != 0 {
		v = appendDuration(v, bk.BufferBefore)
		v = appendDuration(v, bk.BufferAfter)
	}
	return v
}

// SlotEntry is one entry of the slot index: an interval occupied by a confirmed
// booking or a hold.
type SlotEntry struct {
	ID           string
	Start, End   time.Time
	Hold         bool
	Expires      time.Time // holds only
	BufferBefore time.Duration
	BufferAfter  time.Duration
}

// Interval is the slot's own interval.
func (s *SlotEntry) Interval() Interval { return Interval{Start: s.Start, End: s.End} }

// Buffered is the slot's interval widened by its buffers.
func (s *SlotEntry) Buffered() Interval {
	return Interval{Start: s.Start.Add(-s.BufferBefore), End: s.End.Add(s.BufferAfter)}
}

// LiveAt reports whether the slot occupies its interval at now: a hold stops
// occupying when it expires, even before its expiry is recorded.
func (s *SlotEntry) LiveAt(now time.Time) bool { return !s.Hold || now.Before(s.Expires) }

func decodeSlot(k, v []byte) SlotEntry {
	s := decodeSlotTimes(k, v)
	s.ID, _ = idFromKey(k[8:])
	return s
}

// decodeSlotTimes is decodeSlot without the id.
func decodeSlotTimes(k, v []byte) SlotEntry {
	s := SlotEntry{Start: DecodeTime(k[:8])}
	if len(v) == 0 {
		return s
	}
	r := NewReader(v[1:])
	s.End = s.Start.Add(r.duration())
	s.Hold = v[0]&slotHold != 0
	if s.Hold {
		s.Expires = time.Unix(0, r.Int64()).UTC()
	}
	if v[0]&slotBuffers != 0 {
		s.BufferBefore = r.duration()
		s.BufferAfter = r.duration()
	}
	return s
}

// bucketSpan lists every calendar that has bookings or request records,
// with its longest buffered span ever indexed (8 bytes; empty before its
// first slot). A flat tree: a bucket per calendar costs an allocation
// each time a transaction opens it.
var bucketSpan = []byte("span")

// calMark lists calID in bucketSpan (once per transaction).
func (t *Tx) calMark(calID string) error {
	tc := t.txCal(calID)
	if tc.marked {
		return nil
	}
	b := t.bucket(bucketSpan)
	if b.Get([]byte(calID)) == nil {
		if err := b.Put([]byte(calID), []byte{}); err != nil {
			return err
		}
	}
	tc.marked = true
	return nil
}

// growMaxSpan records span if it is the calendar's longest so far. Scans for
// slots near an interval look back this far; it never shrinks, which only
// costs a longer scan.
func (t *Tx) growMaxSpan(calID string, span time.Duration) error {
	if t.maxSpan(calID) >= span {
		return nil
	}
	if err := t.bucket(bucketSpan).Put([]byte(calID), binary.BigEndian.AppendUint64(nil, uint64(span))); err != nil {
		return err
	}
	t.txCal(calID).span = span
	return nil
}

// maxSpan is the longest buffered span ever indexed in calendar calID
// (read once per transaction).
func (t *Tx) maxSpan(calID string) time.Duration {
	tc := t.txCal(calID)
	if !tc.spanLoaded {
		tc.span, tc.spanLoaded = 0, true
		if v := t.bucket(bucketSpan).Get([]byte(calID)); len(v) == 8 {
			tc.span = time.Duration(binary.BigEndian.Uint64(v))
		}
	}
	return tc.span
}

// SlotsNear calls fn, in start order, for every slot of calID whose buffered
// span overlaps [from, to) (a superset: fn filters further). fn returns false
// to stop.
func (t *Tx) SlotsNear(calID string, from, to time.Time, fn func(SlotEntry) bool) {
	t.slotsNear(calID, from, to, true, fn)
}

// SlotTimesNear is SlotsNear without the entries' ids (ID is empty):
// decoding an id costs an allocation per entry, which a scan of many
// entries that needs only their times need not pay.
func (t *Tx) SlotTimesNear(calID string, from, to time.Time, fn func(SlotEntry) bool) {
	t.slotsNear(calID, from, to, false, fn)
}

func (t *Tx) slotsNear(calID string, from, to time.Time, ids bool, fn func(SlotEntry) bool) {
	span := t.maxSpan(calID)
	c := t.calTree(calID, iSlots).Cursor()
	end := seekKey(to.Add(span))
	for k, v := c.Seek(seekKey(from.Add(-span))); k != nil && bytes.Compare(k[:8], end) < 0; k, v = c.Next() {
		s := decodeSlotTimes(k, v)
		if !s.Buffered().Overlaps(Interval{Start: from, End: to}) {
			continue
		}
		if ids {
			s.ID, _ = idFromKey(k[8:])
		}
		if !fn(s) {
			return
		}
	}
}

var bucketHolds = []byte("holdexp") // expiry(8) ++ calendar ++ 0 ++ hold id -> nil

func (t *Tx) holdIndex(put bool, exp time.Time, calID, id string) error {
	b, err := t.createBucket(bucketHolds)
	if err != nil {
		return err
	}
	k := append(append(append(EncodeTime(exp), calID...), 0), id...)
	if put {
		return b.Put(k, nil)
	}
	return b.Delete(k)
}

// DropDueHold removes a hold expiry index entry.
func (t *Tx) DropDueHold(h DueHold) error { return t.holdIndex(false, h.Expires, h.Calendar, h.ID) }

// DueHold is a hold whose expiry has passed.
type DueHold struct {
	Calendar, ID string
	Expires      time.Time
}

// DueHolds lists up to max holds that expire at or before now, earliest
// first.
func (t *Tx) DueHolds(now time.Time, max int) []DueHold {
	return t.DueHoldsWhere(now, max, func(string) bool { return true })
}

// Cursor is an opaque position in a booking listing.
type Cursor []byte

// ListBookings returns up to limit confirmed bookings of calID that overlap
// [from, to), ordered by start, beginning after the position after (nil for
// the first page). next is non-nil when more may follow. A limit of zero or
// less means no limit.
func (t *Tx) ListBookings(calID string, from, to time.Time, limit int, after Cursor) (out []Booking, next Cursor, err error) {
	slots := t.calTree(calID, iSlots)
	if slots == nil {
		return nil, nil, nil
	}
	c := slots.Cursor()
	var k, v []byte
	if after != nil {
		k, v = c.Seek(after)
		if k != nil && bytes.Equal(k, after) {
			k, v = c.Next()
		}
	} else {
		// A booking that starts before from reaches into the range only if
		// it is no longer than the calendar's longest.
		k, v = c.Seek(seekKey(from.Add(-t.maxSpan(calID))))
	}
	toKey := seekKey(to)
	for ; k != nil; k, v = c.Next() {
		if bytes.Compare(k[:8], toKey) >= 0 {
			break
		}
		s := decodeSlot(k, v)
		if s.Hold || !s.End.After(from) {
			continue
		}
		if limit > 0 && len(out) == limit {
			return out, Cursor(out[len(out)-1].slotKey()), nil
		}
		bk, err := t.Booking(calID, s.ID)
		if err != nil {
			return nil, nil, fmt.Errorf("data: slot %x without booking: %w", k, err)
		}
		out = append(out, bk)
	}
	return out, nil, nil
}

func (b Booking) slotKey() []byte { return slotKey(b.Start, b.ID) }

// ForEachConfirmed calls fn for every confirmed booking interval of calID in
// start order.
func (t *Tx) ForEachConfirmed(calID string, fn func(id string, iv Interval) error) error {
	slots := t.calTree(calID, iSlots)
	if slots == nil {
		return nil
	}
	return slots.ForEach(func(k, v []byte) error {
		if k == nil || v == nil || len(k) < 8 {
			return nil
		}
		if s := decodeSlot(k, v); !s.Hold {
			return fn(s.ID, s.Interval())
		}
		return nil
	})
}

// ForEachSlot calls fn for every entry of calID's slot index (confirmed
// bookings and holds, expired or not) in start order.
func (t *Tx) ForEachSlot(calID string, fn func(SlotEntry) error) error {
	slots := t.calTree(calID, iSlots)
	if slots == nil {
		return nil
	}
	return slots.ForEach(func(k, v []byte) error {
		if len(k) < 8 || v == nil {
			return nil
		}
		return fn(decodeSlot(k, v))
	})
}
