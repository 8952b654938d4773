package data

import (
	"encoding/binary"
	"time"
)

// The index keeps what was decided, not how it was answered: a booking
// record holds the booking in a compact form, and the record of the
// request that created it (most request records are creations, and their
// reply is the booking itself) rides along instead of a request record
// with a copy of the reply. Once the booking changes, the form it was
// created in is kept with it, so a retry of the creation still gets the
// reply it got the first time, byte for byte. The booking's id and
// calendar are its key's.

// Creation is the request record of a booking's creation, kept in the
// booking's record (see Tx.PutRequest).
type Creation struct {
	// V and Kind are the reply's schema version and command type, as
	// the actor codes them; data keeps them only.
	V, Kind     uint8
	Seq         uint64
	Expires     time.Time // zero: kept forever
	Fingerprint [16]byte
}

// Stored booking versions: 4 is 3 with a second flags byte after the
// first (sb2 flags), written only for a booking that needs one, so every
// other booking keeps the bytes it always had.
const (
	storedBookingVersion   = 3
	storedBookingVersionV4 = 4
)

// Flags of a stored booking.
const (
	sbCancelled = 1 << iota
	sbExpires
	sbBuffers
	sbMetadata
	sbCreation
	sbCreationExpires
	sbOriginal
	sbSeries
)

// Flags of a stored booking's second flags byte (version 4).
const (
	sb2Collective = 1 << iota
	// sb2Move: the part's pending move and the move record's part
	// (MoveID, MoveOf), set only while a collective is being moved or
	// on its move records, so stored data of earlier builds reads the same.
	sb2Move
)

var statusCodes = []string{"", StatusConfirmed, StatusCancelled, StatusHeld, StatusReleased, StatusExpired, StatusPending, StatusAborted, StatusMoved}

// appendDuration writes whole seconds in a byte or three, other
// durations in full.
func appendDuration(b []byte, d time.Duration) []byte {
	if d >= 0 && d%time.Second == 0 {
		return binary.AppendUvarint(b, uint64(d/time.Second)<<1)
	}
	return binary.AppendUvarint(b, uint64(d)<<1|1)
}

func (r *Reader) duration() time.Duration {
	v := r.Uvarint()
	if v&1 == 0 {
		return time.Duration(v>>1) * time.Second
	}
	return time.Duration(v >> 1)
}

// appendCompactBooking writes bk without its id and calendar, and with the
// creation record and original form given (either may be nil).
func appendCompactBooking(b []byte, bk *Booking, cr *Creation, original []byte) []byte {
	var flags byte
	if bk.CancelledAt != nil {
		flags |= sbCancelled
	}
	if bk.ExpiresAt != nil {
		flags |= sbExpires
	}
	if bk.BufferBefore != 0 || bk.BufferAfter != 0 {
		flags |= sbBuffers
	}
	if len(bk.Metadata) > 0 {
		flags |= sbMetadata
	}
	if cr != nil {
		flags |= sbCreation
		if !cr.Expires.IsZero() {
			flags |= sbCreationExpires
		}
	}
	if original != nil {
		flags |= sbOriginal
	}
	if bk.Series != nil || bk.SeriesID != "" {
		flags |= sbSeries
	}
	var flags2 byte
	if len(bk.CalendarIDs) > 0 {
		flags2 |= sb2Collective
	}
	if bk.MoveID != "" || bk.MoveOf != "" {
		flags2 |= sb2Move
	}
	if flags2 != 0 {
		b = append(b, storedBookingVersionV4, flags, flags2)
	} else {
		b = append(b, storedBookingVersion, flags)
	}
	b = AppendTime(b, bk.Start)
	b = appendDuration(b, bk.End.Sub(bk.Start))
	b = AppendString(b, bk.Customer)
	status := byte(0)
	for i, s := range statusCodes[1:] {
		if bk.Status == s {
			status = byte(i + 1)
		}
	}
	b = append(b, status)
	if status == 0 {
		b = AppendString(b, bk.Status)
	}
	b = AppendTime(b, bk.CreatedAt)
	if bk.CancelledAt != nil {
		b = AppendTime(b, *bk.CancelledAt)
	}
	if bk.ExpiresAt != nil {
		b = AppendTime(b, *bk.ExpiresAt)
	}
	if flags&sbBuffers != 0 {
		b = appendDuration(b, bk.BufferBefore)
		b = appendDuration(b, bk.BufferAfter)
	}
	if flags&sbMetadata != 0 {
		b = AppendBytes(b, bk.Metadata)
	}
	if flags&sbSeries != 0 {
		b = appendSeries(b, bk)
	}
	if flags2&sb2Collective != 0 {
		b = appendMembers(b, bk.CalendarIDs)
	}
	if flags2&sb2Move != 0 {
		b = AppendString(AppendString(b, bk.MoveID), bk.MoveOf)
	}
	if cr != nil {
		b = binary.AppendUvarint(b, uint64(cr.V))
		b = append(b, cr.Kind)
		b = binary.AppendUvarint(b, cr.Seq)
		if !cr.Expires.IsZero() {
			b = AppendTime(b, cr.Expires)
		}
		b = append(b, cr.Fingerprint[:]...)
	}
	if original != nil {
		b = AppendBytes(b, original)
	}
	return b
}

// storedBooking is a decoded booking record.
type storedBooking struct {
	Booking
	creation *Creation
	original []byte // compact form of the booking as created, nil if unchanged
}

func decodeStoredBooking(calID, id string, v []byte) (storedBooking, error) {
	var s storedBooking
	r := NewReader(v)
	version := r.Byte()
	if version != storedBookingVersion && version != storedBookingVersionV4 {
		return s, ErrCorrupt
	}
	flags := r.Byte()
	var flags2 byte
	if version == storedBookingVersionV4 {
		flags2 = r.Byte()
	}
	bk := &s.Booking
	bk.ID, bk.CalendarID = id, calID
	bk.Start = r.Time()
	bk.End = bk.Start.Add(r.duration())
	bk.Customer = r.String()
	if st := int(r.Byte()); st > 0 && st < len(statusCodes) {
		bk.Status = statusCodes[st]
	} else if st == 0 {
		bk.Status = r.String()
	} else {
		return s, ErrCorrupt
	}
	bk.CreatedAt = r.Time()
	if flags&sbCancelled != 0 {
		t := r.Time()
		bk.CancelledAt = &t
	}
	if flags&sbExpires != 0 {
		t := r.Time()
		bk.ExpiresAt = &t
	}
	if flags&sbBuffers != 0 {
		bk.BufferBefore = r.duration()
		bk.BufferAfter = r.duration()
	}
	if flags&sbMetadata != 0 {
		bk.Metadata = r.Bytes()
	}
	if flags&sbSeries != 0 {
		r.series(bk)
	}
	if flags2&sb2Collective != 0 {
		bk.CalendarIDs = r.members()
	}
	if flags2&sb2Move != 0 {
		bk.MoveID, bk.MoveOf = r.String(), r.String()
	}
	if flags&sbCreation != 0 {
		cr := &Creation{V: uint8(r.Uvarint()), Kind: r.Byte(), Seq: r.Uvarint()}
		if flags&sbCreationExpires != 0 {
			cr.Expires = r.Time()
		}
		if len(r.b) < 16 {
			return s, ErrCorrupt
		}
		copy(cr.Fingerprint[:], r.b[:16])
		r.b = r.b[16:]
		s.creation = cr
	}
	if flags&sbOriginal != 0 {
		s.original = r.Bytes()
	}
	return s, r.Err()
}

// created is the booking as its creation answered it.
func (s *storedBooking) created() (Booking, error) {
	if s.original == nil {
		return s.Booking, nil
	}
	o, err := decodeStoredBooking(s.CalendarID, s.ID, s.original)
	return o.Booking, err
}

func (s *storedBooking) encode() []byte {
	return appendCompactBooking(make([]byte, 0, 64+len(s.Customer)+len(s.Metadata)+len(s.original)), &s.Booking, s.creation, s.original)
}

// AppendRecordBooking appends bk, a booking of the calendar whose request
// record is written, without its calendar: its id and its compact form.
func AppendRecordBooking(b []byte, bk *Booking) []byte {
	b = AppendBytes(b, idKey(bk.ID))
	return AppendBytes(b, appendCompactBooking(nil, bk, nil, nil))
}

// ReadRecordBooking reads what AppendRecordBooking wrote, for a record of
// calendar calID.
func ReadRecordBooking(r *Reader, calID string) Booking {
	id, _ := idFromKey(r.Bytes())
	v := r.Bytes()
	if r.Err() != nil {
		return Booking{}
	}
	s, err := decodeStoredBooking(calID, id, v)
	if err != nil {
		r.fail()
	}
	return s.Booking
}

// appendSeries writes an occurrence's series id and place in its series
// (an empty request id and count 0 when it has none).
func appendSeries(b []byte, bk *Booking) []byte {
	b = AppendString(b, bk.SeriesID)
	var ref SeriesRef
	if bk.Series != nil {
		ref = *bk.Series
	}
	b = AppendString(b, ref.RequestID)
	b = binary.AppendUvarint(b, uint64(ref.Index))
	return binary.AppendUvarint(b, uint64(ref.Count))
}

// series reads what appendSeries wrote into bk.
func (r *Reader) series(bk *Booking) {
	bk.SeriesID = r.String()
	ref := SeriesRef{RequestID: r.String()}
	i, n := r.Uvarint(), r.Uvarint()
	if n > 1<<20 || i >= max(n, 1) {
		r.fail()
		return
	}
	ref.Index, ref.Count = int(i), int(n)
	if ref != (SeriesRef{}) {
		bk.Series = &ref
	}
}

// MaxMembers bounds a collective booking's member calendars.
const MaxMembers = 16

// appendMembers writes a collective's member calendars.
func appendMembers(b []byte, ids []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(ids)))
	for _, id := range ids {
		b = AppendString(b, id)
	}
	return b
}

// members reads what appendMembers wrote.
func (r *Reader) members() []string {
	n := r.Uvarint()
	if n == 0 || n > MaxMembers {
		r.fail()
		return nil
	}
	ids := make([]string, n)
	for i := range ids {
		ids[i] = r.String()
	}
	return ids
}
