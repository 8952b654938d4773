package data

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"
)

// Busy blocks: intervals that are busy outside bookline (found in a linked
// external calendar). They enter the index only through the commands
// busy.set and busy.clear, so they are replayed like everything else. They
// live in their own buckets, not in the slot index: blocks may overlap each
// other and existing bookings (the outside world does not ask bookline), so
// keeping them out of the slots leaves the slot invariants (no overlap beyond
// capacity, ListBookings) untouched. A live block makes every
// overlapping interval unbookable, whatever the calendar's capacity.

var (
	subBusy      = []byte("k") // block id -> BusyBlock (binary, see encodeBusy), cleared ones too
	subBusySlots = []byte("j") // start(8) ++ block id -> end(8), live blocks only
	keyBusySpan  = []byte("busyspan")
)

// BusyBlock is one busy interval of a calendar. A cleared block keeps its
// record (with Cleared set), so that its last change (Seq) stays known.
type BusyBlock struct {
	ID      string    `json:"id"`
	Start   time.Time `json:"start"`
	End     time.Time `json:"end"`
	Seq     uint64    `json:"seq"` // stream sequence of the last set or clear
	Cleared bool      `json:"cleared,omitempty"`
}

// Interval is the block's interval.
func (b *BusyBlock) Interval() Interval { return Interval{Start: b.Start, End: b.End} }

const busyVersion = 1

func encodeBusy(b *BusyBlock) []byte {
	v := make([]byte, 0, 26)
	v = append(v, busyVersion)
	v = AppendTime(v, b.Start)
	v = AppendTime(v, b.End)
	v = binary.BigEndian.AppendUint64(v, b.Seq)
	if b.Cleared {
		return append(v, 1)
	}
	return append(v, 0)
}

func decodeBusy(id string, v []byte) (BusyBlock, error) {
	r := NewReader(v)
	b := BusyBlock{ID: id}
	if r.Byte() != busyVersion {
		return b, ErrCorrupt
	}
	b.Start, b.End = r.Time(), r.Time()
	b.Seq = uint64(r.Int64())
	b.Cleared = r.Byte() == 1
	return b, r.Err()
}

// busyBuckets returns the calendar's busy buckets, creating them when asked.
func (t *Tx) busyBuckets(calID string, create bool) (cb, recs, slots *bkt, err error) {
	tc := t.txCal(calID)
	if !create && tc.busyLooked && tc.cb == nil {
		return nil, nil, nil, nil // most calendars have no busy time
	}
	cb, err = t.calBucket(calID, create)
	if cb == nil || err != nil {
		tc.busyLooked = err == nil
		return nil, nil, nil, err
	}
	if !tc.busyLooked {
		tc.busyRecs, tc.busySlots, tc.busyLooked = cb.Bucket(subBusy), cb.Bucket(subBusySlots), true
	}
	if !create || tc.busyRecs != nil && tc.busySlots != nil {
		return cb, tc.busyRecs, tc.busySlots, nil
	}
	if recs, err = cb.CreateBucketIfNotExists(subBusy); err != nil {
		return nil, nil, nil, err
	}
	if slots, err = cb.CreateBucketIfNotExists(subBusySlots); err != nil {
		return nil, nil, nil, err
	}
	tc.busyRecs, tc.busySlots = recs, slots
	return cb, recs, slots, nil
}

// PutBusy records block b of calID: live (Cleared false) blocks occupy
// their interval, cleared ones do not. It replaces an earlier record of the
// same id.
func (t *Tx) PutBusy(calID string, b BusyBlock) error {
	cb, recs, slots, err := t.busyBuckets(calID, true)
	if err != nil {
		return err
	}
	if old := recs.Get([]byte(b.ID)); old != nil {
		prev, err := decodeBusy(b.ID, old)
		if err != nil {
			return fmt.Errorf("data: busy block %s: %w", b.ID, err)
		}
		if !prev.Cleared {
			if err := slots.Delete(busySlotKey(prev.Start, prev.ID)); err != nil {
				return err
			}
		}
	}
	if err := recs.Put([]byte(b.ID), encodeBusy(&b)); err != nil {
		return err
	}
	if b.Cleared {
		return nil
	}
	span := b.End.Sub(b.Start)
	if v := cb.Get(keyBusySpan); v == nil || time.Duration(binary.BigEndian.Uint64(v)) < span {
		if err := cb.Put(keyBusySpan, binary.BigEndian.AppendUint64(nil, uint64(span))); err != nil {
			return err
		}
	}
	return slots.Put(busySlotKey(b.Start, b.ID), EncodeTime(b.End))
}

// Busy returns block id of calID (cleared or not); ok is false when the
// calendar never had it.
func (t *Tx) Busy(calID, id string) (b BusyBlock, ok bool, err error) {
	_, recs, _, _ := t.busyBuckets(calID, false)
	if recs == nil {
		return b, false, nil
	}
	v := recs.Get([]byte(id))
	if v == nil {
		return b, false, nil
	}
	b, err = decodeBusy(id, v)
	return b, err == nil, err
}

// BusyBlocks lists every block record of calID (cleared ones too), in id
// order.
func (t *Tx) BusyBlocks(calID string) ([]BusyBlock, error) {
	_, recs, _, _ := t.busyBuckets(calID, false)
	if recs == nil {
		return nil, nil
	}
	var out []BusyBlock
	err := recs.ForEach(func(k, v []byte) error {
		b, err := decodeBusy(string(k), v)
		if err != nil {
			return fmt.Errorf("data: busy block %s: %w", k, err)
		}
		out = append(out, b)
		return nil
	})
	return out, err
}

// FirstBusy returns a live busy block of calID that overlaps iv, if any (the
// one with the earliest start).
func (t *Tx) FirstBusy(calID string, iv Interval) (id string, found Interval, ok bool) {
	cb, _, slots, _ := t.busyBuckets(calID, false)
	if slots == nil {
		return "", Interval{}, false
	}
	var span time.Duration
	if v := cb.Get(keyBusySpan); v != nil {
		span = time.Duration(binary.BigEndian.Uint64(v))
	}
	c := slots.Cursor()
	end := seekKey(iv.End)
	for k, v := c.Seek(seekKey(iv.Start.Add(-span))); k != nil && bytes.Compare(k[:8], end) < 0; k, v = c.Next() {
		cand := Interval{Start: DecodeTime(k[:8]), End: DecodeTime(v)}
		if cand.Overlaps(iv) {
			return string(k[8:]), cand, true
		}
	}
	return "", Interval{}, false
}

// BusyNear calls fn, in start order, for every live busy block of calID
// that overlaps [from, to): FirstBusy's scan over a whole range, for a
// query that checks many intervals of it at once. fn returns false to stop.
func (t *Tx) BusyNear(calID string, from, to time.Time, fn func(Interval) bool) {
	cb, _, slots, _ := t.busyBuckets(calID, false)
	if slots == nil {
		return
	}
	var span time.Duration
	if v := cb.Get(keyBusySpan); v != nil {
		span = time.Duration(binary.BigEndian.Uint64(v))
	}
	c := slots.Cursor()
	end := seekKey(to)
	w := Interval{Start: from, End: to}
	for k, v := c.Seek(seekKey(from.Add(-span))); k != nil && bytes.Compare(k[:8], end) < 0; k, v = c.Next() {
		if cand := (Interval{Start: DecodeTime(k[:8]), End: DecodeTime(v)}); cand.Overlaps(w) && !fn(cand) {
			return
		}
	}
}

// ForEachBusySlot calls fn for every live block interval of calID in start
// order (for invariant checks).
func (t *Tx) ForEachBusySlot(calID string, fn func(id string, iv Interval) error) error {
	_, _, slots, _ := t.busyBuckets(calID, false)
	if slots == nil {
		return nil
	}
	return slots.ForEach(func(k, v []byte) error {
		if len(k) < 8 || len(v) < 8 {
			return fmt.Errorf("data: malformed busy slot %x", k)
		}
		return fn(string(k[8:]), Interval{Start: DecodeTime(k[:8]), End: DecodeTime(v)})
	})
}

// busySlotKey is start(8) ++ block id: block ids are the busy source's, kept
// as text.
func busySlotKey(start time.Time, id string) []byte {
	return append(EncodeTime(start), id...)
}
