package data

import (
	"encoding/binary"
	"errors"
	"time"
)

// Records written on the writers' path (bookings, request records, outbox
// entries) are binary, not JSON: encoding runs inside the one write
// transaction that every partition shares, and JSON costs several
// microseconds per record and twice the bytes. JSON is produced only at the
// edges (HTTP, replies, events), outside the transaction. Every encoding is
// deterministic, so two indexes built from the same log are byte-identical.

// ErrCorrupt is returned when a stored record cannot be decoded.
var ErrCorrupt = errors.New("data: corrupt record")

// AppendString appends a length-prefixed string.
func AppendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// AppendBytes appends a length-prefixed byte slice.
func AppendBytes(b, v []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(v)))
	return append(b, v...)
}

// AppendInt64 appends v as 8 big-endian bytes.
func AppendInt64(b []byte, v int64) []byte { return binary.BigEndian.AppendUint64(b, uint64(v)) }

// AppendUvarint appends v as a uvarint.
func AppendUvarint(b []byte, v uint64) []byte { return binary.AppendUvarint(b, v) }

// AppendTime appends t as unix nanoseconds.
func AppendTime(b []byte, t time.Time) []byte { return AppendInt64(b, t.UnixNano()) }

// Reader decodes what the Append functions wrote. The first error sticks;
// reads after it return zero values.
type Reader struct {
	b   []byte
	err error
}

// NewReader reads b.
func NewReader(b []byte) *Reader { return &Reader{b: b} }

// Err is the first decoding error, if any.
func (r *Reader) Err() error { return r.err }

func (r *Reader) fail() { r.err, r.b = ErrCorrupt, nil }

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if len(r.b) < 1 {
		r.fail()
		return 0
	}
	v := r.b[0]
	r.b = r.b[1:]
	return v
}

// Uvarint reads a uvarint.
func (r *Reader) Uvarint() uint64 {
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.fail()
		return 0
	}
	r.b = r.b[n:]
	return v
}

// Bytes reads a length-prefixed byte slice (a copy).
func (r *Reader) Bytes() []byte {
	n := r.Uvarint()
	if r.err != nil || uint64(len(r.b)) < n {
		r.fail()
		return nil
	}
	v := make([]byte, n)
	copy(v, r.b)
	r.b = r.b[n:]
	return v
}

// String reads a length-prefixed string.
func (r *Reader) String() string { return string(r.Bytes()) }

// Int64 reads 8 big-endian bytes.
func (r *Reader) Int64() int64 {
	if len(r.b) < 8 {
		r.fail()
		return 0
	}
	v := binary.BigEndian.Uint64(r.b)
	r.b = r.b[8:]
	return int64(v)
}

// Time reads unix nanoseconds as a UTC time.
func (r *Reader) Time() time.Time { return time.Unix(0, r.Int64()).UTC() }

// Versions of the binary form of a booking: 3 is 2 followed by the
// occurrence's place in its series, written only for an occurrence, so
// every other booking keeps the bytes it always had.
const (
	bookingCodecVersion       = 2
	bookingCodecVersionSeries = 3
	// bookingCodecVersionMembers is 3 followed by a collective's member
	// calendars, written only for a collective's part.
	bookingCodecVersionMembers = 4
	// bookingCodecVersionMove is 4 followed by a collective's pending
	// move and a move record's part (Booking.MoveID, MoveOf), written
	// only for a part or move record of a collective being moved.
	bookingCodecVersionMove = 5
)

// AppendBooking appends the binary form of bk.
func AppendBooking(b []byte, bk *Booking) []byte {
	moving := len(bk.CalendarIDs) > 0 && (bk.MoveID != "" || bk.MoveOf != "")
	if moving {
		b = append(b, bookingCodecVersionMove)
	} else if len(bk.CalendarIDs) > 0 {
		b = append(b, bookingCodecVersionMembers)
	} else if bk.Series != nil || bk.SeriesID != "" {
		b = append(b, bookingCodecVersionSeries)
	} else {
		b = append(b, bookingCodecVersion)
	}
	b = AppendString(b, bk.ID)
	b = AppendString(b, bk.CalendarID)
	b = AppendTime(b, bk.Start)
	b = AppendTime(b, bk.End)
	b = AppendString(b, bk.Customer)
	b = AppendString(b, bk.Status)
	b = AppendTime(b, bk.CreatedAt)
	if bk.CancelledAt != nil {
		b = append(b, 1)
		b = AppendTime(b, *bk.CancelledAt)
	} else {
		b = append(b, 0)
	}
	if bk.ExpiresAt != nil {
		b = append(b, 1)
		b = AppendTime(b, *bk.ExpiresAt)
	} else {
		b = append(b, 0)
	}
	b = AppendInt64(b, int64(bk.BufferBefore))
	b = AppendInt64(b, int64(bk.BufferAfter))
	b = AppendBytes(b, bk.Metadata)
	if len(bk.CalendarIDs) > 0 {
		b = appendMembers(appendSeries(b, bk), bk.CalendarIDs)
	} else if bk.Series != nil || bk.SeriesID != "" {
		b = appendSeries(b, bk)
	}
	if moving {
		b = AppendString(AppendString(b, bk.MoveID), bk.MoveOf)
	}
	return b
}

// ReadBooking reads what AppendBooking wrote.
func ReadBooking(r *Reader) Booking {
	var bk Booking
	v := r.Byte()
	if v < bookingCodecVersion || v > bookingCodecVersionMove {
		r.fail()
		return bk
	}
	bk.ID = r.String()
	bk.CalendarID = r.String()
	bk.Start = r.Time()
	bk.End = r.Time()
	bk.Customer = r.String()
	bk.Status = r.String()
	bk.CreatedAt = r.Time()
	if r.Byte() == 1 {
		t := r.Time()
		bk.CancelledAt = &t
	}
	if r.Byte() == 1 {
		t := r.Time()
		bk.ExpiresAt = &t
	}
	bk.BufferBefore = time.Duration(r.Int64())
	bk.BufferAfter = time.Duration(r.Int64())
	bk.Metadata = r.Bytes()
	if v >= bookingCodecVersionSeries {
		r.series(&bk)
	}
	if v >= bookingCodecVersionMembers {
		bk.CalendarIDs = r.members()
	}
	if v == bookingCodecVersionMove {
		bk.MoveID, bk.MoveOf = r.String(), r.String()
	}
	return bk
}

func decodeBooking(v []byte) (Booking, error) {
	r := NewReader(v)
	bk := ReadBooking(r)
	return bk, r.Err()
}
